package driver

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// A file system mounted over the watched directory hides it: the watch
// stays on the hidden directory and sees nothing of the new one. One
// unmounted under the watch drops it with no event that fsnotify passes
// on. Either way the look at the end of a wait with a deadline tells by
// the directory's identity, and puts the watch on the directory there now.
func TestWatchFollowsMountsOverTheDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := filepath.Join(t.TempDir(), "plugin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "csi.sock")
	w := newSocketWatcher(klog.Background(), socket)
	defer w.close()
	if w.dir != dir {
		t.Fatalf("watching %q; want %q", w.dir, dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	look := func(when string) {
		t.Helper()
		if watched(w, dir) {
			t.Fatalf("%s: the watch is on the directory at %s before the look", when, dir)
		}
		change, err := w.next(ctx, time.Now().Add(10*time.Millisecond), nil)
		if err != nil || change != noChange {
			t.Fatalf("%s: next = %v, %v; want noChange at the deadline", when, change, err)
		}
		if !watched(w, dir) {
			t.Fatalf("%s: the look at the deadline did not move the watch to the directory at %s", when, dir)
		}
	}
	created := func(when string) {
		t.Helper()
		l, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		change, err := w.next(ctx, time.Time{}, nil)
		if err != nil || change != socketCreated {
			t.Fatalf("a socket created %s: next = %v, %v; want socketCreated", when, change, err)
		}
		_ = l.Close() // removes the socket
		if change, err := w.next(ctx, time.Time{}, nil); err != nil || change != socketRemoved {
			t.Fatalf("the socket removed %s: next = %v, %v; want socketRemoved", when, change, err)
		}
	}

	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	look("after a mount over the directory")
	created("on the mounted file system")

	if err := unix.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	look("after the unmount")
	created("after the unmount")
}

// watched tells whether w watches the directory now at dir.
func watched(w *socketWatcher, dir string) bool {
	info, err := os.Stat(dir)
	return w.dir == dir && err == nil && os.SameFile(info, w.dirInfo)
}
