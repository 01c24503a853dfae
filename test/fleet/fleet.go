package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/csi-registrar/node-driver-registrar/test/apiserver"
)

// simNode is one node: its kubelet and its registrar of the moment.
type simNode struct {
	name      string
	token     string
	kubelet   *kubelet
	registrar *registrar
}

type fleet struct {
	o      options
	server *apiserver.Server
	base   *rest.Config
	admin  dynamic.Interface
	rec    *recorder
	// shared is the registrars' one transport with -shared-connection.
	shared http.RoundTripper
	// profiler asks for CPU profiles, which take longer than Call allows.
	profiler *http.Client
	nodes    []*simNode
	// stop ends the kubelets' Lease renewals.
	stop    context.CancelFunc
	renewal sync.WaitGroup
}

// startFleet starts etcd and kube-apiserver with deploy/'s RBAC and
// policy, creates the Nodes, the pods whose tokens the registrars use,
// and the kubelets, which renew their Leases from then on.
func startFleet(ctx context.Context, o options, repo, dir string) (*fleet, error) {
	etcd, kubeAPIServer, err := apiserver.Binaries(repo)
	if err != nil {
		return nil, err
	}
	f := &fleet{o: o, rec: newRecorder()}
	if f.server, err = apiserver.Start(ctx, dir, etcd, kubeAPIServer); err != nil {
		if f.server != nil {
			f.server.Stop()
		}
		return nil, err
	}
	if err := errors.Join(
		f.server.ApplyRBAC(filepath.Join(repo, "deploy/node-gate/rbac.yaml")),
		f.server.Apply(filepath.Join(repo, "deploy/csinode/rbac.yaml"), "ClusterRole", "ClusterRoleBinding"),
		f.server.ApplyPolicy(filepath.Join(repo, "deploy/node-gate/policy.yaml"))); err != nil {
		return f, err
	}
	f.base = &rest.Config{Host: f.server.URL, TLSClientConfig: rest.TLSClientConfig{CAFile: f.server.CAFile}}
	if o.sharedConn {
		if f.shared, err = rest.TransportFor(f.base); err != nil {
			return f, err
		}
	}
	adminCfg := rest.CopyConfig(f.base)
	adminCfg.BearerToken, adminCfg.QPS = apiserver.AdminToken, -1
	if f.admin, err = dynamic.NewForConfig(adminCfg); err != nil {
		return f, err
	}
	if o.profile != "" {
		if f.profiler, err = rest.HTTPClientFor(adminCfg); err != nil {
			return f, err
		}
	}

	f.nodes = make([]*simNode, o.n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.parallel)
	for i := range f.nodes {
		g.Go(func() error {
			n := &simNode{name: fmt.Sprintf("node-%05d", i)}
			f.nodes[i] = n
			if _, err := f.server.CreateNode(n.name, startupTaint+":NoSchedule"); err != nil {
				return err
			}
			// The DaemonSet's pod on the node, and the token kubelet mounts
			// in it: bound to the pod, so it names the node, as
			// deploy/node-gate's policy asks.
			pod := "csi-node-" + n.name
			if err := f.server.CreatePod(pod, n.name, "csi-node"); err != nil {
				return err
			}
			var err error
			if n.token, err = f.server.Token("csi-node", pod); err != nil {
				return err
			}
			// The kubelets authenticate as the admin: their identity is not
			// what is measured, their requests are.
			proc, err := newProcess(f.base, apiserver.AdminToken, "kubelet/fleet", kubeletRole, f.rec)
			if err != nil {
				return err
			}
			if n.kubelet, err = newKubelet(n.name, proc); err != nil {
				return err
			}
			n.kubelet.mu.Lock()
			defer n.kubelet.mu.Unlock()
			return n.kubelet.start(gctx)
		})
	}
	if err := g.Wait(); err != nil {
		return f, fmt.Errorf("setting up the Nodes: %w", err)
	}
	renewCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	f.stop = stop
	for _, n := range f.nodes {
		f.renewal.Go(func() { n.kubelet.renewLeases(renewCtx) })
	}
	return f, nil
}

func (f *fleet) close() {
	for _, n := range f.nodes {
		if n != nil && n.registrar != nil {
			n.registrar.cancel()
			n.registrar.done.Wait()
			n.registrar.proc.stop()
		}
	}
	if f.stop != nil {
		f.stop()
		f.renewal.Wait()
	}
	for _, n := range f.nodes {
		if n != nil && n.kubelet != nil {
			n.kubelet.proc.stop()
		}
	}
	f.server.Stop()
}

// startRegistrar starts a new registrar process on n.
func (f *fleet) startRegistrar(ctx context.Context, n *simNode) error {
	proc, err := f.registrarProcess(n.token)
	if err != nil {
		return err
	}
	n.registrar, err = startRegistrar(ctx, n.name, proc, n.kubelet)
	return err
}

// saveHeapProfile writes kube-apiserver's heap profile, after a
// collection, to -profile's file for the phase.
func (f *fleet) saveHeapProfile(phase string) error {
	if f.o.profile == "" {
		return nil
	}
	code, body := f.server.Call(http.MethodGet, "/debug/pprof/heap?gc=1", "", nil)
	if code != http.StatusOK {
		return fmt.Errorf("kube-apiserver's heap profile: %d %s", code, body)
	}
	return os.WriteFile(f.o.profile+"."+phase+".heap", body, 0o644)
}

// idle waits d; with -profile it profiles kube-apiserver's CPU meanwhile.
func (f *fleet) idle(ctx context.Context, phase string, d time.Duration) error {
	if f.o.profile == "" {
		return sleep(ctx, d)
	}
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", f.server.URL, int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := f.profiler.Do(req)
	if err != nil {
		return fmt.Errorf("kube-apiserver's CPU profile: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s %s", resp.Status, body)
	}
	if err != nil {
		return fmt.Errorf("kube-apiserver's CPU profile: %w", err)
	}
	return os.WriteFile(f.o.profile+"."+phase+".cpu", body, 0o644)
}

// registrarProcess is a registrar's own connection, or with
// -shared-connection its own token over the one transport.
func (f *fleet) registrarProcess(token string) (*process, error) {
	const userAgent = "csi-node-driver-registrar/fleet"
	if !f.o.sharedConn {
		return newProcess(f.base, token, userAgent, registrarRole, f.rec)
	}
	rt := transport.NewBearerAuthRoundTripper(token, f.shared)
	// Nothing to close: the connection outlives each registrar.
	return &process{config: &rest.Config{Host: f.base.Host, Transport: f.rec.wrap(registrarRole, rt), UserAgent: userAgent}, conns: &connections{}}, nil
}

// waitSteady waits until every registrar of nodes is steady and the API
// server holds one CSINode watch per node, and returns when that was
// first seen.
func (f *fleet) waitSteady(ctx context.Context, nodes []*simNode) (time.Time, error) {
	deadline := time.Now().Add(f.o.settle)
	var why string
	for time.Now().Before(deadline) {
		pending := 0
		for _, n := range nodes {
			if n.registrar == nil || !n.registrar.steady() {
				pending++
			}
		}
		why = fmt.Sprintf("%d of %d registrars not steady", pending, len(nodes))
		if pending == 0 {
			seen := time.Now()
			snap := take(f.server)
			watches := snap.watches["csinodes"]
			if snap.scrapeErr == nil && int(watches) == len(f.nodes) {
				return seen, nil
			}
			why = fmt.Sprintf("the API server holds %v CSINode watches, want %d (%v)", watches, len(f.nodes), snap.scrapeErr)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return time.Time{}, fmt.Errorf("no steady state within %v: %s: %w", f.o.settle, why, errDeadline)
}

// waitWatches waits until the API server holds one CSINode watch per node.
func (f *fleet) waitWatches(ctx context.Context) (time.Time, error) {
	deadline := time.Now().Add(f.o.settle)
	var last snapshot
	for time.Now().Before(deadline) {
		last = take(f.server)
		if last.scrapeErr == nil && int(last.watches["csinodes"]) == len(f.nodes) {
			return last.at, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return time.Time{}, fmt.Errorf("the API server holds %v CSINode watches after %v, want %d (%v): %w", last.watches["csinodes"], f.o.settle, len(f.nodes), last.scrapeErr, errDeadline)
}

// watchStats sums the current registrars' CSINode watch restarts and
// watches that ended with 410 Gone, as their watchers count them.
func (f *fleet) watchStats() (restarts, expired uint64) {
	for _, n := range f.nodes {
		if n.registrar != nil {
			st := n.registrar.watcher.Status()
			restarts += st.WatchRestarts
			expired += st.WatchesExpired
		}
	}
	return restarts, expired
}

// checkNodes reads every Node as the admin: none has the startup taint,
// all have the driver's condition True.
func (f *fleet) checkNodes(ctx context.Context) error {
	for _, n := range f.nodes {
		if err := checkNode(ctx, f.admin, n.name); err != nil {
			return err
		}
	}
	return nil
}

// onEach runs do for each node, at most limit at once (0: all), and
// returns the first error.
func onEach(ctx context.Context, nodes []*simNode, limit int, do func(context.Context, *simNode) error) error {
	g, gctx := errgroup.WithContext(ctx)
	if limit > 0 {
		g.SetLimit(limit)
	}
	for _, n := range nodes {
		g.Go(func() error { return do(gctx, n) })
	}
	return g.Wait()
}

// sleep is a scenario's own duration (a rest, an outage), not a wait for
// a condition.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// scenarios runs the baseline, the registrars' start and scenarios (a) to
// (d), each measured as a phase.
func (f *fleet) scenarios(ctx context.Context) (*report, error) {
	rep := &report{n: len(f.nodes)}
	measure := func(name string, body func() (steady time.Duration, err error)) error {
		from := take(f.server)
		steady, err := body()
		to := take(f.server)
		p := phase{name: name, d: between(from, to), steady: steady}
		p.apiSeconds = p.d.seconds
		if p.d.apiserverRestart && !rep.outageStart.IsZero() {
			p.apiSeconds = to.at.Sub(rep.outageStart).Seconds()
		}
		p.events = f.rec.window(from.at, to.at)
		rep.phases = append(rep.phases, p)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}

	if err := measure("baseline: Leases only", func() (time.Duration, error) {
		return 0, f.idle(ctx, "baseline", f.o.baseline)
	}); err != nil {
		return rep, err
	}
	if err := f.saveHeapProfile("baseline"); err != nil {
		return rep, err
	}

	if err := measure("registrars start", func() (time.Duration, error) {
		began := time.Now()
		if err := onEach(ctx, f.nodes, f.o.parallel, func(ctx context.Context, n *simNode) error {
			return f.startRegistrar(context.WithoutCancel(ctx), n)
		}); err != nil {
			return 0, err
		}
		at, err := f.waitSteady(ctx, f.nodes)
		return at.Sub(began), err
	}); err != nil {
		return rep, err
	}

	if err := measure("(a) rest", func() (time.Duration, error) {
		return 0, f.idle(ctx, "rest", f.o.rest)
	}); err != nil {
		return rep, err
	}
	rep.rest = &rep.phases[len(rep.phases)-1]
	if err := f.saveHeapProfile("rest"); err != nil {
		return rep, err
	}

	if err := measure("(b) rolling update, 10 % at a time", func() (time.Duration, error) {
		began := time.Now()
		batch := (len(f.nodes) + 9) / 10
		for lo := 0; lo < len(f.nodes); lo += batch {
			nodes := f.nodes[lo:min(lo+batch, len(f.nodes))]
			if err := onEach(ctx, nodes, 0, func(ctx context.Context, n *simNode) error {
				if err := n.registrar.stop(ctx); err != nil {
					return err
				}
				return f.startRegistrar(context.WithoutCancel(ctx), n)
			}); err != nil {
				return 0, err
			}
			// The DaemonSet moves on once the new pods are ready.
			if _, err := f.waitSteady(ctx, nodes); err != nil {
				return 0, err
			}
		}
		at, err := f.waitSteady(ctx, f.nodes)
		return at.Sub(began), err
	}); err != nil {
		return rep, err
	}
	rep.rolling = &rep.phases[len(rep.phases)-1]

	if err := measure(fmt.Sprintf("(c) kube-apiserver down for %v", f.o.outage), func() (time.Duration, error) {
		restarts, expired := f.watchStats()
		defer func() {
			r, e := f.watchStats()
			rep.outageRestarts, rep.outageExpired = r-restarts, e-expired
		}()
		if err := f.server.StopAPIServer(); err != nil {
			return 0, err
		}
		if err := sleep(ctx, f.o.outage); err != nil {
			return 0, err
		}
		rep.outageStart = time.Now()
		if err := f.server.StartAPIServer(ctx); err != nil {
			return 0, err
		}
		rep.outageReady = time.Now()
		watches, err := f.waitWatches(ctx)
		if err != nil {
			return 0, err
		}
		rep.outageWatches = watches.Sub(rep.outageReady)
		at, err := f.waitSteady(ctx, f.nodes)
		if err != nil {
			return 0, err
		}
		// The peak is sought until a Lease period after the steady state.
		if err := sleep(ctx, leaseRenew); err != nil {
			return 0, err
		}
		rep.outageEnd = time.Now()
		return at.Sub(rep.outageReady), nil
	}); err != nil {
		return rep, err
	}
	rep.outage = &rep.phases[len(rep.phases)-1]
	rep.outagePeak = f.rec.peakRate(registrarRole, rep.outageStart, rep.outageEnd, leaseRenew)
	rep.outagePeak1s = f.rec.peakRate(registrarRole, rep.outageStart, rep.outageEnd, time.Second)
	rep.outageLeasePeak = f.rec.peakRate(kubeletRole, rep.outageStart, rep.outageEnd, leaseRenew)

	replaced := max(1, len(f.nodes)/100)
	if err := measure(fmt.Sprintf("(d) 1 %% of the Nodes (%d) deleted and created again", replaced), func() (time.Duration, error) {
		began := time.Now()
		var nodes []*simNode
		for i := range replaced {
			nodes = append(nodes, f.nodes[i*len(f.nodes)/replaced])
		}
		if err := onEach(ctx, nodes, 0, f.replaceNode); err != nil {
			return 0, err
		}
		at, err := f.waitSteady(ctx, f.nodes)
		return at.Sub(began), err
	}); err != nil {
		return rep, err
	}

	if err := f.checkNodes(ctx); err != nil {
		return rep, fmt.Errorf("after the scenarios: %w", err)
	}
	return rep, nil
}

// replaceNode deletes the Node and creates it again, with the startup
// taint, as a node re-registered by its restarted kubelet: the garbage
// collector (not running here) would delete its CSINode and Lease, which
// the Node owns; the kubelet, started again, creates both and registers
// the driver again.
func (f *fleet) replaceNode(ctx context.Context, n *simNode) error {
	k := n.kubelet
	k.mu.Lock()
	defer k.mu.Unlock()
	// No renewal in between: it would create the Lease for the old Node.
	k.leaseMu.Lock()
	for _, path := range []string{
		"/api/v1/nodes/" + n.name,
		"/apis/storage.k8s.io/v1/csinodes/" + n.name,
		"/apis/coordination.k8s.io/v1/namespaces/" + leaseNS + "/leases/" + n.name,
	} {
		if code, body := f.server.Call(http.MethodDelete, path, "", nil); code != http.StatusOK && code != http.StatusNotFound {
			k.leaseMu.Unlock()
			return fmt.Errorf("DELETE %s: %d %s", path, code, body)
		}
	}
	_, err := f.server.CreateNode(n.name, startupTaint+":NoSchedule")
	k.leaseMu.Unlock()
	if err != nil {
		return err
	}
	if err := k.start(ctx); err != nil {
		return err
	}
	return k.writeCSINode(ctx, true)
}
