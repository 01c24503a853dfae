package registration

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"time"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
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
	err := unixgrpc.Hold(ctx, path, timeout, func() error {
		// The connection may have reached a socket that replaced file.
		if now, err := os.Lstat(path); err != nil || !os.SameFile(now, file) {
			return errOwnerReplaced
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		lost(id)
	}
}

var errOwnerReplaced = errors.New("another socket is at the path")
