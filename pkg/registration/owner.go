package registration

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// ownerWatch is a connection this instance holds, while it is superseded,
// to the instance that serves the registration socket in its place. A
// process that dies leaves its socket file behind, and nothing changes in
// the directory; its end of this connection is closed by the kernel,
// which is the event that tells this instance to look at the path again.
type ownerWatch struct {
	id     uint64
	file   fs.FileInfo
	cancel context.CancelFunc
}

// watchOwner connects to the socket at path, which must be file, and calls
// lost with id once the connection to it fails or cannot be made within
// timeout, unless ctx ends first.
func watchOwner(ctx context.Context, id uint64, path string, file fs.FileInfo, timeout time.Duration, lost func(id uint64)) {
	if err := holdConnection(ctx, path, file, timeout); err != nil && ctx.Err() == nil {
		lost(id)
	}
}

var errOwnerReplaced = errors.New("another socket is at the path")

// holdConnection returns when the connection to the owner is lost.
func holdConnection(ctx context.Context, path string, file fs.FileInfo, timeout time.Duration) error {
	// No idle timeout: the connection carries no calls, and must stay up as
	// long as the owner does.
	conn, err := grpc.NewClient("unix:"+path, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithIdleTimeout(0), grpc.WithUserAgent(UserAgent))
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.Connect()
	connectCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for state := conn.GetState(); state != connectivity.Ready; state = conn.GetState() {
		// Only the timeout ends this wait: a socket that never becomes
		// ready is not dialled in a loop.
		if !conn.WaitForStateChange(connectCtx, state) {
			return connectCtx.Err()
		}
	}
	// The connection may have reached a socket that replaced file.
	if now, err := os.Lstat(path); err != nil || !os.SameFile(now, file) {
		return errOwnerReplaced
	}
	conn.WaitForStateChange(ctx, connectivity.Ready)
	return errors.New("the connection to the owner of the registration socket was closed")
}
