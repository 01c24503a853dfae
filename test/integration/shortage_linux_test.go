package integration

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/test/poll"

	"golang.org/x/sys/unix"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Out of file descriptors while publishing again: the registrar retries
// with a backoff instead of exiting, says why, and publishes once
// descriptors are free again.
func TestPublishesAgainOnceFileDescriptorsAreFree(t *testing.T) {
	const name = "fds.csi.example.com"
	n, registrar := published(t, name)
	socket := n.socketPath(name)

	pid := registrar.cmd.Process.Pid
	var limit unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &limit); err != nil {
		t.Fatal(err)
	}
	// A new descriptor must be numbered below the soft limit, and 0 to 2
	// are taken: no new one can be opened.
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 3, Max: limit.Max}, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(socket); err != nil {
		t.Fatal(err)
	}
	poll.UntilWithin(t, slowTimeout, "the registrar reports the failure", func() bool {
		if !registrar.running() {
			t.Fatalf("the registrar exited: %v", registrar.err)
		}
		return strings.Contains(registrar.stderr.String(), "Cannot publish the registration socket: trying again after a backoff")
	})
	if !strings.Contains(registrar.stderr.String(), "too many open files") {
		t.Error("the log does not say why")
	}

	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &limit, nil); err != nil {
		t.Fatal(err)
	}
	n.waitForSocket(t, name, registrar)
	if _, err := kubeletClient(t, socket).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo on the socket published again: %v", err)
	}
	st := n.status(t, n.httpAddr)
	if st["publishError"] != nil {
		t.Errorf("/status publishError = %v after publishing", st["publishError"])
	}
	if pubs, _ := st["socketPublications"].(map[string]any); pubs["deleted"] != 1.0 {
		t.Errorf("socketPublications = %v, want one after the deletion", pubs)
	}
}
