// Package handover passes the listening registration socket of a CSI
// driver from one instance of the registrar to another on the same node
// (the old and the new pod of a rolling update with maxSurge). kubelet
// reacts only to file events in its plugin registry and keeps no
// connection, so the new instance takes over the listening socket itself,
// passed as a file descriptor, instead of putting a new file at the path,
// which kubelet would see as a new plugin and deregister the driver for
// about a second.
//
// The package does the passing, the wire format and the checks; it holds
// no state. Its callers decide when to offer (Offer, the owner A's side)
// and what to do with a socket taken (Take, the new instance B's side).
//
// # Protocol
//
//  1. B listens on a new hidden name H of its own in the registry directory
//     and calls HandOver (Method) through the registration socket, so the
//     request reaches whoever serves the path. An older build answers
//     Unimplemented.
//  2. A checks the request (same driver, same endpoint, H a hidden name of
//     that driver directly in the registry directory, the socket at the
//     path still A's; its caller checked that kubelet registered the driver
//     through that socket), connects to H and sends its listening socket
//     (SCM_RIGHTS) with its State.
//  3. B checks the State against the file at the path and answers 'y'
//     ('n' refuses: A keeps its socket).
//  4. A stops accepting, renames its hidden name over H (so that H becomes
//     B's hidden name of the same socket, and no name goes missing for
//     kubelet's watcher), steps aside, and answers 'd'.
//  5. B serves the socket. Without 'd' B closes its copy and replaces the
//     socket as it did before handovers existed: in every outcome the path
//     holds a socket that one instance owns.
//
// # Messages
//
// The Request is JSON in the google.protobuf.StringValue of the unary call
// /noderegistrar.v1.Handover/HandOver, whose answer is a StringValue too:
//
//	{"version":1,"driver":"<name>","endpoint":"<driver's socket>","address":"<H>"}
//
// The State is one line of JSON ended by '\n', at most 64 KiB, sent in the
// message that carries the socket:
//
//	{"version":1,"driver":"<name>","endpoint":"<driver's socket>","dev":<n>,"ino":<n>,
//	 "verdict":{"registered":true,"reason":"...","time":"<RFC 3339>"}}
//
// dev and ino identify the file at the path that the socket is bound to;
// verdict is kubelet's, present when kubelet registered the driver through
// the socket. Unknown fields are ignored. After the State come the single
// bytes 'y' or 'n' (B) and 'd' (A).
//
// # Versions
//
// This is version 1 (Version). The builds before the version field sent
// the same messages without it: a missing version is version 1, so that
// upgrades and rollbacks between those builds and this one still hand
// over. Each side speaks version 1 only: A answers a Request of another
// version with FailedPrecondition and sends nothing; B refuses ('n') a
// State of another version, and A keeps its socket. Take returns an error
// either way, and B replaces the socket, as after a handover A refused:
// kubelet deregisters the driver once, nothing else is lost. A change that
// an instance of version 1 must not accept takes a new version number.
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
	// ServiceName is the registrar's own gRPC service on its registration
	// socket. Older builds call it by this name: it must not change.
	ServiceName = "noderegistrar.v1.Handover"
	// Method is the full name of the call B makes through the path.
	Method = "/" + ServiceName + "/HandOver"
	// Version is the version of the messages this package speaks.
	Version = 1
)

// Bytes B and A exchange after the socket was sent.
const (
	accepted = 'y'
	refused  = 'n'
	done     = 'd'
)

// Request is what B asks for.
type Request struct {
	// Version is the protocol's; 0 (missing) is version 1.
	Version  int    `json:"version"`
	Driver   string `json:"driver"`
	Endpoint string `json:"endpoint"`
	// Address is B's hidden socket where A sends the listening socket.
	Address string `json:"address"`
}

// Verdict is kubelet's verdict on the socket, as the State carries it.
type Verdict struct {
	Registered bool      `json:"registered"`
	Reason     string    `json:"reason,omitempty"`
	Time       time.Time `json:"time"`
}

// State is what A sends with its socket.
type State struct {
	// Version is the protocol's; 0 (missing) is version 1.
	Version  int    `json:"version"`
	Driver   string `json:"driver"`
	Endpoint string `json:"endpoint"`
	// Dev and Ino identify the file at the path that the socket is bound to.
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
	// Verdict is set when kubelet registered the driver through the socket.
	Verdict *Verdict `json:"verdict,omitempty"`
}

// checkVersion accepts version 1, which a missing version (0) is.
func checkVersion(what string, version int) error {
	if version != 0 && version != Version {
		return fmt.Errorf("%s of handover protocol version %d: this registrar speaks version %d only, so the socket is replaced instead of handed over", what, version, Version)
	}
	return nil
}

// DecodeRequest decodes B's request as A receives it in the HandOver call.
// Its errors are gRPC statuses for B: InvalidArgument for a request that
// is not one, FailedPrecondition for another version.
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
	// Socket is the socket at Socket.Path, in the registry directory,
	// with A's hidden second name of it, if any.
	Socket *sockfile.Socket
	// Driver and Endpoint are what A registers.
	Driver, Endpoint string
	// Verdict is kubelet's registration of the driver through the socket.
	Verdict *Verdict
	// Timeout bounds each step of the exchange with B.
	Timeout time.Duration
}

// Check is A's check of what B asks for: the same driver and endpoint as
// A's, and an address that is a hidden name of the driver's socket in the
// registry directory. The address must be that name joined to the
// directory as B makes it, nothing the kernel would resolve differently
// from filepath.Clean: "dir/link/../.name" passes through a symbolic link
// to wherever it points.
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

// Offer is A's side, for a req that o.Check accepted: it sends the socket
// to B and, once B accepted it, closes its listener, moves its hidden name
// to B's address and confirms. An error means nothing changed: the socket
// is still A's. nil means A has let go: the socket is B's, or nobody's
// when B gave up before the confirmation (B then replaces it).
func Offer(ctx context.Context, o *Owner, req Request) error {
	sock := o.Socket
	if id, _, err := sockfile.Lstat(sock.Path); err != nil || id != sock.File {
		return errors.New("the socket at the path is not this instance's")
	}
	if !Supported {
		return errors.New("the socket cannot be handed over on this platform")
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

	// Committed: from here on B accepts kubelet's connections. The file at
	// the path is now B's: it must never be removed from here.
	_ = sock.Close()
	if sock.Hidden != "" {
		if id, _, err := sockfile.Lstat(sock.Hidden); err == nil && id == sock.File {
			if err := os.Rename(sock.Hidden, req.Address); err != nil {
				_ = os.Remove(sock.Hidden)
			}
		}
	}
	if _, err := uc.Write([]byte{done}); err != nil {
		// B gave up before the end, and replaces the socket: nobody
		// serves it under the name given to it.
		if id, _, err := sockfile.Lstat(req.Address); err == nil && id == sock.File {
			_ = os.Remove(req.Address)
		}
	}
	return nil
}

// Newcomer is B: what it asks the instance serving Path for.
type Newcomer struct {
	// Path is the registration socket's path.
	Path string
	// Found is the file B found at Path: the socket it asks for.
	Found sockfile.ID
	// Driver and Endpoint are what B registers.
	Driver, Endpoint string
	// Receiver listens at Receiver.Hidden, a new hidden name of the
	// driver's socket that B made; A sends the socket there. Its caller
	// closes it and removes its names.
	Receiver *sockfile.Socket
	// Timeout bounds the wait for the socket, and each step after it.
	Timeout time.Duration
}

// Taken is a socket received from A, at the Newcomer's Path; its Hidden
// is the Receiver's name when A moved its hidden name there, "" otherwise.
type Taken struct {
	*sockfile.Socket
	// Verdict is kubelet's registration of the driver through the socket,
	// nil when kubelet had not registered it.
	Verdict *Verdict
}

// errNotAHandover: a connection to B's hidden socket that carried no
// socket, e.g. another instance checking whether the name is alive.
var errNotAHandover = errors.New("not a handover")

// Take is B's side: it asks the instance serving n.Path for its socket,
// receives it at n.Receiver, checks it and accepts it. It is bounded by
// n.Timeout, twice at most, and takes no context: once B has accepted the
// socket, only finishing the exchange keeps the path served. The error of
// a refused call carries its gRPC status (Unimplemented: an older build).
func Take(n Newcomer) (*Taken, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*n.Timeout)
	defer cancel()
	rpcDone := make(chan error, 1)
	go func() {
		err := ask(ctx, n.Path, Request{Version: Version, Driver: n.Driver, Endpoint: n.Endpoint, Address: n.Receiver.Hidden})
		if err != nil {
			// Refused (or an older build): stop waiting for the socket.
			_ = n.Receiver.SetDeadline(time.Now())
		}
		rpcDone <- err
	}()

	if err := n.Receiver.SetDeadline(time.Now().Add(n.Timeout)); err != nil {
		return nil, err
	}
	for {
		conn, err := n.Receiver.AcceptUnix()
		if err != nil {
			cancel()
			if rpcErr := <-rpcDone; rpcErr != nil {
				err = rpcErr
			}
			return nil, fmt.Errorf("the instance serving %s did not hand its socket over: %w", n.Path, err)
		}
		taken, err := n.receive(conn)
		_ = conn.Close()
		if errors.Is(err, errNotAHandover) {
			continue
		}
		if err != nil {
			// The request is over before Take fails: nothing touches
			// n.Receiver afterwards, so that the caller may serve on it.
			// (After a handover the owner may call the new instance
			// before it answers: that one is not waited for.)
			cancel()
			<-rpcDone
		}
		return taken, err
	}
}

// receive takes the socket from one connection of A.
func (n *Newcomer) receive(conn *net.UnixConn) (*Taken, error) {
	if err := conn.SetDeadline(time.Now().Add(n.Timeout)); err != nil {
		return nil, err
	}
	payload, listener, err := receiveListener(conn)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNotAHandover, err)
	}
	refuse := func(err error) (*Taken, error) {
		_ = listener.Close()
		_, _ = conn.Write([]byte{refused})
		return nil, err
	}
	st, err := decodeState(payload)
	if err != nil {
		return refuse(err)
	}
	if err := checkState(st, n.Driver, n.Endpoint, n.Found); err != nil {
		return refuse(err)
	}
	listener.SetUnlinkOnClose(false)
	if _, err := conn.Write([]byte{accepted}); err != nil {
		_ = listener.Close()
		return nil, err
	}
	var confirmed [1]byte
	if _, err := io.ReadFull(conn, confirmed[:]); err != nil || confirmed[0] != done {
		// A may or may not have let go: replacing the socket is right
		// either way.
		_ = listener.Close()
		return nil, fmt.Errorf("the previous instance did not confirm the handover (%q, %v)", confirmed[0], err)
	}
	now, _, err := sockfile.Lstat(n.Path)
	if err != nil || now != n.Found {
		_ = listener.Close()
		return nil, errors.New("the socket at the path changed during the handover")
	}
	taken := &Taken{Socket: &sockfile.Socket{UnixListener: listener, Path: n.Path, File: now}, Verdict: st.Verdict}
	if id, _, err := sockfile.Lstat(n.Receiver.Hidden); err == nil && id == now {
		taken.Hidden = n.Receiver.Hidden
	}
	return taken, nil
}

// checkState is B's check of what A sends: the same driver and endpoint
// as B's, and the socket bound to the file B found at the path.
func checkState(st State, driver, endpoint string, found sockfile.ID) error {
	switch {
	case st.Driver != driver || st.Endpoint != endpoint:
		return fmt.Errorf("the previous instance registers %q with endpoint %q, not %q with %q", st.Driver, st.Endpoint, driver, endpoint)
	case found == (sockfile.ID{}) || st.Dev != found.Dev || st.Ino != found.Ino:
		return errors.New("the socket handed over is not the one at the path")
	}
	return nil
}

// ask makes the HandOver call on the registration socket at path.
func ask(ctx context.Context, path string, req Request) error {
	return unixgrpc.InvokeJSON(ctx, path, Method, req, nil)
}
