package registration

// The registrar's own gRPC service beside kubelet's (HandOver, and Status
// for --diagnose, which needs no HTTP endpoint; JSON in StringValues), and
// the loop's conversations of a handover (package handover has the
// protocol): the owner A offers its socket, the new instance B takes it.

import (
	"context"
	"encoding/json"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

// ReadStatus asks the registrar serving the socket at path for its Status.
func ReadStatus(ctx context.Context, path string) (Status, error) {
	var st Status
	err := unixgrpc.InvokeJSON(ctx, path, "/"+handover.ServiceName+"/Status", struct{}{}, &st)
	return st, err
}

var ownService = grpc.ServiceDesc{
	ServiceName: handover.ServiceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		stringValueMethod("HandOver", (*rpcServer).handOver),
		stringValueMethod("Status", func(r *rpcServer, _ context.Context, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			body, err := json.Marshal(r.s.Status())
			return &wrapperspb.StringValue{Value: string(body)}, err
		}),
	},
	Metadata: "handover",
}

func stringValueMethod(name string, handle func(*rpcServer, context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		// The registrar's servers have no interceptors.
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := &wrapperspb.StringValue{}
			if err := dec(in); err != nil {
				return nil, err
			}
			return handle(srv.(*rpcServer), ctx, in)
		},
	}
}

type handoverCall struct {
	ctx   context.Context
	req   handover.Request
	reply chan error
}

func (r *rpcServer) handOver(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	req, err := handover.DecodeRequest([]byte(in.GetValue()))
	if err != nil {
		r.logger.V(4).Info("Handover request refused", "err", err)
		return nil, err
	}
	r.logger.V(4).Info("Handover of the registration socket requested", "driver", req.Driver, "address", req.Address)
	// A request no state could accept (canHandOver's) never waits for the loop.
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

// offer is A's side.
func (e offer) carryOut(l *loop) error {
	owner := &handover.Owner{
		Socket: l.pub.sock, Driver: l.m.name, Endpoint: l.s.cfg.Endpoint,
		Verdict: l.m.rec.LastVerdict, Timeout: l.s.cfg.CheckTimeout,
	}
	l.converse(func() outcome {
		err := handover.Offer(e.call.ctx, owner, e.call.req)
		return func() event { return offered{e.call, err} }
	})
	return nil
}

// canHandOver sends a request no owner accepts: a registrar that can hand
// over refuses it, upstream's answers Unimplemented. It binds no socket:
// kubelet's watcher logs an error for a name gone before it looks.
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

// takeOver is B's side; when the owner does not hand over, B's receiving
// socket, still listening, is published instead.
func (e takeOver) carryOut(l *loop) error {
	name, path := l.m.claim, SocketPath(l.s.cfg.Dir, l.m.claim)
	var none outcome = func() event { return tookOver{} }
	l.converse(func() outcome {
		before, _, err := sockfile.Lstat(path)
		var recv *sockfile.Socket
		if err == nil {
			recv, err = sockfile.Listen(path)
		}
		if err != nil {
			l.logger.V(2).Info("No handover of the registration socket at the path", "path", path, "err", err)
			return none
		}
		taken, verdict, err := handover.Take(handover.Newcomer{
			Path: path, Found: before, Driver: name, Endpoint: l.s.cfg.Endpoint,
			Receiver: recv, Timeout: l.s.cfg.CheckTimeout,
		})
		if err == nil {
			_ = recv.Close()
			_, _ = recv.Remove()
			return func() event {
				l.install(taken, name, e.gen)
				return tookOver{e.gen, taken.File, verdict}
			}
		}
		l.logger.V(2).Info("No handover of the registration socket at the path", "path", path, "err", err)
		if id, _, lerr := sockfile.Lstat(recv.Hidden); lerr == nil && id == recv.File && recv.SetDeadline(time.Time{}) == nil {
			return func() event {
				l.spare = recv
				return tookOver{}
			}
		}
		_ = recv.Close()
		_, _ = recv.Remove()
		// The owner may have renamed its hidden name here before the
		// handover failed: nobody serves it, and no later rename can come.
		_, _ = sockfile.RemoveIfSame(recv.Hidden, before)
		return none
	})
	return nil
}
