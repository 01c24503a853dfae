//go:build unix

package registration

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/poll"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	testingclock "k8s.io/utils/clock/testing"
)

// kill makes an instance vanish as a killed process does: its registration
// socket stops answering, and its files stay where they are.
func (r *running) kill() {
	r.srv.shared.Load().pub.grpc.Stop()
}

func TestHandedOverInstancePublishesAgainWhenTheNewerDies(t *testing.T) {
	dir := shortTempDir(t)
	older := startRegistered(t, dir)
	path := older.srv.SocketPathForTest()
	newer := start(t, dir)
	poll.Until(t, "the older instance steps aside", func() bool { return older.srv.Status().State == Superseded })
	if h := health(older.srv); !strings.Contains(h, "another instance") {
		t.Fatalf("older Health while the newer one serves = %+v, want superseded", h)
	}
	handedOver := lstat(t, path)

	newer.kill()
	// Nothing changed in the directory: only the connection the older
	// instance holds to the newer one tells it.
	poll.Until(t, "the older instance publishes again", func() bool {
		return servesOwn(older.srv)
	})
	if os.SameFile(handedOver, lstat(t, path)) {
		t.Error("the dead socket is still at the path")
	}
	if st := older.srv.Status(); st.Publications[ReasonVacated] != 1 || st.State != WaitingForKubelet {
		t.Errorf("older Status = %+v, want one vacated publication, waiting for kubelet", st)
	}
	if _, err := client(t, path).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo on the socket published again: %v", err)
	}
}

func TestSupersededInstancePublishesAgainWhenTheOwnerDies(t *testing.T) {
	dir := shortTempDir(t)
	r := start(t, dir)
	path := r.srv.SocketPathForTest()
	owner := serveForeign(t, path, testDriver)
	poll.Until(t, "the instance steps aside", func() bool { return r.srv.Status().State == Superseded })
	if h := health(r.srv); !strings.Contains(h, "another instance") {
		t.Fatalf("Health while the other instance serves = %+v, want superseded", h)
	}
	calls := owner.calls.Load()
	for range 5 {
		if h := health(r.srv); !strings.Contains(h, "another instance") {
			t.Fatalf("Health while the other instance serves = %+v, want superseded", h)
		}
	}
	if n := owner.calls.Load() - calls; n > 1 {
		t.Errorf("5 checks of a live owner called GetInfo %d times, want at most 1", n)
	}

	owner.stop()
	poll.Until(t, "the instance publishes again", func() bool {
		return servesOwn(r.srv)
	})
	if n := r.srv.Status().Publications[ReasonVacated]; n != 1 {
		t.Errorf("vacated publications = %d, want 1", n)
	}
}

// Clients that never finish their handshake hold the stop for
// handshakeTimeout at most (gRPC's ConnectionTimeout), not for gRPC's
// default of 120 s nor for the graceful stop's timeout.
func TestStopDoesNotWaitForSilentClients(t *testing.T) {
	dir := shortTempDir(t)
	// A graceful stop that could wait for long: only the clients' silence
	// may not hold the exit.
	srv := newServer(t, dir)
	srv.shutdownTimeout = time.Hour
	r := runServer(t, srv)
	srv.DriverFound(testDriver)
	r.waitServing(t)
	path := r.srv.SocketPathForTest()

	silent, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// A client that started the HTTP/2 preface and stopped.
	halfway, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer halfway.Close()
	if _, err := halfway.Write([]byte("PRI * HTTP/2.0")); err != nil {
		t.Fatal(err)
	}
	// A client that is connected and served.
	if _, err := client(t, path).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatal(err)
	}

	// The socket is withdrawn before any client is disconnected.
	closed := make(chan bool, 1)
	go func() {
		_, _ = io.Copy(io.Discard, silent)
		_, err := os.Lstat(path)
		closed <- errors.Is(err, fs.ErrNotExist)
	}()
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if removed := <-closed; !removed {
		t.Error("the silent client was disconnected while the socket was still at the path")
	}
}

// An error of the gRPC server's Serve reaches the loop: the socket at the
// path no longer answers, so it is published again.
func TestPublishesAgainWhenServingFails(t *testing.T) {
	r := start(t, shortTempDir(t))
	path := r.srv.SocketPathForTest()
	before := lstat(t, path)
	// Accept fails from now on, as on a listener closed under gRPC.
	if err := r.srv.shared.Load().pub.sock.Close(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the socket is published again", func() bool {
		return r.srv.Status().Publications[ReasonStale] == 1 && servesOwn(r.srv)
	})
	if os.SameFile(before, lstat(t, path)) {
		t.Error("the socket that stopped serving is still at the path")
	}
	if _, err := client(t, path).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo on the socket published again: %v", err)
	}
}

func TestRunsOnce(t *testing.T) {
	r := start(t, shortTempDir(t))
	if err := r.srv.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "already run") {
		t.Errorf("a second Run = %v, want an error at once", err)
	}
	if !servesOwn(r.srv) {
		t.Error("the first Run stopped serving after a second call")
	}
}

// Registered, the registration is ready only while the socket at the path
// is the one kubelet accepted: /status says what the loop found there
// instead, as soon as it looked.
func TestNotReadyWhileTheRegisteredSocketIsGone(t *testing.T) {
	fake := testingclock.NewFakeClock(time.Now())
	r := startRegistered(t, shortTempDir(t), func(c *Config) { c.Clock = fake })
	path := r.srv.SocketPathForTest()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	// The fake clock holds the publication after the vacancy grace back.
	poll.Until(t, "the status says that the socket is gone", func() bool {
		st := r.srv.Status()
		return st.State == Registered && !st.Ready && strings.Contains(st.Reason, "does not exist")
	})
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the status says that a regular file is at the path", func() bool {
		st := r.srv.Status()
		return !st.Ready && strings.Contains(st.Reason, "is a regular file, not a socket")
	})
}
