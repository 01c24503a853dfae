package kubelet

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/test/kubelet/report"
)

// Main is the e2e kubelet's command, fakekubelet, which each minor's module
// builds with its plugin manager: kubelet's plugin registration, nothing
// else, the real plugin manager and CSI registration handler on a fake API
// server. It writes one report.Event a line on standard output for every
// handler call and logs kubelet's own klog output on standard error. SIGTERM
// or SIGINT stops it without deregistering anything, like a kubelet that
// stops; a new process is a restarted kubelet. SIGUSR1 replaces its Node
// (Kubelet.ReplaceNode), reported as a report.NodeReplaced event.
func Main(minor Minor) {
	var cfg Config
	flag.StringVar(&cfg.RegistryDir, "registry-dir", "", "plugin registration directory to watch, kubelet's <root-dir>/plugins_registry (required)")
	flag.StringVar(&cfg.RootDir, "root-dir", "", "kubelet root directory; defaults to the registry directory's parent")
	flag.StringVar(&cfg.NodeName, "node-name", "e2e-node", "name of the Node object")
	klog.InitFlags(nil)
	flag.Parse()
	if cfg.RegistryDir == "" {
		fmt.Fprintln(os.Stderr, "fakekubelet: --registry-dir is required")
		os.Exit(2)
	}
	if cfg.RootDir == "" {
		cfg.RootDir = filepath.Dir(cfg.RegistryDir)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())

	emit := func(e report.Event) {
		// Best effort: a reader that went away has nothing left to learn.
		_, _ = os.Stdout.Write(e.Encode())
	}
	replace := make(chan os.Signal, 1)
	signal.Notify(replace, syscall.SIGUSR1)
	k, err := Start(ctx, cfg, minor, emit)
	if err != nil {
		klog.ErrorS(err, "Starting the kubelet failed")
		klog.Flush()
		os.Exit(1)
	}
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-replace:
			if err := k.ReplaceNode(ctx); err != nil {
				klog.ErrorS(err, "Replacing the Node failed")
			}
		}
	}
	klog.InfoS("Stopping the kubelet")
	klog.Flush()
}
