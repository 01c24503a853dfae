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
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
	"github.com/csi-registrar/node-driver-registrar/test/poll"
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
	clk := clocktesting.NewFakeClock(time.Now())
	w := newSocketWatcher(klog.Background(), clk, socket, watchHooks{})
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
		change, err := nextAtDeadline(t, ctx, w, clk)
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
		change, err := w.next(ctx, time.Time{}, sockfile.ID{})
		if err != nil || change != socketCreated {
			t.Fatalf("a socket created %s: next = %v, %v; want socketCreated", when, change, err)
		}
		_ = l.Close() // removes the socket
		if change, err := w.next(ctx, time.Time{}, sockfile.ID{}); err != nil || change != socketRemoved {
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

// nextAtDeadline waits with w.next for a deadline a second ahead on clk,
// and steps clk to it once w waits for it.
func nextAtDeadline(t *testing.T, ctx context.Context, w *socketWatcher, clk *clocktesting.FakeClock) (socketChange, error) {
	t.Helper()
	type result struct {
		change socketChange
		err    error
	}
	done := make(chan result, 1)
	go func() {
		change, err := w.next(ctx, clk.Now().Add(time.Second), sockfile.ID{})
		done <- result{change, err}
	}()
	poll.StepThrough(t, clk, time.Second)
	r := <-done
	return r.change, r.err
}

// watched tells whether w watches the directory now at dir.
func watched(w *socketWatcher, dir string) bool {
	info, err := os.Stat(dir)
	return w.dir == dir && err == nil && os.SameFile(info, w.dirInfo)
}
