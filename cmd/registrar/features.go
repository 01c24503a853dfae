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
	"github.com/csi-registrar/node-driver-registrar/pkg/healthz"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// features are the optional parts (pkg/features), wired into the core flow
// in this order, each when its flags ask for it. --diagnose is a mode of
// its own, run instead of the core flow (diagnose.go).
var features = []feature{wireNodeGate, wireCSINode, wireDriverHealth}

// A feature wires itself into the core flow, where its flags ask for it.
// stop, when not nil, runs once the core flow has stopped.
type feature func(ctx context.Context, o *options, c *core) (stop func(), err error)

// core is what a feature hooks into.
type core struct {
	address driver.Address
	// srv is the registration, which a feature may observe.
	srv *registration.Server
	// group runs what stops with the core flow, under groupCtx.
	group    *errgroup.Group
	groupCtx context.Context
	// followers are told when the driver is found and when it is gone.
	followers []driverFollower
	// reports add their sections to /status and their metrics to /metrics.
	reports []healthz.Feature
}

// driverFollower is told when the driver is found and when it is gone.
type driverFollower interface {
	DriverFound(name string)
	DriverGone()
}

// wireNodeGate runs the node gate of --remove-node-taint and
// --node-condition, told of kubelet's verdicts by an observer.
func wireNodeGate(ctx context.Context, o *options, c *core) (func(), error) {
	gate, err := newNodeGate(o)
	if gate == nil || err != nil {
		return nil, err
	}
	c.srv.Observe(tellGate(gate))
	c.reports = append(c.reports, gate)
	// The gate outlives the others, and so the signal: the registration
	// withdraws its socket on the way out, and the gate then tells the
	// API server (within nodegate.DefaultFinalTimeout) before it stops.
	_, nodeNameFlag := o.node()
	gateCtx, stopGate := context.WithCancel(context.WithoutCancel(withFlagLogged(ctx, nodeNameFlag)))
	var gateRunning sync.WaitGroup
	gateRunning.Go(func() { gate.Run(gateCtx) })
	return func() {
		stopGate()
		gateRunning.Wait()
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

// wireCSINode runs the CSINode confirmation of --confirm-csinode: the
// watcher follows the driver's name the registration registers, and its
// findings go to the registration, which decides what they mean.
func wireCSINode(_ context.Context, o *options, c *core) (func(), error) {
	if !o.confirmCSINode {
		return nil, nil
	}
	client, err := apiClient(o)
	if err != nil {
		return nil, fmt.Errorf("--confirm-csinode: %w", err)
	}
	name, _ := o.node()
	watcher := csinode.New(name, client, nil, func(f csinode.Finding) { c.srv.ReportCSINode(registration.CSINodeReport(f)) })
	c.srv.Observe(func(_ registration.Status, happened []registration.Transition) {
		for _, t := range happened {
			if named, ok := t.(registration.Named); ok {
				watcher.SetDriver(named.Name)
			}
		}
	})
	c.reports = append(c.reports, watcher)
	c.group.Go(func() error {
		watcher.Run(withFlagLogged(c.groupCtx, "--confirm-csinode"))
		return nil
	})
	return nil, nil
}

// wireDriverHealth serves --driver-health-endpoint: the driver's own
// liveness probe, a listener of its own, sharing nothing with the
// registration but the driver's restarts, which make it dial again.
func wireDriverHealth(_ context.Context, o *options, c *core) (func(), error) {
	if o.driverHealthEndpoint == "" {
		return nil, nil
	}
	driverHealth := driverhealth.New(c.address.Path, o.probeTimeout)
	c.followers = append(c.followers, driverHealth)
	c.reports = append(c.reports, driverHealth)
	c.group.Go(func() error {
		return withFlag("--driver-health-endpoint", driverHealth.Serve(withFlagLogged(c.groupCtx, "--driver-health-endpoint"), o.driverHealthEndpoint, httpShutdownTimeout))
	})
	return nil, nil
}
