package registration

// The registrar's own gRPC service beside kubelet's: HandOver, and Status
// for --diagnose, which needs no HTTP endpoint. JSON in StringValues.

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
)

// ReadStatus asks the registrar serving the socket at path for its Status.
func ReadStatus(ctx context.Context, path string) (Status, error) {
	var st Status
	err := unixgrpc.InvokeJSON(ctx, path, "/"+handover.ServiceName+"/Status", struct{}{}, &st)
	return st, err
}

func (s *Server) ownService() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
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
