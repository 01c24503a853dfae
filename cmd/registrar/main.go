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

// version is set by make (-X main.version); the default is hack/version.sh's.
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
