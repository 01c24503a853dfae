package main

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/csi-registrar/node-driver-registrar/internal/kubeapi"
	"github.com/csi-registrar/node-driver-registrar/pkg/driver"
	"github.com/csi-registrar/node-driver-registrar/pkg/features/csinode"
	"github.com/csi-registrar/node-driver-registrar/pkg/features/driverhealth"
	"github.com/csi-registrar/node-driver-registrar/pkg/features/nodegate"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// The optional features (pkg/features), each started by register when its
// flags ask for it. --diagnose is a mode of its own (diagnose.go).

// startNodeGate runs the node gate of --remove-node-taint and
// --node-condition, told of kubelet's verdicts by an observer; nil without
// them. stop ends it: it outlives the registration, which withdraws its
// socket on the way out, so that it tells the API server (within
// nodegate.DefaultFinalTimeout).
func startNodeGate(ctx context.Context, o *options, srv *registration.Server) (gate *nodegate.Gate, stop func(), err error) {
	gate, err = newNodeGate(o)
	if gate == nil || err != nil {
		return nil, func() {}, err
	}
	srv.Observe(tellGate(gate))
	_, nodeNameFlag := o.node()
	gateCtx, stopGate := context.WithCancel(context.WithoutCancel(withFlagLogged(ctx, nodeNameFlag)))
	var running sync.WaitGroup
	running.Go(func() { gate.Run(gateCtx) })
	return gate, func() {
		stopGate()
		running.Wait()
	}, nil
}

// newNodeGate is the gate of --remove-node-taint and --node-condition, nil
// without them: the API server is then never contacted.
func newNodeGate(o *options) (*nodegate.Gate, error) {
	if !o.gatesNode() {
		return nil, nil
	}
	client, err := apiClient(o)
	if err != nil {
		return nil, fmt.Errorf("--remove-node-taint and --node-condition: %w", err)
	}
	name, _ := o.node()
	return nodegate.New(nodegate.Config{
		NodeName:      name,
		TaintKeys:     o.removeNodeTaints,
		Condition:     o.nodeCondition,
		ConditionType: o.nodeConditionType,
		Client:        client,
	}), nil
}

// apiClient is a client of the API server: with --kubeconfig's
// credentials, or else the pod's service account.
func apiClient(o *options) (*kubeapi.Client, error) {
	cfg, err := kubeapi.Config(o.kubeconfig, "csi-node-driver-registrar/"+version)
	if err != nil {
		return nil, err
	}
	return kubeapi.NewClient(cfg)
}

// startCSINode runs the CSINode confirmation of --confirm-csinode on g: the
// watcher follows the driver's name the registration registers, and its
// findings go to the registration, which decides what they mean. nil
// without the flag.
func startCSINode(ctx context.Context, o *options, srv *registration.Server, g *errgroup.Group) (*csinode.Watcher, error) {
	if !o.confirmCSINode {
		return nil, nil
	}
	client, err := apiClient(o)
	if err != nil {
		return nil, fmt.Errorf("--confirm-csinode: %w", err)
	}
	name, _ := o.node()
	watcher := csinode.New(name, client, nil, func(f csinode.Finding) { srv.ReportCSINode(registration.CSINodeReport(f)) })
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
	return watcher, nil
}

// startDriverHealth serves --driver-health-endpoint on g: the driver's own
// liveness probe, a listener of its own, sharing nothing with the
// registration but the driver's restarts, which make it dial again. nil
// without the flag.
func startDriverHealth(ctx context.Context, o *options, address driver.Address, g *errgroup.Group) *driverhealth.Prober {
	if o.driverHealthEndpoint == "" {
		return nil
	}
	prober := driverhealth.New(address.Path, o.probeTimeout)
	g.Go(func() error {
		return withFlag("--driver-health-endpoint", prober.Serve(withFlagLogged(ctx, "--driver-health-endpoint"), o.driverHealthEndpoint, httpShutdownTimeout))
	})
	return prober
}
