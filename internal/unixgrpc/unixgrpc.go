// Package unixgrpc makes the registrar's gRPC client connections to Unix
// sockets: the CSI driver's, and registration sockets of kubelet's plugin
// registry.
package unixgrpc

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// UserAgent is the gRPC user agent of the registrar's own calls. A
// registration socket does not count calls with it as kubelet's.
const UserAgent = "csi-node-driver-registrar"

// NewClient returns a client of the gRPC server on the Unix socket at
// path; it connects on its first call.
func NewClient(path string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix:"+path, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent(UserAgent),
	}, opts...)...)
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
