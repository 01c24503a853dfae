package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
)

// setFlags lists the flags given on the command line, as -name=value.
func setFlags(o *options) []string {
	var given []string
	o.flags.Visit(func(f *flag.Flag) {
		given = append(given, fmt.Sprintf("-%s=%s", f.Name, f.Value.String()))
	})
	return given
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// FuzzCommandLine reads a command line as --diagnose reads PID 1's: the
// split gives back the bytes, an empty command line is refused, and any
// arguments either fail to parse or parse into flags that, written back as
// -name=value, parse into the same values and validate the same way.
func FuzzCommandLine(f *testing.F) {
	for _, args := range [][]string{
		{"/csi-node-driver-registrar", "--v=5", "--csi-address=/csi/csi.sock", "--kubelet-registration-path=/var/lib/kubelet/plugins/csi-hostpath/csi.sock", "--http-endpoint=:9809"},
		{"/csi-node-driver-registrar", "-v", "2", "-csi-address", "unix:///csi/csi.sock", "-kubelet-registration-path", "/k/csi.sock", "-timeout", "3s"},
		{"/csi-node-driver-registrar", "--connection-timeout=15s", "--health-port=9809", "--kubelet-registration-path=/k", "--mode=kubelet-registration-probe"},
		{"/r", "--logging-format=json", "--log-json-split-stream", "--log-json-info-buffer-size=64Ki", "--vmodule=main=4,*reg*=5"},
		{"/r", "--logtostderr=false", "--log_file_max_size=10", "--stderrthreshold=INFO", "--log-flush-frequency=1m30s"},
		{"/r", "--rejection-policy=exit", "--termination-message-path=/dev/termination-log", "--diagnose", "--enable-pprof=true"},
		{"/r", "--timeout=-1s", "--health-port=-1", "--mode=other", "--rejection-policy=never", "--v=0x7fffffff"},
		{"/r", "--csi-address", "--", "--v=1", "positional", "--v=2"},
		{"/r", "-h"}, {"/r", "--unknown"}, {"/r", "--csi-address"}, {"/r", "--v=x"}, {"/r", "---v=1"}, {"/r", "-=x"},
		{"/r"}, {""}, {"", ""},
	} {
		f.Add([]byte(strings.Join(args, "\x00") + "\x00"))
	}
	f.Add([]byte{})
	f.Add([]byte("/r\x00--v=1"))
	f.Add([]byte("\x00\x00"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		program, args, err := splitCmdline(raw)
		if len(raw) == 0 {
			if err == nil {
				t.Fatalf("splitCmdline(%q) = %q, %q; want an error", raw, program, args)
			}
			return
		}
		if err != nil {
			t.Fatalf("splitCmdline(%q): %v", raw, err)
		}
		joined := strings.Join(append([]string{program}, args...), "\x00")
		if joined != string(bytes.TrimSuffix(raw, []byte{0})) {
			t.Fatalf("splitCmdline(%q) = %q, %q, which join to %q", raw, program, args, joined)
		}

		first, err := parseFlags(program, args, io.Discard)
		if err != nil {
			return
		}
		given := setFlags(first)
		again, err := parseFlags(program, given, io.Discard)
		if err != nil {
			t.Fatalf("%q parsed, but its flags written back, %q, do not: %v", args, given, err)
		}
		if regiven := setFlags(again); strings.Join(regiven, "\x00") != strings.Join(given, "\x00") {
			t.Fatalf("%q parsed into %q, but those parse into %q", args, given, regiven)
		}
		if a, b := errorText(first.validate()), errorText(again.validate()); a != b {
			t.Fatalf("%q validates as %q, its flags written back %q as %q", args, a, given, b)
		}
	})
}
