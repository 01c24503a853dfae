//go:build unix

package handover

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
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

const (
	testDriver   = "csi.example.com"
	testEndpoint = "/var/lib/kubelet/plugins/csi.example.com/csi.sock"
	testTimeout  = 5 * time.Second
)

// shortDir is a registry directory with a path short enough for sockets.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ho")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// listenHidden listens on dir/.<driver>.<suffix>.
func listenHidden(t *testing.T, dir, suffix string) (*net.UnixListener, string) {
	t.Helper()
	address := filepath.Join(dir, "."+testDriver+"."+suffix)
	l, err := net.Listen("unix", address)
	if err != nil {
		t.Fatal(err)
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	t.Cleanup(func() { _ = ul.Close() })
	return ul, address
}

// published is a socket served at the driver's path in dir with a hidden
// second name, as the registrar publishes it.
type published struct {
	listener     *net.UnixListener
	path, hidden string
	file         sockfile.ID
}

func publish(t *testing.T, dir string) *published {
	t.Helper()
	l, hidden := listenHidden(t, dir, "aaaaaa")
	path := filepath.Join(dir, testDriver+"-reg.sock")
	if err := os.Link(hidden, path); err != nil {
		t.Fatal(err)
	}
	return &published{listener: l, path: path, hidden: hidden, file: lstat(t, path)}
}

func lstat(t *testing.T, path string) sockfile.ID {
	t.Helper()
	id, _, err := sockfile.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// serveHandOver serves the HandOver call on l with handle.
func serveHandOver(t *testing.T, l net.Listener, handle func(ctx context.Context, value string) error) {
	t.Helper()
	srv := grpc.NewServer()
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: ServiceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "HandOver",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				in := &wrapperspb.StringValue{}
				if err := dec(in); err != nil {
					return nil, err
				}
				if err := handle(ctx, in.GetValue()); err != nil {
					return nil, err
				}
				return &wrapperspb.StringValue{Value: "handed over"}, nil
			},
		}},
	}, struct{}{})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
}

// serveOwner serves the HandOver call on pub's socket as a registrar of
// this build does: it decodes the request and offers the socket.
func serveOwner(t *testing.T, pub *published, verdict *Verdict) {
	t.Helper()
	owner := &Owner{
		Socket: &sockfile.Socket{UnixListener: pub.listener, Path: pub.path, File: pub.file, Hidden: pub.hidden},
		Driver: testDriver, Endpoint: testEndpoint, Verdict: verdict, Timeout: testTimeout,
	}
	serveHandOver(t, pub.listener, func(ctx context.Context, value string) error {
		req, err := DecodeRequest([]byte(value))
		if err != nil {
			return err
		}
		if err := Offer(ctx, owner, req); err != nil {
			return grpcstatus.Error(codes.FailedPrecondition, err.Error())
		}
		return nil
	})
}

func newcomer(t *testing.T, dir, path string) Newcomer {
	recv, address := listenHidden(t, dir, "bbbbbb")
	return Newcomer{
		Path: path, Found: lstat(t, path), Driver: testDriver, Endpoint: testEndpoint,
		Receiver: &sockfile.Socket{UnixListener: recv, Hidden: address}, Timeout: testTimeout,
	}
}

// assertAccepts checks that a connection to path reaches l.
func assertAccepts(t *testing.T, l *net.UnixListener, path string) {
	t.Helper()
	dialed := make(chan error, 1)
	go func() {
		c, err := net.Dial("unix", path)
		if err == nil {
			_ = c.Close()
		}
		dialed <- err
	}()
	if err := l.SetDeadline(time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("the socket at %s does not reach the listener: %v", path, err)
	}
	_ = c.Close()
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
}

func TestOfferAndTake(t *testing.T) {
	dir := shortDir(t)
	pub := publish(t, dir)
	verdict := &Verdict{Registered: true, Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	serveOwner(t, pub, verdict)
	n := newcomer(t, dir, pub.path)

	taken, verdictTaken, err := Take(n)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	defer taken.UnixListener.Close()
	if taken.File != pub.file || lstat(t, pub.path) != pub.file {
		t.Error("the socket taken is not the one at the path, or the path changed")
	}
	if verdictTaken == nil || !verdictTaken.Registered || !verdictTaken.Time.Equal(verdict.Time) {
		t.Errorf("verdict taken = %+v, want %+v", verdictTaken, verdict)
	}
	// The owner's hidden name moved to the new instance's address.
	if taken.Hidden != n.Receiver.Hidden || lstat(t, n.Receiver.Hidden) != pub.file {
		t.Errorf("hidden name taken = %q, want %q, a second name of the socket", taken.Hidden, n.Receiver.Hidden)
	}
	if _, err := os.Lstat(pub.hidden); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the owner's hidden name is still there (%v)", err)
	}
	assertAccepts(t, taken.UnixListener, pub.path)
}

// A peer that speaks version 2 sends its socket with a state of version
// 2: the new instance refuses it ('n'), the peer keeps it, and Take says
// why, so that its caller replaces the socket.
func TestTakeRefusesAStateOfAnotherVersion(t *testing.T) {
	dir := shortDir(t)
	pub := publish(t, dir)
	dev, ino := pub.file.Dev, pub.file.Ino
	answers := make(chan byte, 1)
	requests := make(chan Request, 1)
	serveHandOver(t, pub.listener, func(ctx context.Context, value string) error {
		var req Request
		if err := json.Unmarshal([]byte(value), &req); err != nil {
			return err
		}
		requests <- req
		conn, err := net.Dial("unix", req.Address)
		if err != nil {
			return err
		}
		defer conn.Close()
		state := fmt.Sprintf(`{"version":2,"driver":%q,"endpoint":%q,"dev":%d,"ino":%d}`+"\n", testDriver, testEndpoint, dev, ino)
		if err := sendListener(conn.(*net.UnixConn), []byte(state), pub.listener); err != nil {
			return err
		}
		var answer [1]byte
		if _, err := io.ReadFull(conn, answer[:]); err != nil {
			return err
		}
		answers <- answer[0]
		return grpcstatus.Error(codes.FailedPrecondition, "refused")
	})

	_, _, err := Take(newcomer(t, dir, pub.path))
	if err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("Take from a peer of version 2 = %v, want an error about version 2", err)
	}
	if req := <-requests; req.Version != Version {
		t.Errorf("the new instance asked with version %d, want %d", req.Version, Version)
	}
	if answer := <-answers; answer != refused {
		t.Errorf("answer to a state of version 2 = %q, want %q", answer, refused)
	}
	if lstat(t, pub.path) != pub.file || lstat(t, pub.hidden) != pub.file {
		t.Error("the peer's socket or its hidden name changed")
	}
}

// A peer that speaks version 2 refuses a request of version 1 with
// FailedPrecondition: Take returns that status at once.
func TestTakeFromAnOwnerRefusingTheVersion(t *testing.T) {
	dir := shortDir(t)
	pub := publish(t, dir)
	const refusal = "handover protocol version 1 is not spoken here"
	serveHandOver(t, pub.listener, func(context.Context, string) error {
		return grpcstatus.Error(codes.FailedPrecondition, refusal)
	})
	n := newcomer(t, dir, pub.path)
	_, _, err := Take(n)
	if grpcstatus.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), refusal) {
		t.Fatalf("Take = %v, want the owner's FailedPrecondition", err)
	}
}

// A new instance of the previous build sends its request without a
// version and reads the state as that build did: the owner of this build
// hands over to it.
func TestOfferToThePreviousBuild(t *testing.T) {
	dir := shortDir(t)
	pub := publish(t, dir)
	serveOwner(t, pub, &Verdict{Registered: true, Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)})
	recv, address := listenHidden(t, dir, "dddddd")

	called := make(chan error, 1)
	go func() {
		body := fmt.Sprintf(`{"driver":%q,"endpoint":%q,"address":%q}`, testDriver, testEndpoint, address)
		conn, err := unixgrpc.NewClient(pub.path)
		if err != nil {
			called <- err
			return
		}
		defer conn.Close()
		called <- conn.Invoke(context.Background(), Method, &wrapperspb.StringValue{Value: body}, &wrapperspb.StringValue{})
	}()
	if err := recv.SetDeadline(time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}
	conn, err := recv.AcceptUnix()
	if err != nil {
		t.Fatalf("the owner did not send its socket: %v", err)
	}
	defer conn.Close()
	payload, listener, err := receiveListener(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	// The previous build's state: the same fields, no version.
	var old struct {
		Driver, Endpoint string
		Dev, Ino         uint64
		Verdict          *struct{ Registered bool }
	}
	if err := json.Unmarshal(payload, &old); err != nil || old.Driver != testDriver || old.Endpoint != testEndpoint || old.Verdict == nil || !old.Verdict.Registered {
		t.Fatalf("state %s read as the previous build does = %+v, %v", payload, old, err)
	}
	if dev, ino := pub.file.Dev, pub.file.Ino; old.Dev != dev || old.Ino != ino {
		t.Errorf("state names device %d inode %d, want %d %d", old.Dev, old.Ino, dev, ino)
	}
	if _, err := conn.Write([]byte{accepted}); err != nil {
		t.Fatal(err)
	}
	var confirmed [1]byte
	if _, err := io.ReadFull(conn, confirmed[:]); err != nil || confirmed[0] != done {
		t.Fatalf("confirmation = %q, %v; want %q", confirmed[0], err, done)
	}
	if err := <-called; err != nil {
		t.Fatalf("HandOver without a version: %v", err)
	}
	assertAccepts(t, listener, pub.path)
}

// An owner of the previous build sends its state without a version: the
// new instance of this build takes the socket.
func TestTakeFromThePreviousBuild(t *testing.T) {
	dir := shortDir(t)
	pub := publish(t, dir)
	dev, ino := pub.file.Dev, pub.file.Ino
	serveHandOver(t, pub.listener, func(ctx context.Context, value string) error {
		// The previous build's request: the same fields, no version.
		var req struct{ Driver, Endpoint, Address string }
		if err := json.Unmarshal([]byte(value), &req); err != nil {
			return err
		}
		conn, err := net.Dial("unix", req.Address)
		if err != nil {
			return err
		}
		defer conn.Close()
		state := fmt.Sprintf(`{"driver":%q,"endpoint":%q,"dev":%d,"ino":%d,"verdict":{"registered":true,"time":"2025-01-02T03:04:05Z"}}`+"\n", req.Driver, req.Endpoint, dev, ino)
		if err := sendListener(conn.(*net.UnixConn), []byte(state), pub.listener); err != nil {
			return err
		}
		var answer [1]byte
		if _, err := io.ReadFull(conn, answer[:]); err != nil || answer[0] != accepted {
			return fmt.Errorf("answer %q, %v", answer[0], err)
		}
		_ = pub.listener.Close()
		_, err = conn.Write([]byte{done})
		return err
	})

	taken, verdictTaken, err := Take(newcomer(t, dir, pub.path))
	if err != nil {
		t.Fatalf("Take from the previous build: %v", err)
	}
	defer taken.UnixListener.Close()
	if verdictTaken == nil || !verdictTaken.Registered {
		t.Errorf("verdict taken = %+v, want registered", verdictTaken)
	}
	assertAccepts(t, taken.UnixListener, pub.path)
}
