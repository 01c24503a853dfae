package registration

// The registrar's own gRPC service on its registration socket: HandOver
// (handover.go, the wire format in package handover), PortWanted (port.go)
// and Status (statusrpc.go), each a StringValue in and out, JSON inside.
// Upstream's registrar and older builds answer the calls they do not know
// with Unimplemented.

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
)

var ownServiceDesc = grpc.ServiceDesc{
	ServiceName: handover.ServiceName,
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
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + handover.ServiceName + "/" + name}, call)
		},
	}
}
