package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeModule writes a module whose tests pass, skip and fail as named.
func writeModule(t *testing.T, withFailure bool) string {
	t.Helper()
	dir := t.TempDir()
	src := `package m

import "testing"

func TestPasses(t *testing.T) { t.Log("quiet when it passes") }

func TestSkips(t *testing.T) { t.Skip("needs a thing this machine lacks") }

func TestSubtests(t *testing.T) {
	t.Run("runs", func(t *testing.T) {})
	t.Run("skips", func(t *testing.T) { t.Skipf("case %d is off", 2) })
}
`
	if withFailure {
		src += `
func TestFails(t *testing.T) { t.Log("said before failing"); t.Error("the failure") }
`
	}
	for name, content := range map[string]string{
		"go.mod":    "module example.com/m\n\ngo 1.26\n",
		"m_test.go": src,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// goCommand is the go command running this test: go test puts its GOROOT's
// bin first in the tests' PATH.
func goCommand() string { return "go" }

func TestListsSkipsAndKeepsOutputShort(t *testing.T) {
	dir := writeModule(t, false)
	record := filepath.Join(t.TempDir(), "bin", "skips.txt") // bin/ not made yet
	var stdout, stderr bytes.Buffer
	status := run(invocation{dir: dir, goCmd: goCommand(), record: record, args: []string{"-count=1", "."},
		stdout: &stdout, stderr: &stderr})
	if status != 0 {
		t.Fatalf("status %d, want 0; stdout:\n%s\nstderr:\n%s", status, &stdout, &stderr)
	}
	out := stdout.String()
	for _, want := range []string{
		"ok  \texample.com/m\t",
		"go test -count=1 .: 2 skipped:\n",
		"  example.com/m TestSkips: m_test.go:7: needs a thing this machine lacks\n",
		"  example.com/m TestSubtests/skips: m_test.go:11: case 2 is off\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"quiet when it passes", "=== RUN", "--- PASS", "\nPASS\n"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("stdout has %q, which go test without -v does not print:\n%s", unwanted, out)
		}
	}
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	want := "example.com/m\tTestSkips\tm_test.go:7: needs a thing this machine lacks\n" +
		"example.com/m\tTestSubtests/skips\tm_test.go:11: case 2 is off\n"
	if string(b) != want {
		t.Errorf("record:\n%s\nwant:\n%s", b, want)
	}
}

func TestFailureShowsItsOutputAndStatus(t *testing.T) {
	dir := writeModule(t, true)
	var stdout, stderr bytes.Buffer
	status := run(invocation{dir: dir, goCmd: goCommand(), args: []string{"-count=1", "."}, stdout: &stdout, stderr: &stderr})
	if status != 1 {
		t.Errorf("status %d, want go test's 1", status)
	}
	out := stdout.String()
	for _, want := range []string{"--- FAIL: TestFails", "said before failing", "the failure", "FAIL\texample.com/m\t"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "quiet when it passes") {
		t.Errorf("stdout has a passing test's output:\n%s", out)
	}
}

func TestBuildErrorShows(t *testing.T) {
	dir := writeModule(t, false)
	if err := os.WriteFile(filepath.Join(dir, "broken_test.go"), []byte("package m\n\nvar x int = \"not an int\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if status := run(invocation{dir: dir, goCmd: goCommand(), args: []string{"."}, stdout: &stdout, stderr: &stderr}); status == 0 {
		t.Errorf("status 0 for a package that does not compile")
	}
	if all := stdout.String() + stderr.String(); !strings.Contains(all, "broken_test.go:3") {
		t.Errorf("the compiler's error is not shown:\n%s", all)
	}
}

func TestCIFailsOnUnexpectedSkips(t *testing.T) {
	dir := writeModule(t, false)
	for _, tc := range []struct {
		ci         string
		wantStatus int
	}{{"", 0}, {"false", 0}, {"0", 0}, {"true", 1}, {"1", 1}} {
		var stdout, stderr bytes.Buffer
		status := run(invocation{dir: dir, goCmd: goCommand(), args: []string{"."}, stdout: &stdout, stderr: &stderr, ci: tc.ci})
		if status != tc.wantStatus {
			t.Errorf("CI=%q: status %d, want %d; stderr:\n%s", tc.ci, status, tc.wantStatus, &stderr)
		}
		if tc.wantStatus == 1 && !strings.Contains(stderr.String(), "example.com/m TestSkips: ") {
			t.Errorf("CI=%q: stderr does not name the skipped test:\n%s", tc.ci, &stderr)
		}
	}
}

func TestExpectedSkipsAreAllowed(t *testing.T) {
	e := expectedSkips[0]
	got := unexpectedSkips([]skip{{Package: e.pkg, Test: e.test}, {Package: e.pkg, Test: e.test + "Other"}})
	if len(got) != 1 || got[0].Test != e.test+"Other" {
		t.Errorf("unexpectedSkips = %v, want only %sOther", got, e.test)
	}
}
