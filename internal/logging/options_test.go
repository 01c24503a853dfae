package logging

import (
	"flag"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

func TestBadValuesAreRejected(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		wantParse string   // part of the flag package's error, if parsing fails
		wantApply []string // parts of Apply's error
	}{
		{name: "format", args: []string{"--logging-format=xml"}, wantApply: []string{`--logging-format="xml" is not supported: use "text" or "json"`}},
		{name: "negative -v", args: []string{"-v=-1"}, wantApply: []string{"-v=-1 is not valid: use a verbosity from 0"}},
		{name: "-v not a number", args: []string{"-v=high"}, wantParse: `invalid value "high" for flag -v`},
		{name: "vmodule syntax", args: []string{"--vmodule=main"}, wantApply: []string{`--vmodule="main" is not valid`, "pattern=N"}},
		{name: "vmodule negative", args: []string{"--vmodule=main=-1"}, wantApply: []string{`--vmodule="main=-1" is not valid`}},
		{name: "flush frequency", args: []string{"--log-flush-frequency=0s"}, wantApply: []string{"--log-flush-frequency=0s is not valid: use a positive duration"}},
		{name: "buffer size", args: []string{"--log-text-info-buffer-size=lots"}, wantParse: `"lots" is not a size: use a number of bytes (65536) or a quantity such as 64Ki`},
		{name: "json split with text", args: []string{"--log-json-split-stream"}, wantApply: []string{"--log-json-split-stream only applies to --logging-format=json"}},
		{name: "json buffer with text", args: []string{"--log-json-info-buffer-size=1Mi"}, wantApply: []string{"--log-json-info-buffer-size only applies to --logging-format=json"}},
		{name: "text split with json", args: []string{"--logging-format=json", "--log-text-split-stream"}, wantApply: []string{"--log-text-split-stream only applies to --logging-format=text"}},
		{name: "text buffer with json", args: []string{"--logging-format=json", "--log-text-info-buffer-size=1Ki"}, wantApply: []string{"--log-text-info-buffer-size only applies to --logging-format=text"}},
		{name: "several at once", args: []string{"--logging-format=json", "-v=-2", "--log-flush-frequency=-1s"}, wantApply: []string{"-v=-2 is not valid", "--log-flush-frequency=-1s is not valid"}},
		{name: "legacy bool", args: []string{"--logtostderr=maybe"}, wantParse: `"maybe" is not a boolean`},
		{name: "legacy size", args: []string{"--log_file_max_size=big"}, wantParse: `"big" is not a number of megabytes`},
		{name: "legacy threshold honoured by klog", args: []string{"--stderrthreshold=LOUD"}, wantApply: []string{`--stderrthreshold="LOUD" is not valid`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			restoreKlog(t)
			options := NewOptions()
			fs := flag.NewFlagSet(t.Name(), flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			options.AddFlags(fs)
			err := fs.Parse(tc.args)
			if tc.wantParse != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantParse) {
					t.Fatalf("parse error %v, want one containing %q", err, tc.wantParse)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}

			var stdout, stderr syncBuffer
			err = options.Apply(fs, &stdout, &stderr)
			if err == nil {
				t.Fatal("Apply accepted the values")
			}
			for _, want := range tc.wantApply {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if stdout.String() != "" || stderr.String() != "" {
				t.Errorf("Apply wrote output although it failed: stdout %q, stderr %q", &stdout, &stderr)
			}
		})
	}
}

func TestBufferSizeWithoutSplitStreamIsWarnedAbout(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			stdout, stderr := apply(t, "--logging-format="+format, "--log-"+format+"-info-buffer-size=64Ki")
			klog.InfoS("unbuffered")
			want := "--log-" + format + "-info-buffer-size has no effect without --log-" + format + "-split-stream: all messages go unbuffered to stderr"
			checkMessages(t, "stderr", stderr.lines(), []string{want, "unbuffered"})
			if stdout.String() != "" {
				t.Errorf("stdout: %q, want nothing", stdout)
			}
		})
	}
}

func TestApplyReplacesEarlierSetting(t *testing.T) {
	_, first := apply(t, "--logging-format=json")
	_, second := apply(t, "--log-text-split-stream")
	klog.ErrorS(nil, "after the second Apply")
	if first.String() != "" {
		t.Errorf("the first logger still writes: %q", first)
	}
	checkMessages(t, "stderr", second.lines(), []string{"after the second Apply"})
}

func TestParseByteSize(t *testing.T) {
	// 2 GiB, as Kubernetes; where int has 32 bits (linux/arm, run by make
	// arch-test) one byte less: 2 GiB would wrap to a negative buffer
	// size, which bufio replaces with 4 KiB.
	capped := int64(2 << 30)
	if strconv.IntSize == 32 {
		capped = math.MaxInt32
	}
	tests := []struct {
		text    string
		want    int64
		wantErr bool
	}{
		{text: "0", want: 0},
		{text: "512", want: 512},
		{text: "64Ki", want: 64 << 10},
		{text: "1Mi", want: 1 << 20},
		{text: "1M", want: 1_000_000},
		{text: "500k", want: 500_000},
		{text: "500K", want: 500_000},
		{text: "1.5Ki", want: 1536},
		{text: "0.1k", want: 100},
		{text: "0.0001k", want: 1}, // rounded up
		{text: "2Gi", want: capped},
		{text: "3Gi", want: capped},
		{text: "8Ei", want: capped}, // beyond int64
		{text: "", wantErr: true},
		{text: "-1", wantErr: true},
		{text: "1e3", wantErr: true},
		{text: "1/2", wantErr: true},
		{text: "Ki", wantErr: true},
		{text: "1.2.3", wantErr: true},
		{text: "100m", wantErr: true},
		{text: "1KiB", wantErr: true},
		{text: "10 Ki", wantErr: true},
	}
	for _, tc := range tests {
		got, err := parseByteSize(tc.text)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d, error %v", tc.text, got, err, tc.want, tc.wantErr)
		}
	}
}
