//go:build unix

package registration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
	"github.com/csi-registrar/node-driver-registrar/test/poll"
)

// startRegistered starts an instance and has "kubelet" register it.
func startRegistered(t *testing.T, dir string, configure ...func(*Config)) *running {
	t.Helper()
	r := start(t, dir, configure...)
	notify(t, r.srv.SocketPathForTest(), true)
	poll.Until(t, "kubelet's registration is recorded", func() bool { ready := r.srv.Status().Ready; return ready })
	return r
}

func notify(t *testing.T, path string, registered bool) {
	t.Helper()
	if _, err := client(t, path).NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: registered}); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}
}

func lstat(t *testing.T, path string) fs.FileInfo {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// assertOneHiddenName checks that dir holds the socket at path and one
// hidden second name of it, nothing else.
func assertOneHiddenName(t *testing.T, path string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || !sockfile.IsHiddenName(path, entries[0].Name()) || entries[1].Name() != filepath.Base(path) {
		t.Fatalf("registry directory holds %v, want the socket and one hidden name", entries)
	}
	if hidden := lstat(t, filepath.Join(filepath.Dir(path), entries[0].Name())); !os.SameFile(hidden, lstat(t, path)) {
		t.Errorf("the hidden name %s is not a second name of the socket", entries[0].Name())
	}
}

func TestHandsTheSocketOverToANewerInstance(t *testing.T) {
	dir := shortTempDir(t)
	older := startRegistered(t, dir)
	path := older.srv.SocketPathForTest()
	published := lstat(t, path)
	verdict := older.srv.Status().LastVerdict

	newer := start(t, dir)
	// The file kubelet watches never changed: no event, no new plugin.
	if !os.SameFile(published, lstat(t, path)) {
		t.Fatal("the socket at the path was replaced, want it handed over")
	}
	st := newer.srv.Status()
	if st.State != Registered || !st.Ready || st.LastVerdict == nil || !st.LastVerdict.Time.Equal(verdict.Time) {
		t.Errorf("newer Status = %+v, want registered and ready at once, with the older instance's verdict %+v", st, verdict)
	}
	if len(st.Publications) != 1 || st.Publications[ReasonHandover] != 1 {
		t.Errorf("newer publications = %v, want one handover", st.Publications)
	}
	poll.Until(t, "the older instance steps aside", func() bool { return older.srv.Status().State == Superseded })
	if st := older.srv.Status(); st.Ready || !strings.Contains(st.Reason, "handed it over") {
		t.Errorf("older Status = ready %v %q, want not ready, handed over", st.Ready, st.Reason)
	}
	assertOneHiddenName(t, path)

	// kubelet's calls through the path reach the newer instance.
	calls := newer.srv.Status().KubeletCalls
	if _, err := client(t, path).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatal(err)
	}
	notify(t, path, true)
	poll.Until(t, "the newer instance counts kubelet's calls", func() bool {
		return newer.srv.Status().KubeletCalls.NotifyRegistered > calls.NotifyRegistered
	})
	if now := newer.srv.Status().KubeletCalls; now.GetInfo != calls.GetInfo+1 || now.NotifyRegistered != calls.NotifyRegistered+1 {
		t.Errorf("newer instance's kubelet calls %+v, then %+v: want one GetInfo and one Notify more", calls, now)
	}
	if h := health(older.srv); !strings.Contains(h, "another instance") {
		t.Errorf("older Health = %+v, want superseded", h)
	}

	if err := older.stop(t); err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(published, lstat(t, path)) {
		t.Fatal("the older instance's exit changed the socket at the path")
	}
	assertOneHiddenName(t, path)
	if h := health(newer.srv); !strings.HasPrefix(h, "serving ") {
		t.Errorf("newer Health after the older one exited = %+v, want serving", h)
	}
	if ready, reason := newer.ready(); !ready {
		t.Errorf("newer not ready after the older one exited: %s", reason)
	}
	if _, err := client(t, path).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo after the older instance exited: %v", err)
	}

	if err := newer.stop(t); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("registry directory holds %v after both exited, want nothing", entries)
	}
}

func TestHandedOverInstancePublishesAgainWhenTheNewerLeaves(t *testing.T) {
	dir := shortTempDir(t)
	older := startRegistered(t, dir)
	path := older.srv.SocketPathForTest()
	newer := start(t, dir)
	poll.Until(t, "the older instance steps aside", func() bool { return older.srv.Status().State == Superseded })
	if err := newer.stop(t); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the older instance publishes again", func() bool {
		return servesOwn(older.srv)
	})
	st := older.srv.Status()
	if st.Publications[ReasonVacated] != 1 || st.State != WaitingForKubelet || strings.Contains(st.Reason, "handed") {
		t.Errorf("older Status = %+v, want one vacated publication, waiting for kubelet", st)
	}
	assertOneHiddenName(t, path)
}

func TestHandsOverAlongAChain(t *testing.T) {
	dir := shortTempDir(t)
	first := startRegistered(t, dir)
	path := first.srv.SocketPathForTest()
	published := lstat(t, path)
	second := start(t, dir)
	third := start(t, dir)
	if !os.SameFile(published, lstat(t, path)) {
		t.Fatal("the socket at the path was replaced")
	}
	poll.Until(t, "the second instance steps aside", func() bool { return second.srv.Status().State == Superseded })
	if st := third.srv.Status(); !st.Ready || st.Publications[ReasonHandover] != 1 {
		t.Errorf("third Status = %+v, want ready after a handover", st)
	}
	assertOneHiddenName(t, path)
}

func TestReplacesTheSocketWhenNoHandoverIsPossible(t *testing.T) {
	cases := []struct {
		name  string
		older func(t *testing.T, dir string) *running // nil when the older one is not ours
	}{
		{"older build without handover", func(t *testing.T, dir string) *running {
			serveForeign(t, SocketPath(dir, testDriver), testDriver)
			return nil
		}},
		{"owner of another handover version", func(t *testing.T, dir string) *running {
			answers := serveOwnerOfVersion2(t, SocketPath(dir, testDriver))
			t.Cleanup(func() {
				select {
				case answer := <-answers:
					if answer != 'n' {
						t.Errorf("answer to a state of version 2 = %q, want 'n'", answer)
					}
				case <-time.After(10 * time.Second):
					t.Error("the new instance did not ask the owner of version 2 for its socket")
				}
			})
			return nil
		}},
		{"other endpoint", func(t *testing.T, dir string) *running {
			return startRegistered(t, dir, func(c *Config) { c.Endpoint = "/var/lib/kubelet/plugins/other/csi.sock" })
		}},
		{"not registered by kubelet", func(t *testing.T, dir string) *running { return start(t, dir) }},
		{"rejected by kubelet", func(t *testing.T, dir string) *running {
			r := start(t, dir, func(c *Config) { c.Clock = testingclock.NewFakeClock(time.Now()) })
			notify(t, r.srv.SocketPathForTest(), false)
			poll.Until(t, "the rejection is recorded", func() bool { return r.srv.Status().State == Rejected })
			return r
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortTempDir(t)
			older := tc.older(t, dir)
			path := SocketPath(dir, testDriver)
			before := lstat(t, path)
			newer := start(t, dir)
			if os.SameFile(before, lstat(t, path)) {
				t.Fatal("the socket at the path was not replaced")
			}
			if st := newer.srv.Status(); st.State != WaitingForKubelet || len(st.Publications) != 1 || st.Publications[ReasonStart] != 1 {
				t.Errorf("newer Status = %+v, want a new socket waiting for kubelet", st)
			}
			if older != nil {
				poll.Until(t, "the older instance steps aside", func() bool { return older.srv.Status().State == Superseded })
				if st := older.srv.Status(); strings.Contains(st.Reason, "handed") {
					t.Errorf("older reason %q, want no handover", st.Reason)
				}
			}
			if _, err := client(t, path).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
				t.Fatalf("GetInfo on the new socket: %v", err)
			}
		})
	}
}

func TestTwoNewerInstancesAtOnce(t *testing.T) {
	dir := shortTempDir(t)
	older := startRegistered(t, dir)
	path := older.srv.SocketPathForTest()
	newer := []*running{startWaiting(t, dir), startWaiting(t, dir)}
	for _, r := range newer {
		r.srv.DriverFound(testDriver)
	}
	// One of them serves the path, the other has stepped aside, and so has
	// the older one; whichever way the race went. Stepped aside is what the
	// instance's own loop says: a probe of an instance still taking the
	// socket over finds the other one's socket and says superseded too.
	poll.Until(t, "one instance serves the path, the others stepped aside", func() bool {
		serving := 0
		for _, r := range newer {
			switch {
			case servesOwn(r.srv):
				serving++
			case r.srv.Status().State != Superseded:
				return false
			}
		}
		return serving == 1 && older.srv.Status().State == Superseded
	})
	if _, err := client(t, path).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	for _, r := range append(newer, older) {
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("registry directory holds %v after all exited, want nothing", entries)
	}
}

func TestHandoverRefusedOnceRunReturned(t *testing.T) {
	// Run closes done when its loop has returned: a request arriving later
	// is refused at once, so the socket that shutdown removes is never
	// handed over.
	dir := shortTempDir(t)
	srv, err := New(Config{Endpoint: testEndpoint, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	close(srv.done)
	hidden := filepath.Join(dir, "."+testDriver+".0a1b2c")
	req := &wrapperspb.StringValue{Value: `{"driver":"` + testDriver + `","endpoint":"` + testEndpoint + `","address":"` + hidden + `"}`}
	_, err = (&rpcServer{s: srv, gen: 1, name: testDriver}).handOver(context.Background(), req)
	if grpcstatus.Code(err) != codes.Unavailable {
		t.Fatalf("handOver after Run returned = %v, want Unavailable", err)
	}
}

// serveOwnerOfVersion2 serves a registration socket at path as an owner
// speaking handover version 2 would: it sends its socket with a state of
// version 2, and reports the new instance's answer. The new instance
// refuses it and replaces the socket, as when the owner cannot hand over.
func serveOwnerOfVersion2(t *testing.T, path string) (answers <-chan byte) {
	t.Helper()
	tmp := path + ".new"
	l, err := net.Listen("unix", tmp)
	if err != nil {
		t.Fatal(err)
	}
	listener := l.(*net.UnixListener)
	listener.SetUnlinkOnClose(false)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	st := lstat(t, path).Sys().(*syscall.Stat_t)
	answered := make(chan byte, 1)
	handOver := func(value string) error {
		var req handover.Request
		if err := json.Unmarshal([]byte(value), &req); err != nil {
			return err
		}
		conn, err := net.Dial("unix", req.Address)
		if err != nil {
			return err
		}
		defer conn.Close()
		state := fmt.Sprintf(`{"version":2,"driver":%q,"endpoint":%q,"dev":%d,"ino":%d}`+"\n", req.Driver, req.Endpoint, st.Dev, st.Ino)
		raw, err := listener.SyscallConn()
		if err != nil {
			return err
		}
		var sendErr error
		if err := raw.Control(func(fd uintptr) {
			_, _, sendErr = conn.(*net.UnixConn).WriteMsgUnix([]byte(state), syscall.UnixRights(int(fd)), nil)
		}); err != nil || sendErr != nil {
			return errors.Join(err, sendErr)
		}
		var answer [1]byte
		if _, err := io.ReadFull(conn, answer[:]); err != nil {
			return err
		}
		answered <- answer[0]
		return grpcstatus.Error(codes.FailedPrecondition, "the new instance refused the socket")
	}
	srv := grpc.NewServer()
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: handover.ServiceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "HandOver",
			Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				in := &wrapperspb.StringValue{}
				if err := dec(in); err != nil {
					return nil, err
				}
				return nil, handOver(in.GetValue())
			},
		}},
	}, struct{}{})
	registerapi.RegisterRegistrationServer(srv, &countingRegistration{info: upstreamInfo})
	go func() { _ = srv.Serve(listener) }()
	t.Cleanup(srv.Stop)
	return answered
}

// A request of another version of the handover is refused with
// FailedPrecondition before it reaches the loop: the owner sends nothing,
// stays registered, and still hands over to a newer instance.
func TestRefusesAHandoverRequestOfAnotherVersion(t *testing.T) {
	dir := shortTempDir(t)
	r := startRegistered(t, dir)
	path := r.srv.SocketPathForTest()
	published := lstat(t, path)
	recv, err := sockfile.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	address := recv.Hidden

	for _, version := range []int{2, -1} {
		req := map[string]any{"version": version, "driver": testDriver, "endpoint": testEndpoint, "address": address}
		err = unixgrpc.InvokeJSON(context.Background(), path, handover.Method, req, nil)
		if grpcstatus.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), fmt.Sprintf("version %d", version)) {
			t.Fatalf("HandOver of version %d = %v, want FailedPrecondition about the version", version, err)
		}
	}
	if err := recv.SetDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	if conn, err := recv.Accept(); err == nil {
		conn.Close()
		t.Error("the owner connected to the requester's socket")
	}
	if st := r.srv.Status(); st.State != Registered || !os.SameFile(published, lstat(t, path)) {
		t.Errorf("Status = %+v after a refused request, want registered on the same socket", st)
	}
	newer := start(t, dir)
	if st := newer.srv.Status(); st.Publications[ReasonHandover] != 1 || !os.SameFile(published, lstat(t, path)) {
		t.Errorf("after the refusals a newer instance published %v, want the socket handed over", st.Publications)
	}
}
