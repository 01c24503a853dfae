package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/csi-registrar/node-driver-registrar/internal/kubeapi"
	"github.com/csi-registrar/node-driver-registrar/pkg/features/csinode"
	"github.com/csi-registrar/node-driver-registrar/pkg/features/nodegate"
)

// The driver and startup taint that deploy/node-gate's policy names.
const (
	driverName   = "my-driver.csi.example.com"
	startupTaint = "my-driver.csi.example.com/agent-not-ready"
	leaseNS      = "kube-node-lease"
	// kubelet renews its Lease every quarter of its 40 s duration.
	leaseRenew    = 10 * time.Second
	leaseDuration = 40
	// csinodeRepublish is the registration's first wait before it
	// publishes its socket again for a CSINode that lost the driver.
	csinodeRepublish = time.Second
)

var (
	nodes    = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	leases   = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
	csiNodes = schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "csinodes"}
)

// process is a simulated process's own connection to the API server:
// client-go's transport for its configuration, dialling through
// connections of its own, so that each simulated process holds its own
// connection, as on a real node, and its end closes it.
type process struct {
	config *rest.Config
	conns  *connections
}

// newProcess makes the transport once and hands it to every client of the
// process, as client-go's transport cache does for the registrar's two
// features (same configuration, one connection).
func newProcess(base *rest.Config, token, userAgent string, who role, rec *recorder) (*process, error) {
	p := &process{conns: &connections{}}
	cfg := rest.CopyConfig(base)
	cfg.BearerToken, cfg.Dial = token, p.conns.dial
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	p.config = &rest.Config{Host: base.Host, Transport: rec.wrap(who, rt), UserAgent: userAgent}
	return p, nil
}

func (p *process) stop() { p.conns.closeAll() }

// kubelet does on its node what the registrar's features react to: it
// renews the node's Lease, and lists the driver in the node's CSINode
// while the driver is registered.
type kubelet struct {
	node   string
	client dynamic.Interface
	proc   *process
	// mu serialises the CSINode's writes, as kubelet's node info manager
	// does; the harness holds it while it replaces the Node, as a kubelet
	// restart would.
	mu      sync.Mutex
	nodeUID string
	lease   *unstructured.Unstructured
	leaseMu sync.Mutex
}

func newKubelet(node string, proc *process) (*kubelet, error) {
	c, err := dynamic.NewForConfig(proc.config)
	if err != nil {
		return nil, err
	}
	return &kubelet{node: node, client: c, proc: proc}, nil
}

// start reads the Node's UID and creates the Lease and an empty CSINode,
// as kubelet does when it starts; k.mu is held.
func (k *kubelet) start(ctx context.Context) error {
	n, err := k.client.Resource(nodes).Get(ctx, k.node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	k.nodeUID = string(n.GetUID())
	k.leaseMu.Lock()
	k.lease = nil
	k.leaseMu.Unlock()
	if err := k.renewLease(ctx); err != nil {
		return err
	}
	return k.writeCSINode(ctx, false)
}

func (k *kubelet) owner() []any {
	return []any{map[string]any{"apiVersion": "v1", "kind": "Node", "name": k.node, "uid": k.nodeUID}}
}

// renewLease updates the Lease kubelet last wrote, or gets (or creates) it
// first, as kubelet's lease controller does.
func (k *kubelet) renewLease(ctx context.Context) error {
	k.leaseMu.Lock()
	defer k.leaseMu.Unlock()
	c := k.client.Resource(leases).Namespace(leaseNS)
	now := metav1.NowMicro().UTC().Format(metav1.RFC3339Micro)
	if k.lease == nil {
		l, err := c.Get(ctx, k.node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l = &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
				"metadata": map[string]any{"name": k.node, "namespace": leaseNS, "ownerReferences": k.owner()},
				"spec":     map[string]any{"holderIdentity": k.node, "leaseDurationSeconds": int64(leaseDuration), "renewTime": now},
			}}
			l, err = c.Create(ctx, l, metav1.CreateOptions{})
		}
		if err != nil {
			return err
		}
		k.lease = l
		return nil
	}
	l := k.lease.DeepCopy()
	if err := unstructured.SetNestedField(l.Object, now, "spec", "renewTime"); err != nil {
		return err
	}
	l, err := c.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		// Read again at the next renewal: kubelet does the same on a conflict.
		k.lease = nil
		return err
	}
	k.lease = l
	return nil
}

// renewLeases renews the Lease every leaseRenew, from a random phase, as
// kubelets that started at different times do.
func (k *kubelet) renewLeases(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(rand.N(leaseRenew)):
	}
	tick := time.NewTicker(leaseRenew)
	defer tick.Stop()
	for {
		_ = k.renewLease(ctx) // the next tick tries again, as kubelet would
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// setDriver lists the driver in the node's CSINode, or removes it, as
// kubelet's CSI plugin does when it registers or deregisters the driver;
// kubelet retries until it succeeds.
func (k *kubelet) setDriver(ctx context.Context, listed bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var err error
	for attempt := 0; ; attempt++ {
		if err = k.writeCSINode(ctx, listed); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: CSINode: %w (last error: %v)", k.node, ctx.Err(), err)
		case <-time.After(min(time.Duration(attempt+1)*100*time.Millisecond, 2*time.Second)):
		}
	}
}

// writeCSINode gets the CSINode and updates it (creates it when missing)
// so that it lists the driver or not; k.mu is held.
func (k *kubelet) writeCSINode(ctx context.Context, listed bool) error {
	c := k.client.Resource(csiNodes)
	var drivers []any
	if listed {
		drivers = []any{map[string]any{"name": driverName, "nodeID": k.node}}
	}
	cs, err := c.Get(ctx, k.node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
			"metadata": map[string]any{"name": k.node, "ownerReferences": k.owner()},
			"spec":     map[string]any{"drivers": drivers},
		}}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	old, _, _ := unstructured.NestedSlice(cs.Object, "spec", "drivers")
	if (len(old) > 0) == listed {
		return nil
	}
	if err := unstructured.SetNestedSlice(cs.Object, drivers, "spec", "drivers"); err != nil {
		return err
	}
	_, err = c.Update(ctx, cs, metav1.UpdateOptions{})
	return err
}

// registrar is one registrar process on a node with --remove-node-taint,
// --node-condition and --confirm-csinode, as deploy/node-gate and
// deploy/csinode run it: the features' own code, driven as
// pkg/registration drives them.
type registrar struct {
	node    string
	proc    *process
	gate    *nodegate.Gate
	watcher *csinode.Watcher
	kubelet *kubelet
	cancel  context.CancelFunc
	done    sync.WaitGroup
	// findings carries the watcher's findings to the registration.
	findings chan csinode.Finding

	mu sync.Mutex
	// confirmed: kubelet registered the driver and CSINode lists it, so
	// the registration has told the gate so.
	confirmed bool
}

// startRegistrar starts the registrar's features as cmd/registrar does:
// one client each from one configuration, the flags' defaults.
func startRegistrar(ctx context.Context, node string, proc *process, k *kubelet) (*registrar, error) {
	gateClient, err := kubeapi.NewClient(proc.config)
	if err != nil {
		return nil, err
	}
	watcherClient, err := kubeapi.NewClient(proc.config)
	if err != nil {
		return nil, err
	}
	r := &registrar{node: node, proc: proc, kubelet: k, findings: make(chan csinode.Finding, 64)}
	r.gate = nodegate.New(nodegate.Config{NodeName: node, TaintKeys: []string{startupTaint}, Condition: true, Client: gateClient})
	r.watcher = csinode.New(node, watcherClient, nil, func(f csinode.Finding) {
		select {
		case r.findings <- f:
		default:
			panic("the fleet's registration fell 64 findings behind node " + node + "'s watcher")
		}
	})
	ctx, r.cancel = context.WithCancel(ctx)
	gateCtx, stopGate := context.WithCancel(context.WithoutCancel(ctx))
	r.done.Go(func() { r.gate.Run(gateCtx) })
	r.done.Go(func() { r.watcher.Run(ctx) })
	r.done.Go(func() {
		defer stopGate()
		r.register(ctx)
	})
	// The driver's name is known before kubelet registers it.
	r.watcher.SetDriver(driverName)
	return r, nil
}

// register is the registration's part: kubelet registers the driver on
// the socket's publication; CSINode's findings confirm it or not, and the
// gate hears of each change; a CSINode that lost the driver makes it
// publish again (kubelet registers again) after csinodeRepublish.
func (r *registrar) register(ctx context.Context) {
	if err := r.kubelet.setDriver(ctx, true); err != nil {
		return
	}
	var republish <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-r.findings:
			r.mu.Lock()
			was := r.confirmed
			r.confirmed = f.Listed
			r.mu.Unlock()
			switch {
			case f.Listed && !was:
				r.gate.Registered(driverName)
				republish = nil
			case !f.Listed && was:
				r.gate.Unconfirmed(driverName, f.Reason)
			}
			if f.Missing {
				republish = time.After(csinodeRepublish)
			}
		case <-republish:
			republish = nil
			go func() { _ = r.kubelet.setDriver(ctx, true) }()
		}
	}
}

// stop is the registrar's SIGTERM: its watcher stops, it withdraws its
// socket (the gate sets the condition False before it exits) and kubelet
// deregisters the driver.
func (r *registrar) stop(ctx context.Context) error {
	r.gate.Withdrawn(driverName)
	r.cancel()
	r.done.Wait()
	r.proc.stop()
	return r.kubelet.setDriver(ctx, false)
}

// steady: the driver confirmed, the node's taint removed and its
// condition True, nothing pending.
func (r *registrar) steady() bool {
	r.mu.Lock()
	confirmed := r.confirmed
	r.mu.Unlock()
	st := r.gate.Status()
	return confirmed && !st.Pending && st.TaintsChecked != nil && st.Condition != nil && st.Condition.Status == "True"
}

var errNotSteady = errors.New("not steady")

// checkNode is the Node as the gate should have left it.
func checkNode(ctx context.Context, c dynamic.Interface, node string) error {
	n, err := c.Resource(nodes).Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	taints, _, _ := unstructured.NestedSlice(n.Object, "spec", "taints")
	for _, t := range taints {
		if m, ok := t.(map[string]any); ok && m["key"] == startupTaint {
			return fmt.Errorf("node %s still has the startup taint: %w", node, errNotSteady)
		}
	}
	conds, _, _ := unstructured.NestedSlice(n.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == driverName+nodegate.ConditionSuffix {
			if m["status"] == "True" {
				return nil
			}
		}
	}
	return fmt.Errorf("node %s: the condition %s is not True: %w", node, driverName+nodegate.ConditionSuffix, errNotSteady)
}
