package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestQuietNoticeAfterAMinuteWithoutOutput(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var out bytes.Buffer
	q := newQuietWatch(clock, "-race ./...", &out)
	notice := func(minutes string) string {
		return "go test -race ./...: still compiling or testing (" + minutes + " min so far)\n"
	}
	for _, step := range []struct {
		advance time.Duration
		output  string // what go test prints after the advance
		want    string // what the check then prints
	}{
		{59 * time.Second, "", ""},
		{time.Second, "", notice("1")},
		{30 * time.Second, "ok  \tpkg\n", ""},
		{30 * time.Second, "", ""}, // 30 s after go test's output
		{30 * time.Second, "", notice("2")},
		{time.Minute, "", notice("3")},
	} {
		clock.Step(step.advance)
		out.Reset()
		q.check()
		if out.String() != step.want {
			t.Errorf("at %v: printed %q, want %q", clock.Since(q.start), out.String(), step.want)
		}
		if step.output != "" {
			if _, err := q.writer(&bytes.Buffer{}).Write([]byte(step.output)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// While go test prints nothing, run says that it is still at work; here
// the test binary waits for a file that this test writes once it saw that.
func TestRunSaysWhileGoTestIsQuiet(t *testing.T) {
	dir := t.TempDir()
	release := filepath.Join(t.TempDir(), "release")
	src := `package m

import (
	"os"
	"testing"
	"time"
)

func TestWaitsForRelease(t *testing.T) {
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(os.Getenv("GOTEST_RELEASE")); err == nil {
			return
		}
	}
	t.Fatal("not released")
}
`
	for name, content := range map[string]string{
		"go.mod":    "module example.com/m\n\ngo 1.26\n",
		"m_test.go": src,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GOTEST_RELEASE", release)
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	stdoutR, stdoutW := io.Pipe()
	var stderr bytes.Buffer // read once run returned
	status := make(chan int, 1)
	go func() {
		status <- run(invocation{dir: dir, goCmd: goCommand(), args: []string{"-count=1", "."},
			stdout: stdoutW, stderr: &stderr, clock: clock})
		stdoutW.Close()
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		for sc := bufio.NewScanner(stdoutR); sc.Scan(); {
			lines <- sc.Text()
		}
	}()

	deadline := time.Now().Add(time.Minute)
	for !clock.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("run made no ticker")
		}
		time.Sleep(time.Millisecond)
	}
	clock.Step(quietAfter)
	const notice = "go test -count=1 .: still compiling or testing (1 min so far)"
	select {
	case line := <-lines:
		if line != notice {
			t.Fatalf("first line %q, want %q", line, notice)
		}
	case <-time.After(time.Until(deadline)):
		t.Fatal("no notice after a quiet minute")
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for line := range lines {
		rest = append(rest, line)
	}
	if s := <-status; s != 0 {
		t.Fatalf("status %d, want 0; stdout after the notice:\n%s\nstderr:\n%s", s, strings.Join(rest, "\n"), &stderr)
	}
	if len(rest) != 1 || !strings.HasPrefix(rest[0], "ok  \texample.com/m\t") {
		t.Errorf("after the notice, stdout is not go test's result line alone:\n%s", strings.Join(rest, "\n"))
	}
}
