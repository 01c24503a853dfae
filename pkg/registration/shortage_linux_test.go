package registration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/test/poll"
)

// A registry directory on a file system out of inodes: publishing again
// after a deletion fails with ENOSPC, and must be retried, not end Run.
func TestPublishesAgainOnceInodesAreFree(t *testing.T) {
	dir := shortTempDir(t)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "nr_inodes=16,size=1m"); err != nil {
		t.Skipf("cannot mount a small tmpfs to run out of inodes (needs root): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	r := start(t, dir)
	path := r.srv.SocketPathForTest()

	var fillers []string
	for i := 0; ; i++ {
		name := filepath.Join(dir, fmt.Sprintf("filler-%d", i))
		err := os.WriteFile(name, nil, 0o600)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fillers = append(fillers, name)
	}
	if len(fillers) == 0 {
		t.Fatal("no inode was free to begin with")
	}
	// Moved away rather than deleted: in a tmpfs each name counts against
	// the inodes, and a deletion would free one.
	if err := os.Rename(path, filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the failure is reported", func() bool {
		return strings.Contains(r.srv.Status().PublishError, "no space left")
	})
	st := r.srv.Status()
	if st.Ready || !strings.Contains(st.Reason, "cannot publish the registration socket") || st.NextPublishRetry == nil {
		t.Errorf("Status = %+v, want not ready, with the reason and the next try", st)
	}
	select {
	case <-r.done:
		t.Fatalf("Run returned on a shortage of inodes: %v", r.runErr)
	default:
	}

	for _, f := range fillers[:2] {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "the socket is published again", func() bool {
		return servesOwn(r.srv)
	})
	if st := r.srv.Status(); st.PublishError != "" || st.NextPublishRetry != nil || st.Publications[ReasonDeleted] != 1 {
		t.Errorf("Status after publishing = %+v, want no error and one publication after the deletion", st)
	}
}
