// Package afunix lets a test that needs AF_UNIX sockets skip, saying so,
// where the system has none: Wine's Winsock (make windows-test). It asks
// the system, once, rather than trusting GOOS: Windows 10 1803 and later
// have AF_UNIX, and run these tests.
package afunix

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

var probe = sync.OnceValue(func() error {
	dir, err := os.MkdirTemp("", "afunix")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		return err
	}
	return l.Close()
})

// Require skips the test when this system cannot create an AF_UNIX
// socket: the address family is not supported. Any other failure of the
// trial socket fails the test, so that a broken set-up is never hidden as
// a skip.
func Require(tb testing.TB) {
	tb.Helper()
	err := probe()
	switch {
	case err == nil:
	case errors.Is(err, errNoFamily):
		tb.Skipf("needs AF_UNIX sockets, which this system does not have (%v)", err)
	default:
		tb.Fatalf("cannot tell whether this system has AF_UNIX sockets: %v", err)
	}
}
