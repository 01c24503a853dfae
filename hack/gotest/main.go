// Command gotest runs go test with -json and prints what go test prints
// without -v (the packages' result lines, a failed test's output, build
// errors), then every test that skipped, with the reason it gave. make runs
// each of its go test commands through it (the Makefile's GO_TEST), so that
// a skip shows instead of passing silently. While go test prints nothing for
// a minute (a cold build), it says every minute that go test is still at work.
//
//	gotest [-dir DIR] [-go GO] [-record FILE] [--] <go test arguments>
//
// -record appends the skips to FILE, one per line (package, test, reason,
// tab-separated), for make test's list at its end. With CI set (other than
// "", "false" or "0"), a skip fails the run unless expectedSkips lists it.
// go test's exit status is passed on.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/utils/clock"
)

func main() {
	dir := flag.String("dir", "", "the directory to run go test in (default: the current one)")
	goCmd := flag.String("go", "go", "the go command")
	record := flag.String("record", "", "a file to append the skips to")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: gotest [-dir DIR] [-go GO] [-record FILE] [--] <go test arguments>")
		flag.PrintDefaults()
	}
	flag.Parse()
	os.Exit(run(invocation{dir: *dir, goCmd: *goCmd, record: *record, args: flag.Args(),
		stdout: os.Stdout, stderr: os.Stderr, ci: os.Getenv("CI")}))
}

type invocation struct {
	dir, goCmd, record string
	args               []string
	stdout, stderr     io.Writer
	ci                 string           // the environment's CI
	clock              clock.WithTicker // nil: the real one
}

func run(in invocation) int {
	cmd := exec.Command(in.goCmd, append([]string{"test", "-json"}, in.args...)...)
	cmd.Dir = in.dir
	if in.clock == nil {
		in.clock = clock.RealClock{}
	}
	quiet := newQuietWatch(in.clock, strings.Join(in.args, " "), in.stdout)
	cmd.Stderr = quiet.writer(in.stderr)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(in.stderr, "gotest:", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(in.stderr, "gotest:", err)
		return 1
	}
	stopWatch, watchDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		quiet.watch(stopWatch)
	}()
	skips := filter(stdout, quiet.writer(in.stdout))
	waitErr := cmd.Wait()
	close(stopWatch)
	<-watchDone

	if len(skips) > 0 {
		fmt.Fprintf(in.stdout, "go test %s: %d skipped:\n", strings.Join(in.args, " "), len(skips))
		for _, s := range skips {
			fmt.Fprintln(in.stdout, "  "+s.String())
		}
	}
	status := 0
	if in.record != "" && len(skips) > 0 {
		if err := appendRecord(in.record, skips); err != nil {
			fmt.Fprintln(in.stderr, "gotest:", err)
			status = 1
		}
	}
	if unexpected := unexpectedSkips(skips); len(unexpected) > 0 && inCI(in.ci) {
		fmt.Fprintf(in.stderr, "gotest: CI=%s: %d test(s) skipped that CI must run (give them what they need, or add them to hack/gotest's expectedSkips with the reason):\n", in.ci, len(unexpected))
		for _, s := range unexpected {
			fmt.Fprintln(in.stderr, "  "+s.String())
		}
		status = 1
	}
	var exitErr *exec.ExitError
	switch {
	case errors.As(waitErr, &exitErr):
		return exitErr.ExitCode()
	case waitErr != nil:
		fmt.Fprintln(in.stderr, "gotest:", waitErr)
		return 1
	}
	return status
}

// event is one line of go test -json (cmd/test2json's TestEvent).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type skip struct{ Package, Test, Reason string }

func (s skip) String() string {
	if s.Reason == "" {
		return s.Package + " " + s.Test
	}
	return s.Package + " " + s.Test + ": " + s.Reason
}

// filter copies go test's non-verbose output from the -json stream in to
// out, and returns the tests that skipped.
func filter(in io.Reader, out io.Writer) []skip {
	type key struct{ pkg, test string }
	// The output of each test still running, and of each top-level test
	// (its subtests' included), printed if it fails.
	own := map[key][]string{}
	top := map[key][]string{}
	var order []key // top-level tests in the order they started
	var skips []skip
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(out, sc.Text())
			continue
		}
		if e.Action == "build-output" {
			fmt.Fprint(out, e.Output)
			continue
		}
		if e.Test == "" {
			switch e.Action {
			case "output":
				if e.Output != "PASS\n" {
					fmt.Fprint(out, e.Output)
				}
			case "pass", "fail", "skip":
				// The test binary ended: print what a test that never
				// ended (a panic, a timeout) wrote.
				for _, k := range order {
					if k.pkg == e.Package && top[k] != nil {
						fmt.Fprint(out, strings.Join(top[k], ""))
						delete(top, k)
					}
				}
			}
			continue
		}
		k := key{e.Package, e.Test}
		tk := key{e.Package, strings.SplitN(e.Test, "/", 2)[0]}
		switch e.Action {
		case "run":
			if k == tk {
				order = append(order, tk)
				top[tk] = []string{}
			}
		case "output":
			if strings.HasPrefix(e.Output, "=== ") {
				continue // test2json's markers; go test without -v has none
			}
			own[k] = append(own[k], e.Output)
			if _, ok := top[tk]; ok {
				top[tk] = append(top[tk], e.Output)
			}
		case "skip":
			skips = append(skips, skip{Package: e.Package, Test: e.Test, Reason: reason(own[k])})
		case "fail":
			if k == tk {
				fmt.Fprint(out, strings.Join(top[tk], ""))
			}
		}
		if e.Action == "pass" || e.Action == "fail" || e.Action == "skip" {
			delete(own, k)
			if k == tk {
				delete(top, tk)
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "gotest: reading go test's output:", err)
	}
	return skips
}

// reason is what a skipped test wrote, less its "--- SKIP" line.
func reason(output []string) string {
	var lines []string
	for _, o := range output {
		l := strings.TrimSpace(o)
		if l == "" || strings.HasPrefix(l, "--- SKIP: ") {
			continue
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "; ")
}

func appendRecord(path string, skips []skip) error {
	// bin/ of a fresh clone, before anything is built.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	for _, s := range skips {
		fmt.Fprintf(f, "%s\t%s\t%s\n", s.Package, s.Test, s.Reason)
	}
	return f.Close()
}

func inCI(v string) bool { return v != "" && v != "false" && v != "0" }

// expectedSkips are the tests that skip in every run of make test, CI's
// included (CI runs as root), each with why it cannot run there.
var expectedSkips = []struct{ pkg, test, why string }{
	// Run by make handover-compat, which builds the older registrar it needs.
	{"github.com/csi-registrar/node-driver-registrar/test/integration", "TestHandsOverBetweenBuilds", "make handover-compat runs it"},
	// A read-only directory stops only a process without root.
	{"github.com/csi-registrar/node-driver-registrar/pkg/features/diagnose", "TestRunChecksWritability", "needs a user other than root"},
}

func unexpectedSkips(skips []skip) []skip {
	var out []skip
next:
	for _, s := range skips {
		for _, e := range expectedSkips {
			if s.Package == e.pkg && s.Test == e.test {
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}
