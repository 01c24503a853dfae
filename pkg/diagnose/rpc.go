package diagnose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// callOnce connects to the Unix socket at path once and runs rpc on that
// one connection, all within timeout (unixgrpc.Once: a diagnosis makes one
// attempt, and a failure to connect is a plain *unixgrpc.ConnectError).
func callOnce(ctx context.Context, path string, timeout time.Duration, rpc func(context.Context, *grpc.ClientConn) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := unixgrpc.Once(ctx, path)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	return rpc(ctx, conn)
}

// pluginInfo asks a CSI driver for its name and version.
func pluginInfo(ctx context.Context, path string, timeout time.Duration) (*csi.GetPluginInfoResponse, error) {
	var info *csi.GetPluginInfoResponse
	err := callOnce(ctx, path, timeout, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		info, err = csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		return err
	})
	return info, err
}

// registrationInfo asks a registration socket what kubelet would learn
// from it.
func registrationInfo(ctx context.Context, path string, timeout time.Duration) (*registerapi.PluginInfo, error) {
	var info *registerapi.PluginInfo
	err := callOnce(ctx, path, timeout, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		info, err = registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
		return err
	})
	return info, err
}

// registrarStatus asks the registrar serving a registration socket for its
// state; upstream's registrar and older builds answer Unimplemented.
func registrarStatus(ctx context.Context, path string, timeout time.Duration) (*registration.Status, error) {
	out := &wrapperspb.StringValue{}
	err := callOnce(ctx, path, timeout, func(ctx context.Context, conn *grpc.ClientConn) error {
		return conn.Invoke(ctx, registration.StatusMethod, &wrapperspb.StringValue{}, out)
	})
	if err != nil {
		return nil, err
	}
	var st registration.Status
	if err := json.Unmarshal([]byte(out.GetValue()), &st); err != nil {
		return nil, fmt.Errorf("the registrar's state: %w", err)
	}
	return &st, nil
}

// describeCallError says in a few words how a call made by callOnce failed.
func describeCallError(err error, timeout time.Duration) string {
	var ce *unixgrpc.ConnectError
	if errors.As(err, &ce) {
		var opErr *net.OpError
		if errors.As(ce.Err, &opErr) && opErr.Err != nil {
			// "connect: connection refused" without the repeated path.
			return "cannot connect (" + opErr.Err.Error() + ")"
		}
		return "cannot connect (" + ce.Err.Error() + ")"
	}
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	switch st.Code() {
	case codes.DeadlineExceeded:
		return fmt.Sprintf("no answer within %v", timeout)
	case codes.Canceled:
		return "canceled"
	default:
		return fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
}

// accepts tells whether something listens on the Unix socket at path.
func accepts(ctx context.Context, path string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", path)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}
