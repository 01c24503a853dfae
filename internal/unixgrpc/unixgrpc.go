// Package unixgrpc makes the registrar's gRPC client connections to Unix
// sockets: the CSI driver's, and registration sockets.
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

// UserAgent marks the registrar's own calls, which are not kubelet's.
const UserAgent = "csi-node-driver-registrar"

// NewClient dials path itself: gRPC's "unix:" targets reject Windows paths
// and unescape '%'.
func NewClient(path string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///localhost", append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent(UserAgent),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}),
	}, opts...)...)
}

// ConnectError is a failure to connect at all, not an RPC that failed.
type ConnectError struct{ Err error }

func (e *ConnectError) Error() string { return e.Err.Error() }
func (e *ConnectError) Unwrap() error { return e.Err }

// Once connects now and returns a client that never reconnects, so that a
// caller makes exactly one attempt; a failure to connect is a *ConnectError.
func Once(ctx context.Context, path string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	raw, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
	if err != nil {
		return nil, &ConnectError{err}
	}
	var handedOut atomic.Bool
	conn, err := NewClient(path, append(opts, grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) {
		if handedOut.Swap(true) {
			return nil, errors.New("the connection was closed; this client does not reconnect")
		}
		return raw, nil
	}))...)
	if err != nil {
		_ = raw.Close()
	}
	return conn, err
}

// Hold holds an idle connection, which the kernel closes when the server
// dies, until ctx is done (nil) or the connection ends (an error).
func Hold(ctx context.Context, path string, timeout time.Duration, connected func() error) error {
	conn, err := NewClient(path, NoIdleTimeout)
	if err != nil {
		return err
	}
	return HoldClient(ctx, conn, timeout, connected)
}

// NoIdleTimeout keeps a held connection up while it carries no calls.
var NoIdleTimeout = grpc.WithIdleTimeout(0)

// HoldClient is Hold on a client made with NoIdleTimeout, without a new
// connection if it has one. It closes conn.
func HoldClient(ctx context.Context, conn *grpc.ClientConn, timeout time.Duration, connected func() error) error {
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
	if err := connected(); err != nil {
		return err
	}
	if conn.WaitForStateChange(ctx, connectivity.Ready) {
		return errors.New("the connection was closed")
	}
	return nil
}

// InvokeJSON calls method of the registrar's own service, JSON in
// StringValues; out may be nil.
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
	if err := conn.Invoke(ctx, method, &wrapperspb.StringValue{Value: string(body)}, answer); err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal([]byte(answer.GetValue()), out); err != nil {
		return fmt.Errorf("%s answer: %w", method, err)
	}
	return nil
}
