package registration

// The loop's part in a handover of the registration socket between two
// instances of the registrar (package handover has the protocol): as the
// owner A it decides whether to offer its socket and steps aside once it
// let go; as the new instance B it asks for the socket at start and serves
// the one it took.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

// handoverCall is a request passed to the event loop, which owns the
// publication.
type handoverCall struct {
	ctx   context.Context
	gen   uint64
	req   handover.Request
	reply chan error
}

// handOver passes a request to the event loop and waits for its outcome.
func (r *rpcServer) handOver(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	req, err := handover.DecodeRequest([]byte(in.GetValue()))
	if err != nil {
		r.logger.V(4).Info("Handover request refused", "err", err)
		return nil, err
	}
	r.logger.V(4).Info("Handover of the registration socket requested", "driver", req.Driver, "address", req.Address)
	call := &handoverCall{ctx: ctx, gen: r.gen, req: req, reply: make(chan error, 1)}
	stopping := grpcstatus.Error(codes.Unavailable, "the registrar is stopping")
	if !r.s.send(call) {
		return nil, stopping
	}
	select {
	case err = <-call.reply:
	case <-ctx.Done():
		return nil, grpcstatus.FromContextError(ctx.Err()).Err()
	case <-r.s.done:
		// The loop replied before it returned if it acted on the call.
		select {
		case err = <-call.reply:
		default:
			return nil, stopping
		}
	}
	if err != nil {
		return nil, grpcstatus.Error(codes.FailedPrecondition, err.Error())
	}
	return &wrapperspb.StringValue{Value: "handed over"}, nil
}

// handOver is A's side, run by the event loop: it refuses at once, or
// offers the current publication on a goroutine (talk), whose outcome
// (offered) steps aside or refuses and changes nothing.
func (l *loop) handOver(call *handoverCall) error {
	if err := call.ctx.Err(); err != nil {
		return err
	}
	pub, state := l.pub, l.m.state
	switch {
	case pub == nil || pub.gen != call.gen:
		return errors.New("this instance no longer serves the registration socket")
	case state != Registered:
		return fmt.Errorf("kubelet has not registered the driver through this instance's socket (state %s)", state)
	}
	owner := &handover.Owner{
		Listener: pub.sock.UnixListener,
		Path:     pub.path,
		File:     pub.sock.File,
		Hidden:   pub.sock.Hidden,
		Driver:   l.m.name,
		Endpoint: l.s.cfg.Endpoint,
		IsHiddenName: func(name string) bool {
			return sockfile.IsHiddenName(pub.path, name)
		},
		Timeout: l.s.cfg.CheckTimeout,
		Verdict: l.m.log.lastVerdict,
	}
	l.talk(func() any { return offered{call, pub, handover.Offer(call.ctx, owner, call.req)} })
	return nil
}

// offered is the outcome of the offer of publication pub for call.
type offered struct {
	call *handoverCall
	pub  *publication
	err  error
}

// offered steps aside once the socket was handed over, and answers the
// call.
func (l *loop) offered(o offered) error {
	var err error
	if o.err == nil {
		// The socket is the new instance's: its file at the path must
		// never be removed from here. Nothing replaced the publication
		// during the conversation. The HandOver call itself is in flight
		// on this server.
		l.pub = nil
		l.stopInBackground(o.pub)
		l.logger.Info("Handed the registration socket over to a newer instance of the driver: kubelet's registration stays", "path", o.pub.path)
		err = l.apply(handedOff{o.pub.sock.File})
	}
	// The caller, and tests, see the outcome in the snapshot as soon as
	// the reply is out.
	l.share()
	o.call.reply <- o.err
	return err
}

// canHandOver asks the socket at path whether it serves the registrar's
// own service, with a request no owner accepts (it names no receiving
// socket): a registrar that can hand its socket over refuses it, any other
// answers Unimplemented (upstream's registrar, ok false) or nothing (a
// dead socket, err). No socket is bound for the question: a name created
// and removed at once in the registry directory makes kubelet's plugin
// watcher log an error.
func (l *loop) canHandOver(path string) (ok bool, err error) {
	ctx, cancel := context.WithTimeout(l.ctx, l.s.cfg.CheckTimeout)
	defer cancel()
	err = unixgrpc.InvokeJSON(ctx, path, "/"+handover.ServiceName+"/HandOver", struct{}{}, nil)
	switch grpcstatus.Code(err) {
	case codes.Unimplemented:
		return false, nil
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false, err
	}
	return true, nil
}

// takeOver is B's side: it asks the instance serving path for its socket
// (handover.Take), through a hidden socket of its own. When the owner does
// not hand it over, that socket is returned, still listening, to be
// published instead (its name stays); nil when it cannot be.
func (l *loop) takeOver(name, path string) (*handover.Taken, *sockfile.Socket, error) {
	before, err := os.Lstat(path)
	if err != nil {
		return nil, nil, err
	}
	recv, err := sockfile.Listen(path)
	if err != nil {
		return nil, nil, err
	}
	taken, err := handover.Take(handover.Newcomer{
		Path: path, Found: before, Driver: name, Endpoint: l.s.cfg.Endpoint,
		Receiver: recv.UnixListener, Address: recv.Hidden, Timeout: l.s.cfg.CheckTimeout,
	})
	if err == nil {
		_ = recv.Close()
		// Still our receiving socket when the owner did not move its
		// hidden name here.
		_, _ = recv.Remove()
		return taken, nil, nil
	}
	if fi, lerr := os.Lstat(recv.Hidden); lerr == nil && os.SameFile(fi, recv.File) && recv.SetDeadline(time.Time{}) == nil {
		return nil, recv, err
	}
	_ = recv.Close()
	_, _ = recv.Remove()
	// The owner moved its hidden name of the socket here and let go, but
	// the handover was not finished: nobody serves that socket any more,
	// and its name must not be left behind. The owner renames before it
	// confirms, and this runs after the connection was closed, so a later
	// rename is not possible: the owner removes the name itself when its
	// confirmation fails.
	_, _ = sockfile.RemoveIfSame(recv.Hidden, before)
	return nil, nil, err
}

// adopt serves kubelet on a socket taken over, with the previous
// instance's registration.
func (l *loop) adopt(taken *handover.Taken) error {
	sock := &sockfile.Socket{UnixListener: taken.Listener, Path: l.m.path, Hidden: taken.Hidden, File: taken.File}
	gen := l.install(sock)
	l.logger.Info("Took the registration socket over from the previous instance of the driver: kubelet's registration stays",
		"driver", l.m.name, "path", sock.Path, "endpoint", l.s.cfg.Endpoint, "registered", taken.Verdict != nil, "reason", ReasonHandover)
	return l.apply(adopted{gen, taken.Verdict})
}
