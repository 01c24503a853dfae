package registration

// The loop's part in a handover of the registration socket between two
// instances of the registrar (package handover has the protocol): as the
// owner A it offers its socket when the machine decides to, and as the new
// instance B it asks for the socket when a claim finds a registrar that
// can hand it over. The machine decides; these are the conversations.

import (
	"context"
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
	// The request is checked here, once: one that no state of the loop can
	// accept (the question of canHandOver) never waits for a conversation
	// of the loop, and the loop only decides whether to offer.
	asked := handover.Owner{Socket: &sockfile.Socket{Path: SocketPath(r.s.cfg.Dir, r.name)}, Driver: r.name, Endpoint: r.s.cfg.Endpoint}
	if err := asked.Check(req); err != nil {
		return nil, grpcstatus.Error(codes.FailedPrecondition, err.Error())
	}
	call := &handoverCall{ctx: ctx, req: req, reply: make(chan error, 1)}
	stopping := grpcstatus.Error(codes.Unavailable, "the registrar is stopping")
	if !r.s.send(handoverAsked{r.gen, call}) {
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

// offer is A's side, a conversation: it offers the current publication
// to call; the machine steps aside once it was taken.
func (l *loop) offer(call *handoverCall) func() outcome {
	owner := &handover.Owner{
		Socket: l.pub.sock, Driver: l.m.name, Endpoint: l.s.cfg.Endpoint,
		Verdict: l.m.log.lastVerdict, Timeout: l.s.cfg.CheckTimeout,
	}
	return func() outcome { return outcome{ev: offered{call, handover.Offer(call.ctx, owner, call.req)}} }
}

// canHandOver asks the socket at path whether it serves the registrar's
// own service, with a request no owner accepts (it names no receiving
// socket): a registrar that can hand its socket over refuses it, any other
// answers Unimplemented (upstream's registrar, ok false) or nothing (a
// dead socket, err). No socket is bound for the question: a name created
// and removed at once in the registry directory makes kubelet's plugin
// watcher log an error.
func canHandOver(ctx context.Context, path string, timeout time.Duration) (ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = unixgrpc.InvokeJSON(ctx, path, handover.Method, struct{}{}, nil)
	switch grpcstatus.Code(err) {
	case codes.Unimplemented:
		return false, nil
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false, err
	}
	return true, nil
}

// takeOver is B's side, a conversation: it asks the instance serving the
// claimed path for its socket (handover.Take), through a hidden socket of
// its own. Its outcome is the socket taken; or, when the owner did not
// hand it over, that hidden socket, still listening, to be published
// instead (its name stays); or notTaken when it cannot be.
func (l *loop) takeOver(gen uint64) func() outcome {
	name, path := l.m.claim, SocketPath(l.s.cfg.Dir, l.m.claim)
	return func() outcome {
		before, _, err := sockfile.Lstat(path)
		var recv *sockfile.Socket
		if err == nil {
			recv, err = sockfile.Listen(path)
		}
		if err != nil {
			l.logger.V(2).Info("No handover of the registration socket at the path", "path", path, "err", err)
			return outcome{ev: notTaken{}}
		}
		taken, err := handover.Take(handover.Newcomer{
			Path: path, Found: before, Driver: name, Endpoint: l.s.cfg.Endpoint,
			Receiver: recv, Timeout: l.s.cfg.CheckTimeout,
		})
		if err == nil {
			_ = recv.Close()
			// Still our receiving socket when the owner did not move its
			// hidden name here.
			_, _ = recv.Remove()
			return outcome{taken: &tookOver{taken, name, gen}}
		}
		l.logger.V(2).Info("No handover of the registration socket at the path", "path", path, "err", err)
		if id, _, lerr := sockfile.Lstat(recv.Hidden); lerr == nil && id == recv.File && recv.SetDeadline(time.Time{}) == nil {
			return outcome{spare: recv}
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
		return outcome{ev: notTaken{}}
	}
}

// tookOver is the outcome of a takeover: the socket taken for the driver
// name.
type tookOver struct {
	taken *handover.Taken
	name  string
	gen   uint64
}

// adopt serves kubelet on a socket taken over, with the previous
// instance's registration.
func (l *loop) adopt(t tookOver) adopted {
	l.install(t.taken.Socket, t.name, t.gen)
	return adopted{t.gen, t.taken.File, t.taken.Verdict}
}
