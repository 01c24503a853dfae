package logging

import (
	"bytes"
	"flag"
	"runtime"
	"strings"
	"sync"
	"testing"

	"k8s.io/klog/v2"
)

// syncBuffer is an output the test can read while klog's flush daemon may
// write to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines returns the complete lines written so far.
func (b *syncBuffer) lines() []string {
	text := strings.TrimSuffix(b.String(), "\n")
	if text == "" {
		return nil
	}
	return strings.Split(text, "\n")
}

// restoreKlog puts klog's global state (logger, flags, flush daemon) back as
// it was when the test ends.
func restoreKlog(t testing.TB) {
	t.Helper()
	state := klog.CaptureState()
	t.Cleanup(state.Restore)
}

// parse registers the options on a new flag set and parses args.
func parse(t testing.TB, args ...string) (*Options, *flag.FlagSet) {
	t.Helper()
	options := NewOptions()
	fs := flag.NewFlagSet(t.Name(), flag.ContinueOnError)
	options.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return options, fs
}

// apply configures klog from args for the rest of the test and returns what
// it writes to stdout and stderr.
func apply(t testing.TB, args ...string) (stdout, stderr *syncBuffer) {
	t.Helper()
	restoreKlog(t)
	options, fs := parse(t, args...)
	stdout, stderr = new(syncBuffer), new(syncBuffer)
	if err := options.Apply(fs, stdout, stderr); err != nil {
		t.Fatalf("Apply with %q: %v", args, err)
	}
	return stdout, stderr
}

// callerLine returns the line it is called from; callerLine()+1 is the line
// of a logging call written right below it.
func callerLine() int {
	_, _, line, _ := runtime.Caller(1)
	return line
}
