// Command registrar registers a CSI driver with kubelet: a drop-in
// replacement for the node-driver-registrar sidecar. It owns the flags,
// logging set-up and exit codes; the work is done in pkg/.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time by make: -ldflags "-X main.version=$(hack/version.sh)".
// The default is what hack/version.sh gives when it cannot tell.
var version = "v0.0.0-unknown"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		// A second signal ends the process at once.
		<-ctx.Done()
		stop()
	}()
	os.Exit(run(ctx, os.Args, os.Stdout, os.Stderr))
}
