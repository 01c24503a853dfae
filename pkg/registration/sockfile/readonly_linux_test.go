package sockfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A registry the registrar cannot create files in is named, not the hidden
// name the socket would have had. Root writes to a directory whatever its
// mode, so as root the directory is a read-only tmpfs (EROFS); otherwise
// its mode says no (EACCES).
func TestListenInAReadOnlyDirectoryNamesIt(t *testing.T) {
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY, "size=64k"); err != nil {
			t.Fatalf("mounting a read-only tmpfs: %v", err)
		}
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	} else {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	}
	s, err := Listen(filepath.Join(dir, "ro.csi.example.com-reg.sock"))
	if err == nil {
		s.Close()
		t.Fatal("Listen succeeded in a read-only directory")
	}
	msg := err.Error()
	if want := "cannot create a socket in " + dir + ": bind: "; !strings.HasPrefix(msg, want) {
		t.Errorf("error %q, want it to start with %q", msg, want)
	}
	if strings.Contains(msg, "/.ro.csi.example.com") {
		t.Errorf("error %q names the hidden socket", msg)
	}
}
