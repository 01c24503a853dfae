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

// version is set at build time: -ldflags "-X main.version=$(git describe)".
var version = "unknown"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		// A second signal ends the process at once.
		<-ctx.Done()
		stop()
	}()
	os.Exit(run(ctx, os.Args, os.Stdout, os.Stderr))
}
