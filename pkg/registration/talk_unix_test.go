//go:build unix

package registration

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
	"github.com/csi-registrar/node-driver-registrar/test/poll"
)

// mute listens at path, accepts connections and never says anything: a
// process that hangs. Each connection is passed on accepted; shut closes
// the socket and every connection, which ends the calls waiting on it.
type mute struct {
	accepted chan net.Conn
	shut     func()
}

func listenMute(t *testing.T, l net.Listener) *mute {
	t.Helper()
	m := &mute{accepted: make(chan net.Conn, 16)}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			m.accepted <- c
		}
	}()
	m.shut = sync.OnceFunc(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	t.Cleanup(m.shut)
	return m
}

func (m *mute) next(t *testing.T, what string) net.Conn {
	t.Helper()
	select {
	case c := <-m.accepted:
		return c
	case <-time.After(poll.Timeout):
		t.Fatalf("no connection to the hanging socket: %s", what)
		return nil
	}
}

// longChecks lets a call to a hanging process wait a minute, far longer
// than the test.
func longChecks(cfg *Config) { cfg.CheckTimeout = time.Minute }

// The driver's new name's path holds a socket whose process hangs: while
// the claim asks it, the loop goes on counting kubelet's calls on the
// socket of the old name, which its status still describes, and says that
// it claims the new path.
func TestClaimDoesNotHoldTheLoop(t *testing.T) {
	dir := shortTempDir(t)
	r := startRegistered(t, dir, longChecks)
	oldPath := r.srv.SocketPathForTest()
	const renamed = "other.example.com"
	newPath := SocketPath(dir, renamed)
	hung := listenMute(t, leaveSocket(t, newPath, true))

	r.srv.DriverFound(renamed)
	hung.next(t, "the claim asks whether it can hand its socket over")
	poll.Until(t, "the status says the path is claimed", func() bool {
		return strings.HasPrefix(r.srv.Status().Reason, "claiming the registration socket for "+renamed)
	})
	if st := r.srv.Status(); st.DriverName != testDriver || st.SocketPath != oldPath || st.State != Registered || st.Ready {
		t.Errorf("Status during the claim = %+v, want the old name's registration, not ready", st)
	}
	if h := health(r.srv); !strings.HasPrefix(h, "serving ") {
		t.Errorf("Health during the claim = %+v, want the old name's socket, ours", h)
	}
	getInfoCounted(t, r.srv, oldPath, "the claim")
	if st := r.srv.Status(); !strings.HasPrefix(st.Reason, "claiming") || st.Publications[ReasonRenamed] != 0 {
		t.Fatalf("Status = %q, publications %v: want the claim still waiting for the hanging socket", st.Reason, st.Publications)
	}

	// The process dies: its socket is replaced.
	hung.shut()
	poll.Until(t, "the socket is published under the new name", func() bool {
		st := r.srv.Status()
		return st.Publications[ReasonRenamed] == 1 && st.State == WaitingForKubelet && st.DriverName == renamed && st.SocketPath == newPath
	})
	if h := health(r.srv); !strings.HasPrefix(h, "serving ") {
		t.Errorf("Health after the claim = %+v, want our socket at %s", h, newPath)
	}
}

// A newer instance that hangs in the middle of the handover: while the
// owner offers its socket, the loop goes on counting kubelet's calls; when
// the newer one dies, the owner keeps its socket and its registration.
func TestOfferDoesNotHoldTheLoop(t *testing.T) {
	dir := shortTempDir(t)
	r := startRegistered(t, dir, longChecks)
	path := r.srv.SocketPathForTest()
	published := lstat(t, path)

	recv, err := sockfile.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Remove()
	hung := listenMute(t, recv.UnixListener)
	req := handover.Request{Version: handover.Version, Driver: testDriver, Endpoint: testEndpoint, Address: recv.Hidden}
	askHandover := func() error {
		return unixgrpc.InvokeJSON(context.Background(), path, handover.Method, req, nil)
	}
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { first <- askHandover() }()

	// The owner sent its socket, and waits for the newer one's answer.
	conn := hung.next(t, "the owner offers its socket")
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		t.Fatalf("reading the owner's offer: %v", err)
	}

	getInfoCounted(t, r.srv, path, "the offer")
	// A second request waits for the first to end.
	go func() { second <- askHandover() }()

	hung.shut()
	for _, call := range []chan error{first, second} {
		select {
		case err := <-call:
			if grpcstatus.Code(err) != codes.FailedPrecondition {
				t.Errorf("handover to a newer instance that died = %v, want refused", err)
			}
		case <-time.After(poll.Timeout):
			t.Fatal("a handover call did not end when the newer instance died")
		}
	}
	st := r.srv.Status()
	if st.State != Registered || !st.Ready || !os.SameFile(lstat(t, path), published) {
		t.Errorf("after a failed handover: Status %s ready %v %q, want the owner registered, serving the same socket", st.State, st.Ready, st.Reason)
	}
	if _, err := client(t, path).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Errorf("GetInfo after a failed handover: %v", err)
	}
}

// A newer instance asks for the socket while the owner is in another
// conversation (an offer to a newcomer that hangs): its request waits for
// that conversation to end, and the socket is then handed over to it, so
// kubelet never sees a new socket at the path.
func TestHandoverAskedDuringAConversationWaitsForIt(t *testing.T) {
	dir := shortTempDir(t)
	asked := make(chan struct{}, 4)
	logger := funcr.New(func(_, args string) {
		if strings.Contains(args, `"Handover of the registration socket requested"`) {
			asked <- struct{}{}
		}
	}, funcr.Options{Verbosity: 4})
	owner := runServerIn(t, klog.NewContext(context.Background(), logger), newServer(t, dir, longChecks))
	owner.srv.DriverFound(testDriver)
	owner.waitServing(t)
	path := owner.srv.SocketPathForTest()
	notify(t, path, true)
	poll.Until(t, "kubelet's registration is recorded", func() bool { return owner.srv.Status().Ready })
	published, _, err := sockfile.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	waitAsked := func(what string) {
		t.Helper()
		select {
		case <-asked:
		case <-time.After(poll.Timeout):
			t.Fatalf("the owner was not asked for its socket: %s", what)
		}
	}

	hungRecv, err := sockfile.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer hungRecv.Remove()
	hung := listenMute(t, hungRecv.UnixListener)
	first := make(chan error, 1)
	go func() {
		req := handover.Request{Version: handover.Version, Driver: testDriver, Endpoint: testEndpoint, Address: hungRecv.Hidden}
		first <- unixgrpc.InvokeJSON(context.Background(), path, handover.Method, req, nil)
	}()
	waitAsked("by the newcomer that hangs")
	if _, err := hung.next(t, "the owner offers its socket").Read(make([]byte, 1)); err != nil {
		t.Fatalf("reading the owner's offer: %v", err)
	}

	recv, err := sockfile.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Remove()
	type outcome struct {
		taken *sockfile.Socket
		err   error
	}
	second := make(chan outcome, 1)
	go func() {
		taken, _, err := handover.Take(handover.Newcomer{Path: path, Found: published, Driver: testDriver, Endpoint: testEndpoint, Receiver: recv, Timeout: time.Minute})
		second <- outcome{taken, err}
	}()
	waitAsked("by the newer instance")
	// The loop takes its events in order: once it counted a GetInfo sent
	// after the request was logged, it holds the request.
	getInfoCounted(t, owner.srv, path, "the offer to the newcomer that hangs")

	hung.shut()
	select {
	case err := <-first:
		if grpcstatus.Code(err) != codes.FailedPrecondition {
			t.Errorf("handover to the newcomer that died = %v, want refused", err)
		}
	case <-time.After(poll.Timeout):
		t.Fatal("the handover to the newcomer that hangs did not end when it died")
	}
	select {
	case got := <-second:
		if got.err != nil {
			t.Fatalf("the newer instance's handover, asked during the offer to the one that hangs: %v", got.err)
		}
		defer got.taken.Close()
		if got.taken.File != published {
			t.Errorf("the newer instance took socket %v, want the one published, %v", got.taken.File, published)
		}
	case <-time.After(poll.Timeout):
		t.Fatal("the newer instance's handover did not end")
	}
	poll.Until(t, "the owner steps aside", func() bool { return owner.srv.Status().State == Superseded })
	if now, _, err := sockfile.Lstat(path); err != nil || now != published {
		t.Errorf("the socket at the path is %v (%v), want the one published, %v, never replaced", now, err, published)
	}
}

// A process that hangs put a socket at the path in place of ours: while
// the look asks it, the loop goes on counting kubelet's calls (through the
// socket's hidden name, which is still ours); once it died, its socket is
// replaced.
func TestLookDoesNotHoldTheLoop(t *testing.T) {
	dir := shortTempDir(t)
	r := startRegistered(t, dir, longChecks)
	path := r.srv.SocketPathForTest()
	hidden := hiddenName(t, path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	hung := listenMute(t, leaveSocket(t, path, true))
	hung.next(t, "the look asks it GetInfo")

	getInfoCounted(t, r.srv, hidden, "the look")
	if st := r.srv.Status(); st.Publications[ReasonStale] != 0 || st.State != Registered {
		t.Fatalf("Status = %s, publications %v: want the look still waiting for the hanging socket", st.State, st.Publications)
	}

	hung.shut()
	poll.Until(t, "the dead socket is replaced", func() bool { return r.srv.Status().Publications[ReasonStale] == 1 })
	if h := health(r.srv); !strings.HasPrefix(h, "serving ") {
		t.Errorf("Health after the replacement = %+v, want our socket", h)
	}
}

// hiddenName is the hidden second name of the socket at path.
func hiddenName(t *testing.T, path string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if sockfile.IsHiddenName(path, e.Name()) {
			return filepath.Join(filepath.Dir(path), e.Name())
		}
	}
	t.Fatalf("no hidden name of %s", path)
	return ""
}

// A stop during a claim ends the conversation, publishes nothing and
// leaves the socket found at the path alone.
func TestStopDuringAClaim(t *testing.T) {
	dir := shortTempDir(t)
	path := SocketPath(dir, testDriver)
	leaveSocket(t, path, true) // accepts, never answers
	r := startWaiting(t, dir)  // the check timeout is a second
	r.srv.DriverFound(testDriver)
	poll.Until(t, "the claim runs", func() bool { return strings.HasPrefix(r.srv.Status().Reason, "claiming") })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := r.srv.Status(); st.State != Stopped || len(st.Publications) != 0 {
		t.Errorf("Status after a stop during the claim = %s, publications %v: want stopped, nothing published", st.State, st.Publications)
	}
	assertOnly(t, dir, path)
}

// getInfoCounted calls GetInfo on the socket at path as kubelet does and
// waits until srv counts it, while what is named still waits: the loop
// goes on meanwhile.
func getInfoCounted(t *testing.T, srv *Server, path, while string) {
	t.Helper()
	calls := srv.Status().KubeletCalls
	if _, err := client(t, path).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "kubelet's GetInfo is counted while "+while+" waits", func() bool {
		return srv.Status().KubeletCalls.GetInfo == calls.GetInfo+1
	})
}

// assertOnly checks that dir holds the file at path and nothing else.
func assertOnly(t *testing.T, dir, path string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != filepath.Base(path) {
		t.Errorf("registry directory holds %v, want %s alone", entries, filepath.Base(path))
	}
}
