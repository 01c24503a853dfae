// Package unixgrpc makes every gRPC client connection of the registrar
// to a Unix socket: to the CSI driver, to registration sockets of
// kubelet's plugin registry (another instance's, or its own for
// --diagnose).
package unixgrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// UserAgent is the gRPC user agent of the registrar's own calls. A
// registration socket does not count calls with it as kubelet's.
const UserAgent = "csi-node-driver-registrar"

// NewClient returns a client of the gRPC server on the Unix socket at
// path; it connects on its first call, and again after a failure.
func NewClient(path string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return newClient(func(ctx context.Context) (net.Conn, error) {
		var dialer net.Dialer
		return dialer.DialContext(ctx, "unix", path)
	}, opts...)
}

// newClient makes a client whose connections dial makes. The dialer
// connects to the path itself, as upstream's does: gRPC's parsing of
// "unix:" targets would reject Windows paths ("unix://C:\csi\csi.sock")
// and unescape '%' in paths. The passthrough target only sets the
// :authority, which is "localhost" for Unix sockets in gRPC too.
func newClient(dial func(context.Context) (net.Conn, error), opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///localhost", append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent(UserAgent),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dial(ctx) }),
	}, opts...)...)
}

// ConnectError is a failure to connect to a socket at all, as opposed to
// an RPC that failed on an open connection.
type ConnectError struct{ Err error }

func (e *ConnectError) Error() string { return e.Err.Error() }
func (e *ConnectError) Unwrap() error { return e.Err }

// Once connects to the Unix socket at path now, within ctx, and returns a
// client whose only connection is that one: gRPC never reconnects, so a
// caller makes exactly one attempt. A failure to connect is a
// *ConnectError, with the plain error (no such file, connection refused).
func Once(ctx context.Context, path string) (*grpc.ClientConn, error) {
	var dialer net.Dialer
	raw, err := dialer.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, &ConnectError{err}
	}
	var handedOut atomic.Bool
	conn, err := newClient(func(context.Context) (net.Conn, error) {
		if handedOut.Swap(true) {
			return nil, errors.New("the connection was closed; this client does not reconnect")
		}
		return raw, nil
	})
	if err != nil {
		_ = raw.Close()
		return nil, err
	}
	return conn, nil
}

// ErrLost is returned by Hold when the connection it held ended.
var ErrLost = errors.New("the connection was closed")

// Hold connects to the gRPC server on the Unix socket at path, and holds
// the connection, which carries no calls, until it ends: when the server's
// process dies the kernel closes it, so that a socket file left behind is
// not mistaken for a live server. It returns ErrLost then, an error when no
// connection could be made (at the first failure, or after timeout), the
// error of
// connected (called once the connection is up; nil is allowed), or nil
// once ctx is done.
func Hold(ctx context.Context, path string, timeout time.Duration, connected func() error) error {
	// No idle timeout: the connection must stay up as long as the server.
	conn, err := NewClient(path, grpc.WithIdleTimeout(0))
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.Connect()
	connectCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for state := conn.GetState(); state != connectivity.Ready; state = conn.GetState() {
		if state == connectivity.TransientFailure {
			// Refused, or no such file: gRPC would only try again.
			return errors.New("cannot connect")
		}
		if !conn.WaitForStateChange(connectCtx, state) {
			if ctx.Err() != nil {
				return nil
			}
			return connectCtx.Err()
		}
	}
	if connected != nil {
		if err := connected(); err != nil {
			return err
		}
	}
	conn.WaitForStateChange(ctx, connectivity.Ready)
	if ctx.Err() != nil {
		return nil
	}
	return ErrLost
}

// InvokeJSON calls method (its full name) of the registrar's own service
// on the registration socket at path: in as JSON in a StringValue, and the
// answer's JSON into out, unless out is nil.
func InvokeJSON(ctx context.Context, path, method string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	conn, err := NewClient(path)
	if err != nil {
		return err
	}
	defer conn.Close()
	answer := &wrapperspb.StringValue{}
	if err := conn.Invoke(ctx, method, &wrapperspb.StringValue{Value: string(body)}, answer); err != nil {
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
