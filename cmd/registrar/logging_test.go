package main

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/test/removeall"
)

// The logging set-up changes process-wide state, once per process: these
// tests run the registrar as a process of its own, this test binary, whose
// TestMain runs main when runMainEnv is set.
const runMainEnv = "REGISTRAR_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) != "" {
		main()
	}
	os.Exit(m.Run())
}

// registrarOutput is what a registrar process wrote and how it ended.
type registrarOutput struct {
	stdout, stderr string
	code           int
}

// lines are the non-empty lines of out.
func lines(out string) []string {
	return slices.DeleteFunc(strings.Split(out, "\n"), func(l string) bool { return l == "" })
}

// runRegistrar runs the registrar with args and without
// --kubelet-registration-path, so that it logs "Invalid command line" and
// exits 1 once the logging flags pass. At -v=2 it also logs, as an info
// line, that the termination message file does not exist.
func runRegistrar(t *testing.T, args ...string) registrarOutput {
	t.Helper()
	removeall.Require(t)
	if emulator := os.Getenv("REGISTRAR_EMULATOR"); emulator != "" {
		// make arch-test runs this binary under a user-mode emulator (go
		// test -exec), which would be needed by the registrar it starts too;
		// and a fork of the emulated, many-threaded process may hang in the
		// emulator before its exec. test/integration runs the emulated
		// binary with these flags.
		t.Skipf("runs under %s: the test binary does not start itself there", emulator)
	}
	args = append([]string{"--termination-message-path=" + filepath.Join(t.TempDir(), "absent")}, args...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if errors.Is(err, syscall.ENOEXEC) {
		// The test binary runs under an emulator that go test -exec names
		// outside make arch-test.
		t.Skipf("the test binary cannot start itself on this system (%v): it runs under an emulator", err)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running the registrar %q: %v", args, err)
	}
	return registrarOutput{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
}

// jsonMessages checks that each line is a JSON object with component-base's
// keys and returns the messages.
func jsonMessages(t *testing.T, stream string, out string) []string {
	t.Helper()
	var messages []string
	for _, line := range lines(out) {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("%s: not a JSON line: %q: %v", stream, line, err)
		}
		for _, key := range []string{"ts", "caller", "msg"} {
			if _, ok := entry[key]; !ok {
				t.Errorf("%s: line without %q: %s", stream, key, line)
			}
		}
		messages = append(messages, entry["msg"].(string))
	}
	return messages
}

func TestJSONFormat(t *testing.T) {
	out := runRegistrar(t, "--logging-format=json", "-v=2")
	if out.code != exitError {
		t.Errorf("exit code %d, want %d; stderr:\n%s", out.code, exitError, out.stderr)
	}
	if out.stdout != "" {
		t.Errorf("stdout has %q, want everything on stderr", out.stdout)
	}
	want := []string{"Invalid command line", "No termination message file: not running under kubelet; reasons are only logged"}
	if got := jsonMessages(t, "stderr", out.stderr); !slices.Equal(got, want) {
		t.Errorf("messages on stderr %q, want %q", got, want)
	}
	if !strings.Contains(out.stderr, `"err":"--kubelet-registration-path: `) {
		t.Errorf("the error line does not carry the error as \"err\": %s", out.stderr)
	}
}

// With a split stream, info lines go to stdout, errors to stderr; a
// buffer of info lines is flushed when the registrar exits.
func TestSplitStreams(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"text", []string{"--log-text-split-stream"}},
		{"text buffered", []string{"--log-text-split-stream", "--log-text-info-buffer-size=64Ki"}},
		{"json", []string{"--logging-format=json", "--log-json-split-stream"}},
		{"json buffered", []string{"--logging-format=json", "--log-json-split-stream", "--log-json-info-buffer-size=64Ki"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := runRegistrar(t, append(tc.args, "-v=2")...)
			if out.code != exitError {
				t.Errorf("exit code %d, want %d; stderr:\n%s", out.code, exitError, out.stderr)
			}
			stdout, stderr := lines(out.stdout), lines(out.stderr)
			if len(stdout) != 1 || !strings.Contains(stdout[0], "No termination message file") {
				t.Errorf("stdout %q, want the info line alone", stdout)
			}
			if len(stderr) != 1 || !strings.Contains(stderr[0], "Invalid command line") {
				t.Errorf("stderr %q, want the error line alone", stderr)
			}
		})
	}
}

// A logging value that does not parse stops the registrar with exit code
// 2, one that parses and cannot be used with 1 (upstream's rule for every
// flag), both before it logs anything.
func TestBadLoggingValuesExit(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"--logging-format=xml"}, `Unsupported log format`, exitError},
		{[]string{"--logging-format=json", "--vmodule=main=4"}, `vmodule: Forbidden: Only supported for text log format`, exitError},
		{[]string{"--log-flush-frequency=0s"}, `flushFrequency: Invalid value: "0s": Must be greater than zero`, exitError},
		{[]string{"-v=-1"}, `invalid value "-1" for flag -v`, exitUsage},
		{[]string{"-v=high"}, `invalid value "high" for flag -v`, exitUsage},
		{[]string{"--vmodule=main"}, `"main" does not have the pattern=N format`, exitUsage},
		{[]string{"--log-text-info-buffer-size=lots"}, `invalid value "lots" for flag -log-text-info-buffer-size`, exitUsage},
		{[]string{"--logtostderr=maybe"}, `invalid boolean value "maybe" for -logtostderr`, exitUsage},
		{[]string{"--log_file_max_size=big"}, `invalid value "big" for flag -log_file_max_size`, exitUsage},
		{[]string{"--stderrthreshold=LOUD"}, `invalid value "LOUD" for flag -stderrthreshold`, exitUsage},
		{[]string{"--log_backtrace_at=nowhere"}, `invalid value "nowhere" for flag -log_backtrace_at`, exitUsage},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out := runRegistrar(t, tc.args...)
			if out.code != tc.code {
				t.Errorf("exit code %d, want %d", out.code, tc.code)
			}
			if !strings.Contains(out.stderr, tc.want) {
				t.Errorf("stderr does not say %q:\n%s", tc.want, out.stderr)
			}
			if strings.Contains(out.stderr, "Invalid command line") {
				t.Errorf("the registrar went on after the logging flags failed:\n%s", out.stderr)
			}
		})
	}
}

// oldKlogArgs gives each of klog's own flags a value, some in the form
// without one. Log files would go to dir.
func oldKlogArgs(dir string) map[string]string {
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
		"log_backtrace_at":  "--log_backtrace_at=logging_test.go:1",
	}
}

// klog's own flags are accepted, each with one deprecation warning; they do
// nothing where klog does not write itself.
func TestOldKlogFlagsWithoutEffect(t *testing.T) {
	if got, want := len(oldKlogArgs("")), len(oldKlogFlags); got != want {
		t.Fatalf("the test sets %d of klog's flags, the registrar accepts %d", got, want)
	}
	for _, format := range []struct {
		args   []string
		effect string
	}{
		{[]string{"--logging-format=json"}, "it has no effect with --logging-format=json"},
		{[]string{"--log-text-split-stream"}, "it has no effect with --log-text-split-stream"},
	} {
		t.Run(format.args[0], func(t *testing.T) {
			removeall.Require(t)
			dir := t.TempDir()
			args := format.args
			for _, arg := range oldKlogArgs(dir) {
				args = append(args, arg)
			}
			out := runRegistrar(t, args...)
			if out.code != exitError {
				t.Errorf("exit code %d, want %d; stderr:\n%s", out.code, exitError, out.stderr)
			}
			all := out.stdout + out.stderr
			for name := range oldKlogArgs(dir) {
				warning := "flag --" + name + " is deprecated and will be removed; " + format.effect
				if n := strings.Count(all, warning); n != 1 {
					t.Errorf("%d warnings %q, want 1; output:\n%s", n, warning, all)
				}
			}
			if n := len(lines(all)); n != len(oldKlogFlags)+1 {
				t.Errorf("%d lines, want a warning for each flag and the error:\n%s", n, all)
			}
			if files, err := os.ReadDir(dir); err != nil || len(files) != 0 {
				t.Errorf("klog wrote log files (%v): %v", err, files)
			}
		})
	}
}

// With the text format and no split stream, klog itself honours its own
// flags, as upstream v2.10 did.
func TestOldKlogFlagsHonouredByKlog(t *testing.T) {
	removeall.Require(t)
	logFile := filepath.Join(t.TempDir(), "registrar.log")
	out := runRegistrar(t, "--logtostderr=false", "--log_file="+logFile, "--skip_headers", "--skip_log_headers", "-v=2")
	if out.code != exitError {
		t.Errorf("exit code %d, want %d; stderr:\n%s", out.code, exitError, out.stderr)
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
		`"Invalid command line" err="--kubelet-registration-path: `, // --skip_headers: no header
		`"No termination message file: not running under kubelet; reasons are only logged"`,
	}
	got := lines(string(content))
	if len(got) != len(want) {
		t.Fatalf("log file:\n%s\nwant lines starting:\n%s", content, strings.Join(want, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("log file line %d: %q, want it to start with %q", i+1, got[i], want[i])
		}
	}
	if out.stdout != "" {
		t.Errorf("stdout has %q", out.stdout)
	}
}

// The registrar turns component-base's LoggingAlphaOptions on: the help of
// the flags it guards must not send the operator to a feature gate.
func TestSplitStreamHelpNamesNoFeatureGate(t *testing.T) {
	o, err := parseFlags("registrar", nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"log-text-split-stream", "log-text-info-buffer-size", "log-json-split-stream", "log-json-info-buffer-size"} {
		f := o.flags.Lookup(name)
		if f == nil {
			t.Errorf("--%s does not exist", name)
			continue
		}
		if strings.Contains(f.Usage, "feature gate") {
			t.Errorf("--%s's help names a feature gate: %q", name, f.Usage)
		}
	}
}
