// Package handover passes a driver's listening registration socket from
// one registrar instance to another on the same node (a maxSurge rolling
// update): kubelet takes a new file at the path for a new plugin and
// deregisters the driver for about a second, so the socket itself is passed
// as a file descriptor. It holds no state: callers decide when to offer
// (Offer, the owner A) and what to do with a socket taken (Take, B).
//
// # Protocol
//
//  1. B listens on a new hidden name H in the registry directory and calls
//     HandOver (Method) through the registration socket, which reaches
//     whoever serves the path.
//  2. A checks the request (same driver and endpoint, H a hidden name of
//     that driver in the directory, the socket at the path still A's),
//     connects to H and sends its listening socket (SCM_RIGHTS) with its State.
//  3. B checks the State against the file at the path and answers 'y'
//     ('n': A keeps its socket).
//  4. A stops accepting, renames its hidden name over H (no name goes
//     missing for kubelet's watcher), steps aside and answers 'd'.
//  5. B serves the socket. Without 'd' it closes its copy and replaces the
//     socket: in every outcome one instance owns the socket at the path.
//
// # Messages
//
// The Request is JSON in the StringValue of the unary call Method, answered
// with a StringValue. The State is one line of JSON, at most 64 KiB, in the
// message that carries the socket; dev and ino identify the file at the
// path, verdict is kubelet's if it registered the driver. Unknown fields
// are ignored.
//
//	{"version":1,"driver":"<name>","endpoint":"<driver's socket>","address":"<H>"}
//	{"version":1,"driver":"<name>","endpoint":"<driver's socket>","dev":<n>,"ino":<n>,
//	 "verdict":{"registered":true,"reason":"...","time":"<RFC 3339>"}}
//
// # Versions
//
// This is version 1, as is a missing version. A answers a Request of another
// version with FailedPrecondition, B refuses ('n') such a State; B then
// replaces the socket. A change version 1 must not accept takes a new number.
package handover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

const (
	// ServiceName must not change: older builds call it by this name.
	ServiceName = "noderegistrar.v1.Handover"
	// Method is the call B makes through the path.
	Method = "/" + ServiceName + "/HandOver"
	// Version is the only version spoken.
	Version = 1
)

const (
	accepted = 'y'
	refused  = 'n'
	done     = 'd'
)

// Request is what B asks for.
type Request struct {
	Version  int    `json:"version"`
	Driver   string `json:"driver"`
	Endpoint string `json:"endpoint"`
	Address  string `json:"address"`
}

// Verdict is kubelet's verdict on the socket.
type Verdict struct {
	Registered bool      `json:"registered"`
	Reason     string    `json:"reason,omitempty"`
	Time       time.Time `json:"time"`
}

// State is what A sends with its socket.
type State struct {
	Version  int      `json:"version"`
	Driver   string   `json:"driver"`
	Endpoint string   `json:"endpoint"`
	Dev      uint64   `json:"dev"`
	Ino      uint64   `json:"ino"`
	Verdict  *Verdict `json:"verdict,omitempty"`
}

func checkVersion(what string, version int) error {
	if version != 0 && version != Version {
		return fmt.Errorf("%s of handover protocol version %d: this registrar speaks version %d only, so the socket is replaced instead of handed over", what, version, Version)
	}
	return nil
}

// DecodeRequest's errors are gRPC statuses for B.
func DecodeRequest(data []byte) (Request, error) {
	var req Request
	if err := json.Unmarshal(data, &req); err != nil {
		return Request{}, grpcstatus.Errorf(codes.InvalidArgument, "handover request: %v", err)
	}
	if err := checkVersion("request", req.Version); err != nil {
		return Request{}, grpcstatus.Error(codes.FailedPrecondition, err.Error())
	}
	req.Version = Version
	return req, nil
}

func decodeState(data []byte) (State, error) {
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return State{}, fmt.Errorf("handover state: %w", err)
	}
	if err := checkVersion("state", st.Version); err != nil {
		return State{}, err
	}
	st.Version = Version
	return st, nil
}

// Owner is A: the socket it serves kubelet on, and what it says of it.
type Owner struct {
	Socket           *sockfile.Socket
	Driver, Endpoint string
	Verdict          *Verdict
	// Timeout bounds each step of the exchange with B.
	Timeout time.Duration
}

// Check is A's check of the request. The address must be exactly the name
// joined to the directory: "dir/link/../.name" would follow a link.
func (o *Owner) Check(req Request) error {
	name := filepath.Base(req.Address)
	switch {
	case req.Driver != o.Driver:
		return fmt.Errorf("this instance registers driver %q, not %q", o.Driver, req.Driver)
	case req.Endpoint != o.Endpoint:
		return fmt.Errorf("this instance gives kubelet the endpoint %q, not %q", o.Endpoint, req.Endpoint)
	case req.Address != filepath.Join(filepath.Dir(o.Socket.Path), name) || !sockfile.IsHiddenName(o.Socket.Path, name):
		return fmt.Errorf("%q is not a hidden socket name of the driver in the registry directory", req.Address)
	}
	return nil
}

// Offer is A's side, for a req that o.Check accepted. An error means the
// socket is still A's; nil that A has let go: the socket is B's, or nobody's
// if B gave up before the confirmation (B then replaces it).
func Offer(ctx context.Context, o *Owner, req Request) error {
	sock := o.Socket
	if id, _, err := sockfile.Lstat(sock.Path); err != nil || id != sock.File {
		return errors.New("the socket at the path is not this instance's")
	}
	payload, err := json.Marshal(State{Version: Version, Driver: o.Driver, Endpoint: o.Endpoint, Dev: sock.File.Dev, Ino: sock.File.Ino, Verdict: o.Verdict})
	if err != nil {
		return err
	}

	dialer := net.Dialer{Timeout: o.Timeout}
	conn, err := dialer.DialContext(ctx, "unix", req.Address)
	if err != nil {
		return err
	}
	defer conn.Close()
	uc := conn.(*net.UnixConn)
	if err := uc.SetDeadline(time.Now().Add(o.Timeout)); err != nil {
		return err
	}
	if err := sendListener(uc, append(payload, '\n'), sock.UnixListener); err != nil {
		return fmt.Errorf("cannot send the socket: %w", err)
	}
	var answer [1]byte
	if _, err := io.ReadFull(uc, answer[:]); err != nil || answer[0] != accepted {
		// B closes its copy: the socket stays A's.
		return fmt.Errorf("the new instance did not take the socket (answer %q, %v)", answer[0], err)
	}

	// Committed: the file at the path is B's and must never be removed here.
	_ = sock.Close()
	// A socket without a hidden name (renamed into place) has none to move.
	if id, _, err := sockfile.Lstat(sock.Hidden); err == nil && id == sock.File {
		if err := os.Rename(sock.Hidden, req.Address); err != nil {
			_ = os.Remove(sock.Hidden)
		}
	}
	if _, err := uc.Write([]byte{done}); err != nil {
		// B gave up and replaces the socket: nobody serves that name.
		_, _ = sockfile.RemoveIfSame(req.Address, sock.File)
	}
	return nil
}

// Newcomer is B: what it asks the instance serving Path for.
type Newcomer struct {
	Path string
	// Found is the file B found at Path: the socket it asks for.
	Found            sockfile.ID
	Driver, Endpoint string
	// Receiver listens at its Hidden name; the caller closes and removes it.
	Receiver *sockfile.Socket
	Timeout  time.Duration
}

// errNotAHandover: a connection that carried no socket (a liveness check).
var errNotAHandover = errors.New("not a handover")

// Take is B's side, bounded by twice n.Timeout. It takes no context: once B
// accepted the socket, only finishing the exchange keeps the path served.
// A refused call's error carries its gRPC status. The socket received is
// at n.Path, with kubelet's verdict on it; its Hidden is the Receiver's
// name when A moved its hidden name there, "" otherwise.
func Take(n Newcomer) (*sockfile.Socket, *Verdict, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*n.Timeout)
	defer cancel()
	// Before the call: a refusal's deadline must not be overwritten.
	if err := n.Receiver.SetDeadline(time.Now().Add(n.Timeout)); err != nil {
		return nil, nil, err
	}
	rpcDone := make(chan error, 1)
	go func() {
		err := unixgrpc.InvokeJSON(ctx, n.Path, Method, Request{Version: Version, Driver: n.Driver, Endpoint: n.Endpoint, Address: n.Receiver.Hidden}, nil)
		if err != nil {
			// Refused (or an older build): stop waiting for the socket.
			_ = n.Receiver.SetDeadline(time.Now())
		}
		rpcDone <- err
	}()
	for {
		conn, err := n.Receiver.AcceptUnix()
		if err != nil {
			cancel()
			if rpcErr := <-rpcDone; rpcErr != nil {
				err = rpcErr
			}
			return nil, nil, fmt.Errorf("the instance serving %s did not hand its socket over: %w", n.Path, err)
		}
		sock, verdict, err := n.receive(conn)
		_ = conn.Close()
		if errors.Is(err, errNotAHandover) {
			continue
		}
		if err != nil {
			// The request ends before Take fails, so that the caller may
			// serve on n.Receiver. After a success it is not waited for: the
			// owner may call this instance before it answers.
			cancel()
			<-rpcDone
		}
		return sock, verdict, err
	}
}

func (n *Newcomer) receive(conn *net.UnixConn) (*sockfile.Socket, *Verdict, error) {
	if err := conn.SetDeadline(time.Now().Add(n.Timeout)); err != nil {
		return nil, nil, err
	}
	payload, listener, err := receiveListener(conn)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errNotAHandover, err)
	}
	st, err := decodeState(payload)
	if err == nil {
		err = checkState(st, n.Driver, n.Endpoint, n.Found)
	}
	if err != nil {
		_ = listener.Close()
		_, _ = conn.Write([]byte{refused})
		return nil, nil, err
	}
	listener.SetUnlinkOnClose(false)
	if _, err := conn.Write([]byte{accepted}); err != nil {
		_ = listener.Close()
		return nil, nil, err
	}
	var confirmed [1]byte
	if _, err := io.ReadFull(conn, confirmed[:]); err != nil || confirmed[0] != done {
		// Whether A let go or not, replacing the socket is right.
		_ = listener.Close()
		return nil, nil, fmt.Errorf("the previous instance did not confirm the handover (%q, %v)", confirmed[0], err)
	}
	now, _, err := sockfile.Lstat(n.Path)
	if err != nil || now != n.Found {
		_ = listener.Close()
		return nil, nil, errors.New("the socket at the path changed during the handover")
	}
	sock := &sockfile.Socket{UnixListener: listener, Path: n.Path, File: now}
	if id, _, err := sockfile.Lstat(n.Receiver.Hidden); err == nil && id == now {
		sock.Hidden = n.Receiver.Hidden
	}
	return sock, st.Verdict, nil
}

func checkState(st State, driver, endpoint string, found sockfile.ID) error {
	switch {
	case st.Driver != driver || st.Endpoint != endpoint:
		return fmt.Errorf("the previous instance registers %q with endpoint %q, not %q with %q", st.Driver, st.Endpoint, driver, endpoint)
	case found == (sockfile.ID{}) || st.Dev != found.Dev || st.Ino != found.Ino:
		return errors.New("the socket handed over is not the one at the path")
	}
	return nil
}
