package main

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/internal/kubeapi"
	"github.com/csi-registrar/node-driver-registrar/pkg/driver"
	"github.com/csi-registrar/node-driver-registrar/pkg/features/csinode"
	"github.com/csi-registrar/node-driver-registrar/pkg/features/driverhealth"
	"github.com/csi-registrar/node-driver-registrar/pkg/features/events"
	"github.com/csi-registrar/node-driver-registrar/pkg/features/nodegate"
	"github.com/csi-registrar/node-driver-registrar/pkg/healthz"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// The start functions run a feature when its flags ask for it, and add it
// to reports, which the HTTP endpoint serves.

// startNodeGate runs the node gate. It outlives the registration, which
// withdraws its socket on the way out, so that stop lets it tell the API
// server.
func startNodeGate(ctx context.Context, o *options, srv *registration.Server, reports *[]healthz.Feature) (stop func(), err error) {
	gate, err := newNodeGate(o)
	if gate == nil || err != nil {
		return func() {}, err
	}
	*reports = append(*reports, gate)
	srv.Observe(tellGate(gate))
	_, nodeNameFlag := o.node()
	gateCtx, stopGate := context.WithCancel(context.WithoutCancel(withFlagLogged(ctx, nodeNameFlag)))
	var running sync.WaitGroup
	running.Go(func() { gate.Run(gateCtx) })
	return func() {
		stopGate()
		running.Wait()
	}, nil
}

// newNodeGate is nil without its flags: the API server is then never contacted.
func newNodeGate(o *options) (*nodegate.Gate, error) {
	if !o.gatesNode() {
		return nil, nil
	}
	client, err := apiClient(o)
	if err != nil {
		return nil, fmt.Errorf("--remove-node-taint and --node-condition: %w", err)
	}
	cfg := o.nodeGate
	cfg.NodeName, _ = o.node()
	cfg.Client = client
	return nodegate.New(cfg), nil
}

func apiClient(o *options) (*kubeapi.Client, error) {
	cfg, err := apiConfig(o)
	if err != nil {
		return nil, err
	}
	return kubeapi.NewClient(cfg)
}

// apiConfig is the API server's configuration every feature uses.
func apiConfig(o *options) (*rest.Config, error) {
	return kubeapi.Config(o.kubeconfig, "csi-node-driver-registrar/"+version)
}

// startCSINode runs --confirm-csinode's watcher; its findings go to the
// registration, which decides what they mean.
func startCSINode(ctx context.Context, o *options, srv *registration.Server, g *errgroup.Group, reports *[]healthz.Feature) error {
	if !o.registration.ConfirmCSINode {
		return nil
	}
	client, err := apiClient(o)
	if err != nil {
		return fmt.Errorf("--confirm-csinode: %w", err)
	}
	name, _ := o.node()
	watcher := csinode.New(name, client, nil, func(f csinode.Finding) { srv.ReportCSINode(registration.CSINodeReport(f)) })
	*reports = append(*reports, watcher)
	srv.Observe(func(_ registration.Status, happened []registration.Transition) {
		for _, t := range happened {
			if named, ok := t.(registration.Named); ok {
				watcher.SetDriver(named.Name)
			}
		}
	})
	g.Go(func() error {
		watcher.Run(withFlagLogged(ctx, "--confirm-csinode"))
		return nil
	})
	return nil
}

// startDriverHealth serves --driver-health-endpoint; nil without it.
func startDriverHealth(ctx context.Context, o *options, address driver.Address, g *errgroup.Group, reports *[]healthz.Feature) *driverhealth.Prober {
	if o.driverHealthEndpoint == "" {
		return nil
	}
	prober := driverhealth.New(address.Path, o.probeTimeout, clock.RealClock{})
	*reports = append(*reports, prober)
	g.Go(func() error {
		return withFlag("--driver-health-endpoint", prober.Serve(withFlagLogged(ctx, "--driver-health-endpoint"), o.driverHealthEndpoint, httpShutdownTimeout))
	})
	return prober
}

// startEvents records --events' Events on the Pod until ctx ends.
func startEvents(ctx context.Context, o *options, srv *registration.Server, limit registration.FailureLimit) error {
	if !o.events {
		return nil
	}
	pod, err := o.pod()
	if err != nil {
		return withFlag("--events", err)
	}
	cfg, err := apiConfig(o)
	if err != nil {
		return withFlag("--events", err)
	}
	recorder, err := events.New(withFlagLogged(ctx, "--events"), events.Config{Pod: pod, REST: cfg, Limit: limit, Status: srv.Status})
	if err != nil {
		return withFlag("--events", err)
	}
	srv.Observe(recorder.Observe)
	return nil
}
