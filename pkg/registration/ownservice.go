package registration

// The registrar's own gRPC service on its registration socket, beside
// kubelet's: HandOver (handover.go, the wire format in package handover),
// Status (the Status of /status, for --diagnose, which needs no HTTP
// endpoint) and the calls added with Answer. Each takes and returns a
// StringValue, JSON inside. Upstream's registrar and older builds answer
// the calls they do not know with Unimplemented.

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
)

// Answer serves method on the registrar's own service of every
// publication: a call without input, answered with what answer returns,
// as JSON. Call it before Run.
func (s *Server) Answer(method string, answer func() any) {
	s.answers = append(s.answers, stringValueMethod(method, func(*rpcServer, context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return jsonValue(answer())
	}))
}

// Ask calls method, added with Answer, on the registration socket at path
// and decodes the answer into out.
func Ask(ctx context.Context, path, method string, out any) error {
	return unixgrpc.InvokeJSON(ctx, path, "/"+handover.ServiceName+"/"+method, struct{}{}, out)
}

// ownService describes the registrar's own service.
func (s *Server) ownService() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: handover.ServiceName,
		HandlerType: (*any)(nil),
		Methods:     append([]grpc.MethodDesc{stringValueMethod("HandOver", (*rpcServer).handOver)}, s.answers...),
		Metadata:    "handover",
	}
}

func jsonValue(v any) (*wrapperspb.StringValue, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &wrapperspb.StringValue{Value: string(body)}, nil
}

// stringValueMethod describes the method name of the registrar's own
// service, served by handle.
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
