package logging

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

// legacyArgs sets each of klog's own flags, some in the form without a value.
// Log files would go to dir.
func legacyArgs(dir string) map[string]string {
	return map[string]string{
		"logtostderr":       "--logtostderr",
		"alsologtostderr":   "--alsologtostderr=true",
		"log_dir":           "--log_dir=" + dir,
		"log_file":          "--log_file=" + filepath.Join(dir, "registrar.log"),
		"log_file_max_size": "--log_file_max_size=10",
		"stderrthreshold":   "--stderrthreshold=INFO",
		"skip_headers":      "--skip_headers",
		"skip_log_headers":  "--skip_log_headers",
		"add_dir_header":    "--add_dir_header",
		"one_output":        "--one_output",
		"log_backtrace_at":  "--log_backtrace_at=legacy_test.go:1",
	}
}

func TestLegacyFlagsWithoutEffect(t *testing.T) {
	formats := []struct {
		args       []string
		wantEffect string
	}{
		{args: []string{"--logging-format=json"}, wantEffect: "it has no effect with --logging-format=json"},
		{args: []string{"--log-text-split-stream"}, wantEffect: "it has no effect with --log-text-split-stream"},
	}
	dir := t.TempDir()
	for _, format := range formats {
		for name, arg := range legacyArgs(dir) {
			t.Run(strings.Join(format.args, " ")+" "+arg, func(t *testing.T) {
				_, stderr := apply(t, append(format.args, arg)...)
				want := "flag --" + name + " is deprecated and will be removed; " + format.wantEffect
				checkMessages(t, "stderr", stderr.lines(), []string{want})

				// Still written as without the flag: to stderr, with a header.
				klog.ErrorS(nil, "after")
				lines := stderr.lines()
				if len(lines) != 2 || message(t, lines[1]) != "after" {
					t.Errorf("the flag changed the output: %q", lines)
				}
			})
		}
	}
	if files, err := os.ReadDir(dir); err != nil || len(files) != 0 {
		t.Errorf("klog wrote log files (%v): %v", err, files)
	}
}

func TestLegacyFlagsAllAtOnce(t *testing.T) {
	legacy := legacyArgs(t.TempDir())
	args := []string{"--logging-format=json"}
	for _, arg := range legacy {
		args = append(args, arg)
	}
	_, stderr := apply(t, args...)

	lines := stderr.lines()
	if len(lines) != len(legacy) {
		t.Errorf("%d lines, want one warning for each of the %d flags: %q", len(lines), len(legacy), lines)
	}
	for name := range legacy {
		if count := strings.Count(stderr.String(), "flag --"+name+" is deprecated"); count != 1 {
			t.Errorf("--%s: %d warnings, want 1", name, count)
		}
	}
}

// With the text format and no split stream, klog itself honours its flags.
func TestLegacyFlagsHonouredByKlog(t *testing.T) {
	logFile := filepath.Join(t.TempDir(), "registrar.log")
	stdout, stderr := apply(t, "--logtostderr=false", "--log_file="+logFile, "--skip_headers", "--skip_log_headers", "-v=1")
	klog.V(1).InfoS("verbose")
	klog.V(2).InfoS("too verbose")
	klog.Flush()

	if stdout.String() != "" || stderr.String() != "" {
		t.Errorf("klog wrote to the injected writers: stdout %q, stderr %q", stdout, stderr)
	}
	content, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatalf("--log_file was not honoured: %v", err)
	}
	const effect = " is deprecated and will be removed; klog still honours it for now because the text format is used without a split stream"
	want := []string{ // flags in lexical order, as the flag package visits them
		"flag --log_file" + effect,
		"flag --logtostderr" + effect,
		"flag --skip_headers" + effect,
		"flag --skip_log_headers" + effect,
		`"verbose"`, // --skip_headers: no header
	}
	if got := strings.Split(strings.TrimSuffix(string(content), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("log file:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The usage lists klog's own flags apart: IsLegacyFlag must name exactly them.
func TestIsLegacyFlag(t *testing.T) {
	options, fs := parse(t)
	legacy := legacyArgs(t.TempDir())
	fs.VisitAll(func(f *flag.Flag) {
		_, want := legacy[f.Name]
		if got := options.IsLegacyFlag(f); got != want {
			t.Errorf("IsLegacyFlag(--%s) = %v, want %v", f.Name, got, want)
		}
	})
	// Another Options' flag of the same name is not this one's.
	_, other := parse(t)
	if options.IsLegacyFlag(other.Lookup("logtostderr")) {
		t.Error("IsLegacyFlag is true for another Options' --logtostderr")
	}
}
