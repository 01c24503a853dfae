// Package removeall lets a test whose temporary directory (t.TempDir)
// holds files skip, saying so, where os.RemoveAll cannot delete them, so
// that the test's cleanup would fail: Wine 8 (make windows-test). On
// Windows os.RemoveAll deletes each file through a handle to it, with
// NtSetInformationFile's FileDispositionInformationEx, which Wine 8
// answers with STATUS_NOT_IMPLEMENTED ("Invalid function"); Wine 10 and
// Windows 10 1607 and later have it, and run these tests. It asks the
// system, once, rather than trusting GOOS.
package removeall

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

var probe = sync.OnceValue(func() error {
	dir, err := os.MkdirTemp("", "removeall")
	if err != nil {
		return err
	}
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		return err
	}
	err = os.RemoveAll(dir)
	if err != nil {
		// os.Remove deletes by name, which every system can.
		_ = os.Remove(file)
		_ = os.Remove(dir)
	}
	return err
})

// Require skips the test when os.RemoveAll cannot delete a file on this
// system because the system lacks the call it makes. Any other failure of
// the trial fails the test, so that a broken set-up is never hidden as a
// skip.
func Require(tb testing.TB) {
	tb.Helper()
	err := probe()
	switch {
	case err == nil:
	case errors.Is(err, errNotImplemented):
		tb.Skipf("needs os.RemoveAll to delete its temporary files, through the file's handle (FileDispositionInformationEx), which this system does not implement (%v)", err)
	default:
		tb.Fatalf("cannot tell whether os.RemoveAll works on this system: %v", err)
	}
}
