package registration

// Handover of the registration socket between two instances of the
// registrar for the same driver (the old and the new pod of a rolling
// update with maxSurge). kubelet reacts only to file events in its plugin
// registry and keeps no connection, so the new instance takes over the
// listening socket itself, passed as a file descriptor, instead of putting
// a new file at the path, which kubelet would see as a new plugin and
// deregister the driver for about a second.
//
// The protocol, between the new instance B and the owner A:
//  1. B listens on a new hidden name H of its own in the registry directory
//     and calls HandOver through the registration socket, so the request
//     reaches whoever serves the path. An older build answers Unimplemented.
//  2. A's event loop checks the request (same driver, same endpoint, H a
//     hidden name of that driver, kubelet registered the driver through
//     A's socket, the socket at the path still A's), connects to H and
//     sends its listening socket (SCM_RIGHTS) with its state.
//  3. B checks the state against the file at the path and answers 'y'.
//  4. A stops accepting, renames its hidden name over H (so that H becomes
//     B's hidden name of the same socket, and no name goes missing for
//     kubelet's watcher), steps aside, and answers 'd'.
//  5. B serves the socket. Without 'd' B closes its copy and replaces the
//     socket as it did before handovers existed: in every outcome the path
//     holds a socket that one instance owns.

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
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
)

const (
	handoverServiceName = "noderegistrar.v1.Handover"

	// Bytes B and A exchange after the socket was sent.
	handoverAccepted = 'y'
	handoverRefused  = 'n'
	handoverDone     = 'd'
)

// handoverRequest is what B asks for, as JSON in a StringValue.
type handoverRequest struct {
	Driver   string `json:"driver"`
	Endpoint string `json:"endpoint"`
	// Address is B's hidden socket where A sends the listening socket.
	Address string `json:"address"`
}

func decodeHandoverRequest(data []byte) (handoverRequest, error) {
	var req handoverRequest
	err := json.Unmarshal(data, &req)
	return req, err
}

// checkHandoverRequest is A's check of what B asks for: the same driver and
// endpoint as A's, and an address that is a hidden name of that driver's
// socket (socketPath) in the registry directory dir. The address must be
// that name joined to dir as B makes it, nothing the kernel would resolve
// differently from filepath.Clean: "dir/link/../.name" passes through a
// symbolic link to wherever it points.
func checkHandoverRequest(req handoverRequest, driver, endpoint, dir, socketPath string) error {
	name := filepath.Base(req.Address)
	switch {
	case req.Driver != driver:
		return fmt.Errorf("this instance registers driver %q, not %q", driver, req.Driver)
	case req.Endpoint != endpoint:
		return fmt.Errorf("this instance gives kubelet the endpoint %q, not %q", endpoint, req.Endpoint)
	case req.Address != filepath.Join(dir, name) || !isHiddenName(socketPath, name):
		return fmt.Errorf("%q is not a hidden socket name of the driver in the registry directory", req.Address)
	}
	return nil
}

// handoverState is what A sends with its socket.
type handoverState struct {
	Driver   string `json:"driver"`
	Endpoint string `json:"endpoint"`
	// Dev and Ino identify the file at the path that the socket is bound to.
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
	// Verdict is kubelet's verdict on the socket, set when kubelet
	// registered the driver through it.
	Verdict *Verdict `json:"verdict,omitempty"`
}

func decodeHandoverState(data []byte) (handoverState, error) {
	var st handoverState
	err := json.Unmarshal(data, &st)
	return st, err
}

// checkHandoverState is B's check of what A sends: the same driver and
// endpoint as B's, and the socket bound to the file B found at the path
// (before).
func checkHandoverState(st handoverState, driver, endpoint string, before fs.FileInfo) error {
	dev, ino, ok := fileID(before)
	switch {
	case st.Driver != driver || st.Endpoint != endpoint:
		return fmt.Errorf("the previous instance registers %q with endpoint %q, not %q with %q", st.Driver, st.Endpoint, driver, endpoint)
	case !ok || st.Dev != dev || st.Ino != ino:
		return errors.New("the socket handed over is not the one at the path")
	}
	return nil
}

// handoverCall is a request passed to the event loop, which owns the
// publication.
type handoverCall struct {
	ctx   context.Context
	gen   uint64
	req   handoverRequest
	reply chan error
}

// handoverServiceDesc is the registrar's own service on its registration
// socket: HandOver, PortWanted (port.go) and Status (statusrpc.go), each a
// StringValue in and out, JSON inside.
var handoverServiceDesc = grpc.ServiceDesc{
	ServiceName: handoverServiceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		stringValueMethod("HandOver", (*rpcServer).handOver),
		stringValueMethod("PortWanted", func(r *rpcServer, _ context.Context, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return r.portWanted()
		}),
		stringValueMethod("Status", func(r *rpcServer, _ context.Context, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return r.status()
		}),
	},
	Metadata: "handover",
}

// stringValueMethod describes the method name of the registrar's own
// service, served by handle.
func stringValueMethod(name string, handle func(*rpcServer, context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := &wrapperspb.StringValue{}
			if err := dec(in); err != nil {
				return nil, err
			}
			call := func(ctx context.Context, req any) (any, error) {
				return handle(srv.(*rpcServer), ctx, req.(*wrapperspb.StringValue))
			}
			if interceptor == nil {
				return call(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + handoverServiceName + "/" + name}, call)
		},
	}
}

// handOver passes a request to the event loop and waits for its outcome.
func (r *rpcServer) handOver(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	req, err := decodeHandoverRequest([]byte(in.GetValue()))
	if err != nil {
		return nil, grpcstatus.Errorf(codes.InvalidArgument, "handover request: %v", err)
	}
	r.logger.V(4).Info("Handover of the registration socket requested", "driver", req.Driver, "address", req.Address)
	call := &handoverCall{ctx: ctx, gen: r.gen, req: req, reply: make(chan error, 1)}
	select {
	case r.s.events <- call:
	case <-r.s.done:
		return nil, grpcstatus.Error(codes.Unavailable, "the registrar is stopping")
	case <-ctx.Done():
		return nil, grpcstatus.FromContextError(ctx.Err()).Err()
	}
	answer := func(err error) (*wrapperspb.StringValue, error) {
		if err != nil {
			return nil, grpcstatus.Error(codes.FailedPrecondition, err.Error())
		}
		return &wrapperspb.StringValue{Value: "handed over"}, nil
	}
	select {
	case err := <-call.reply:
		return answer(err)
	case <-ctx.Done():
		return nil, grpcstatus.FromContextError(ctx.Err()).Err()
	case <-r.s.done:
		// The loop replies before it returns, if it took the call.
		select {
		case err := <-call.reply:
			return answer(err)
		default:
			return nil, grpcstatus.Error(codes.Unavailable, "the registrar is stopping")
		}
	}
}

// handOver is A's side, run by the event loop: it either hands the
// current publication over and steps aside, or refuses and changes
// nothing.
func (l *loop) handOver(call *handoverCall) error {
	if err := call.ctx.Err(); err != nil {
		return err
	}
	req := call.req
	pub, state, name, verdict := l.pub, l.st.state, l.st.driverName, l.st.lastVerdict
	switch {
	case pub == nil || pub.gen != call.gen:
		return errors.New("this instance no longer serves the registration socket")
	case state != Registered:
		return fmt.Errorf("kubelet has not registered the driver through this instance's socket (state %s)", state)
	}
	if err := checkHandoverRequest(req, name, l.cfg.Endpoint, l.cfg.Dir, pub.path); err != nil {
		return err
	}
	if fi, err := os.Lstat(pub.path); err != nil || !pub.sock.isOurs(fi) {
		return errors.New("the socket at the path is not this instance's")
	}
	dev, ino, ok := fileID(pub.sock.own)
	listener, isUnix := pub.sock.Listener.(*net.UnixListener)
	if !ok || !isUnix {
		return errors.New("the socket cannot be handed over on this platform")
	}
	payload, err := json.Marshal(handoverState{Driver: name, Endpoint: l.cfg.Endpoint, Dev: dev, Ino: ino, Verdict: verdict})
	if err != nil {
		return err
	}

	conn, err := net.DialTimeout("unix", req.Address, l.cfg.CheckTimeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	uc := conn.(*net.UnixConn)
	if err := uc.SetDeadline(time.Now().Add(l.cfg.CheckTimeout)); err != nil {
		return err
	}
	if err := sendListener(uc, append(payload, '\n'), listener); err != nil {
		return fmt.Errorf("cannot send the socket: %w", err)
	}
	var answer [1]byte
	if _, err := io.ReadFull(uc, answer[:]); err != nil || answer[0] != handoverAccepted {
		// B closes its copy: the socket stays this instance's.
		return fmt.Errorf("the new instance did not take the socket (answer %q, %v)", answer[0], err)
	}

	// Committed: from here on the new instance accepts kubelet's
	// connections. The file at the path is now the new instance's: it must
	// never be removed from here.
	_ = listener.Close()
	if hidden := pub.sock.hidden; hidden != "" {
		if fi, err := os.Lstat(hidden); err == nil && pub.sock.isOurs(fi) {
			if err := os.Rename(hidden, req.Address); err != nil {
				_ = os.Remove(hidden)
			}
		}
	}
	l.stopRetry()
	l.pub = nil
	l.st.handedOverTo()
	// The HandOver call itself is in flight on this server.
	l.stopInBackground(pub)
	if _, err := uc.Write([]byte{handoverDone}); err != nil {
		// The new instance gave up before the end, and replaces the
		// socket: nobody serves it under the name given to it.
		_ = removeIfSame(req.Address, pub.sock.own)
	}
	l.watchOwner(pub.path, pub.sock.own)
	l.logger.Info("Handed the registration socket over to a newer instance of the driver: kubelet's registration stays", "path", pub.path)
	l.releasePortTo(pub.path)
	return nil
}

// takenOver is a socket received from the previous instance.
type takenOver struct {
	sock    *publishedSocket
	verdict *Verdict
}

// errNotAHandover: a connection to B's hidden socket that carried no
// socket, e.g. another instance checking whether the name is alive.
var errNotAHandover = errors.New("not a handover")

// takeOver is B's side: it asks the instance serving path for its socket.
// It is bounded by CheckTimeout, twice at most, and does not follow Run's
// context: once B has accepted the socket, only finishing the exchange
// keeps the path served.
func (l *loop) takeOver(name, path string) (*takenOver, error) {
	before, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	recv, address, recvOwn, err := listenHidden(path)
	if err != nil {
		return nil, err
	}
	var taken *takenOver
	defer func() {
		_ = recv.Close()
		// Still our receiving socket when the owner did not move its
		// hidden name here.
		_ = removeIfSame(address, recvOwn)
		if taken == nil {
			// The owner moved its hidden name of the socket here and let
			// go, but the handover was not finished: nobody serves that
			// socket any more, and its name must not be left behind. The
			// owner renames before it confirms, and this runs after the
			// connection was closed, so a later rename is not possible: the
			// owner removes the name itself when its confirmation fails.
			_ = removeIfSame(address, before)
		}
	}()

	timeout := l.cfg.CheckTimeout
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
	defer cancel()
	rpcDone := make(chan error, 1)
	go func() {
		err := requestHandover(ctx, path, handoverRequest{Driver: name, Endpoint: l.cfg.Endpoint, Address: address})
		if err != nil {
			// Refused (or an older build): stop waiting for the socket.
			_ = recv.SetDeadline(time.Now())
		}
		rpcDone <- err
	}()

	if err := recv.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	for {
		conn, err := recv.AcceptUnix()
		if err != nil {
			cancel()
			if rpcErr := <-rpcDone; rpcErr != nil {
				return nil, fmt.Errorf("the instance serving %s did not hand its socket over: %w", path, rpcErr)
			}
			return nil, fmt.Errorf("the instance serving %s did not hand its socket over: %w", path, err)
		}
		taken, err = l.receive(conn, name, path, address, before)
		_ = conn.Close()
		if errors.Is(err, errNotAHandover) {
			continue
		}
		return taken, err
	}
}

// receive takes the socket from one connection of the previous instance.
func (l *loop) receive(conn *net.UnixConn, name, path, address string, before fs.FileInfo) (*takenOver, error) {
	if err := conn.SetDeadline(time.Now().Add(l.cfg.CheckTimeout)); err != nil {
		return nil, err
	}
	payload, listener, err := receiveListener(conn)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNotAHandover, err)
	}
	refuse := func(err error) (*takenOver, error) {
		_ = listener.Close()
		_, _ = conn.Write([]byte{handoverRefused})
		return nil, err
	}
	st, err := decodeHandoverState(payload)
	if err != nil {
		return refuse(fmt.Errorf("handover state: %w", err))
	}
	if err := checkHandoverState(st, name, l.cfg.Endpoint, before); err != nil {
		return refuse(err)
	}
	listener.SetUnlinkOnClose(false)
	if _, err := conn.Write([]byte{handoverAccepted}); err != nil {
		_ = listener.Close()
		return nil, err
	}
	var done [1]byte
	if _, err := io.ReadFull(conn, done[:]); err != nil || done[0] != handoverDone {
		// The previous instance may or may not have let go: replacing
		// the socket is right either way.
		_ = listener.Close()
		return nil, fmt.Errorf("the previous instance did not confirm the handover (%q, %v)", done[0], err)
	}
	now, err := os.Lstat(path)
	if err != nil || !os.SameFile(now, before) {
		_ = listener.Close()
		return nil, errors.New("the socket at the path changed during the handover")
	}
	sock := &publishedSocket{Listener: listener, path: path, own: now}
	if fi, err := os.Lstat(address); err == nil && os.SameFile(fi, now) {
		sock.hidden = address
	}
	return &takenOver{sock: sock, verdict: st.Verdict}, nil
}

// adopt serves kubelet on a socket taken over, with the previous
// instance's registration.
func (l *loop) adopt(taken *takenOver) {
	l.st.generation++
	gen, name := l.st.generation, l.st.driverName
	l.install(&publication{gen: gen, name: name, path: taken.sock.path, sock: taken.sock}, func(st *status) { st.adopted(taken.verdict) })
	l.logger.Info("Took the registration socket over from the previous instance of the driver: kubelet's registration stays",
		"driver", name, "path", taken.sock.path, "endpoint", l.cfg.Endpoint, "registered", taken.verdict != nil, "reason", ReasonHandover)
	if taken.verdict != nil && taken.verdict.Registered && l.cfg.Registered != nil {
		// kubelet will not confirm again: its verdict came with the socket.
		l.cfg.Registered(name)
	}
}

func requestHandover(ctx context.Context, path string, req handoverRequest) error {
	return callOwnService(ctx, path, "HandOver", req, nil)
}

// callOwnService calls method of the registrar's own service on the
// registration socket at path: in as JSON in a StringValue, and the
// answer's JSON into out unless out is nil.
func callOwnService(ctx context.Context, path, method string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	conn, err := unixgrpc.NewClient(path)
	if err != nil {
		return err
	}
	defer conn.Close()
	answer := &wrapperspb.StringValue{}
	if err := conn.Invoke(ctx, "/"+handoverServiceName+"/"+method, &wrapperspb.StringValue{Value: string(body)}, answer); err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal([]byte(answer.GetValue()), out); err != nil {
		return fmt.Errorf("%s answer: %w", method, err)
	}
	return nil
}
