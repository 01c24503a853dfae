//go:build unix

package registration

import (
	"context"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/poll"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// upstreamInfo is what a registrar without the handover answers for the
// test driver and endpoint.
var upstreamInfo = &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: testDriver, Endpoint: testEndpoint, SupportedVersions: SupportedVersions}

// A registrar that cannot hand over (upstream's, an older build) serves
// the path when this one starts, as in an upgrade with maxSurge: this one
// leaves its socket alone, is ready, and publishes once it is gone.
func TestDefersToARegistrarThatCannotHandOver(t *testing.T) {
	for _, leaves := range []struct {
		name string
		how  func(t *testing.T, owner *countingRegistration, path string)
	}{
		// Upstream removes the path when it stops.
		{"removes its socket", func(t *testing.T, owner *countingRegistration, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			owner.stop()
		}},
		{"is killed", func(t *testing.T, owner *countingRegistration, _ string) { owner.stop() }},
	} {
		t.Run(leaves.name, func(t *testing.T) {
			dir := shortTempDir(t)
			path := SocketPath(dir, testDriver)
			owner := serveForeignInfo(t, path, upstreamInfo)
			owned := lstat(t, path)
			r := startWaiting(t, dir)
			r.srv.DriverFound(testDriver)
			poll.Until(t, "the instance defers", func() bool { return r.srv.Status().State == Deferring })
			if st := r.srv.Status(); !st.Ready || !strings.Contains(st.Reason, "cannot hand its socket over") {
				t.Errorf("Status = ready %v %q, want ready, deferring", st.Ready, st.Reason)
			}
			if !os.SameFile(owned, lstat(t, path)) {
				t.Fatal("the other registrar's socket was replaced")
			}
			if h := health(r.srv); !strings.Contains(h, "another instance") {
				t.Errorf("Health = %+v, want superseded (200)", h)
			}

			leaves.how(t, owner, path)
			poll.Until(t, "the instance publishes its own socket", func() bool {
				return servesOwn(r.srv)
			})
			if st := r.srv.Status(); st.Publications[ReasonVacated] != 1 || len(st.Publications) != 1 || st.State != WaitingForKubelet {
				t.Errorf("Status = %+v, want one vacated publication, waiting for kubelet", st)
			}
		})
	}
}

// Another endpoint is a change of configuration: the socket is replaced,
// so that kubelet learns the new endpoint.
func TestReplacesARegistrarWithAnotherEndpoint(t *testing.T) {
	dir := shortTempDir(t)
	path := SocketPath(dir, testDriver)
	serveForeignInfo(t, path, &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: testDriver, Endpoint: "/var/lib/kubelet/plugins/old/csi.sock"})
	owned := lstat(t, path)
	r := start(t, dir)
	if os.SameFile(owned, lstat(t, path)) {
		t.Fatal("the socket was not replaced")
	}
	if st := r.srv.Status(); st.Publications[ReasonStart] != 1 {
		t.Errorf("publications = %v, want one start", st.Publications)
	}
}

// Upstream's registrar, started as the new pod of a rollback with
// maxSurge, removes the socket at the path and then binds its own: the
// older instance (this one) must take that for a takeover, not a
// deletion, and never publish over it.
func TestStepsAsideForARemoveThenBindTakeover(t *testing.T) {
	dir := shortTempDir(t)
	older := startRegistered(t, dir)
	path := older.srv.SocketPathForTest()

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("binding after the removal, as upstream does: %v", err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, &countingRegistration{info: upstreamInfo})
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	bound := lstat(t, path)

	poll.Until(t, "the older instance steps aside", func() bool { return older.srv.Status().State == Superseded })
	// Nothing can publish over the new socket: the older instance has no
	// timer left that would, and follows the new socket, so that a change
	// at the path leaves it where it is.
	poll.Until(t, "the older instance settles", func() bool {
		return older.srv.timersForTest() == "" && older.srv.followsForTest()
	})
	if !os.SameFile(bound, lstat(t, path)) {
		t.Fatal("the older instance published over the new registrar's socket")
	}
	if st := older.srv.Status(); st.State != Superseded || st.Publications[ReasonDeleted] != 0 {
		t.Errorf("older Status = %+v, want superseded without a publication after the removal", st)
	}
	if err := older.stop(t); err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(bound, lstat(t, path)) {
		t.Fatal("the older instance's exit removed the new registrar's socket")
	}
}

// slowRegistration answers GetInfo only after a delay, for its first calls:
// a live registrar on a loaded node.
type slowRegistration struct {
	registerapi.UnimplementedRegistrationServer
	slowCalls int32
	delay     time.Duration
	calls     atomic.Int32
}

func (s *slowRegistration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	if s.calls.Add(1) <= s.slowCalls {
		// Not cut short by ctx: the client must have given up when the
		// answer comes.
		time.Sleep(s.delay)
	}
	return upstreamInfo, nil
}

// A live socket that answers too slowly at first is not taken for a dead
// one: the instance steps aside once it answers, within its looks.
func TestDoesNotReplaceASlowLiveSocket(t *testing.T) {
	dir := shortTempDir(t)
	const timeout = 50 * time.Millisecond
	older := startRegistered(t, dir, func(c *Config) { c.CheckTimeout = timeout })
	path := older.srv.SocketPathForTest()

	tmp := path + ".new"
	l, err := net.Listen("unix", tmp)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	slow := &slowRegistration{slowCalls: 2, delay: 4 * timeout}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, slow)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	bound := lstat(t, path)

	poll.Until(t, "the older instance steps aside", func() bool { return older.srv.Status().State == Superseded })
	if !os.SameFile(bound, lstat(t, path)) {
		t.Fatal("the slow socket was replaced")
	}
	if n := slow.calls.Load(); n < 3 {
		t.Errorf("GetInfo was called %d times, want the slow calls and one that answered", n)
	}
}
