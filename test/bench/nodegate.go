package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/apiserver"
)

const (
	// nodeGatePairs is how many registrars are started with the node gate
	// off and on, alternately.
	nodeGatePairs = 5
	// startupTaint is the taint the nodes are created with, which the
	// registrar removes with the gate on.
	startupTaint = driverName + "/agent-not-ready"
	// gateToken authenticates as the service account that
	// deploy/node-gate/rbac.yaml binds (in the namespace default).
	gateToken = "bench-gate-token"
	// rbacFile is deploy/node-gate's RBAC, relative to the repository
	// root, where make bench runs.
	rbacFile = "deploy/node-gate/rbac.yaml"
	// serviceAccountScript runs in a mount namespace of its own: it puts
	// the token and CA of the directory $1 where a pod's service account
	// is mounted, the path the registrar's in-cluster configuration reads,
	// on a tmpfs (over /var/run when that directory does not exist), then
	// runs the rest of its arguments.
	serviceAccountScript = `set -e
d=/var/run/secrets/kubernetes.io/serviceaccount
if [ -d "$d" ]; then mount -t tmpfs -o size=1m tmpfs "$d"; else mount -t tmpfs -o size=1m,mode=0755 tmpfs /var/run; mkdir -p "$d"; fi
cp "$1/token" "$1/ca.crt" "$d/"
shift
exec "$@"`
)

// gateSetup is what the node gate's figures run against: a real
// kube-apiserver with deploy/node-gate's RBAC, and the command that runs
// the registrar with the service account's files in place.
type gateSetup struct {
	server   *apiserver.Server
	dir      string
	launcher []string
	env      []string
}

// gateRun is what one registrar measured, with the gate off or on.
type gateRun struct {
	rss int64
	// cpu is the registrar's, from just before NotifyRegistrationStatus
	// until it logged the last of what that set off.
	cpu time.Duration
	// untaint and condition are the times from NotifyRegistrationStatus
	// until the Node, watched through the API server, had lost the
	// startup taint and had the condition True (gate on only).
	untaint, condition time.Duration
}

// measureNodeGate measures the node gate (--remove-node-taint and
// --node-condition, as deploy/node-gate sets them) against a real
// kube-apiserver: pairs of fresh registrars, one with the gate off and one
// with it on, started alternately, each in a mount namespace of its own
// that holds a service account's token and CA where a pod has them. For
// each: VmRSS once registered and the gate's work done; the registrar's CPU
// from NotifyRegistrationStatus(true) until the last log line that set off;
// with the gate on, the time until the Node lost its taint and had its
// condition. Where the bench cannot start an API server or mount, it says
// so in a SKIPPED line.
func measureNodeGate(ctx context.Context, cfg config) ([]figure, error) {
	setup, skipped, err := newGateSetup(ctx)
	if setup != nil {
		defer setup.close()
	}
	if err != nil {
		return nil, err
	}
	if skipped != "" {
		fmt.Printf("%-56s SKIPPED: %s\n", "node gate (--remove-node-taint, --node-condition)", skipped)
		return nil, nil
	}
	var off, on []gateRun
	var reference durations
	for i := range min(cfg.runs, nodeGatePairs) {
		d, err := setup.referencePatch(ctx, fmt.Sprintf("bench-%d-reference", i))
		if err != nil {
			return nil, err
		}
		reference = append(reference, d)
		for _, gate := range []bool{false, true} {
			r, err := setup.run(ctx, cfg, fmt.Sprintf("bench-%d-%t", i, gate), gate)
			if err != nil {
				return nil, err
			}
			if gate {
				on = append(on, r)
			} else {
				off = append(off, r)
			}
		}
	}
	size, err := os.Stat(cfg.registrar)
	if err != nil {
		return nil, err
	}
	pick := func(runs []gateRun, f func(gateRun) time.Duration) durations {
		var d durations
		for _, r := range runs {
			d = append(d, f(r))
		}
		return d
	}
	rss := func(runs []gateRun) []int64 {
		var v []int64
		for _, r := range runs {
			v = append(v, r.rss)
		}
		return v
	}
	memoryFigure := func(name string, sample []int64) figure {
		return figure{name: name, stat: "median", value: megabytes(medianInt64(sample)), unit: "MB",
			reference: true, note: "(no target: for comparison)",
			detail: fmt.Sprintf("(min %s, max %s MB; %d registrars)", trim(megabytes(slices.Min(sample))), trim(megabytes(slices.Max(sample))), len(sample))}
	}
	cpuFigure := func(name, detail string, sample durations) figure {
		return figure{name: name, stat: "median", value: float64(sample.median().Microseconds()), unit: "µs",
			reference: true, note: "(no target: for comparison)",
			detail: fmt.Sprintf("(%s; min %d, max %d µs; %d registrars)", detail, sample.min().Microseconds(), sample.max().Microseconds(), len(sample))}
	}
	untaint, condition := pick(on, func(r gateRun) time.Duration { return r.untaint }), pick(on, func(r gateRun) time.Duration { return r.condition })
	return []figure{
		memoryFigure("VmRSS after registration, node gate off", rss(off)),
		memoryFigure("VmRSS after registration, node gate on, node updated", rss(on)),
		{
			name: "node gate: NotifyRegistrationStatus(true) -> taint gone", stat: "median",
			value: ms(untaint.median()), unit: "ms", reference: true, note: "(no target: e2e-node asks <= 1 s)",
			detail: untaint.spread() + " as a watch of the Node sees it",
		},
		{
			name: "reference: the bench's own PATCH -> taint gone", stat: "median",
			value: ms(reference.median()), unit: "ms", reference: true, note: "(no target: the API server and the watch)",
			detail: reference.spread() + " a merge patch on a kept connection, same watch",
		},
		{
			name: "node gate: NotifyRegistrationStatus(true) -> condition", stat: "median",
			value: ms(condition.median()), unit: "ms", reference: true, note: "(no target: for comparison)",
			detail: condition.spread(),
		},
		cpuFigure("registrar CPU, Notify(true) -> logged, node gate off", `until "kubelet registered the driver"`,
			pick(off, func(r gateRun) time.Duration { return r.cpu })),
		cpuFigure("registrar CPU, Notify(true) -> node updated, gate on", "first connection to the API server: TLS handshake, GET, two PATCHes",
			pick(on, func(r gateRun) time.Duration { return r.cpu })),
		{
			name: "binary, the same with the node gate off and on", stat: "size", value: megabytes(size.Size()), unit: "MB",
			reference: true, note: "(no target here: see binary size)",
			detail: fmt.Sprintf("(%d bytes; the gate's code is in it either way)", size.Size()),
		},
	}, nil
}

// newGateSetup starts etcd and kube-apiserver, with deploy/node-gate's
// RBAC, and checks that a registrar can be run with the service account's
// files in place. skipped, when not empty, says why the figures cannot be
// measured on this machine.
func newGateSetup(ctx context.Context) (_ *gateSetup, skipped string, err error) {
	if os.Geteuid() != 0 {
		return nil, "needs root, to mount the service account's token and CA in a mount namespace of its own", nil
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, "no unshare on PATH (util-linux)", nil
	}
	if _, err := os.Stat(rbacFile); err != nil {
		return nil, fmt.Sprintf("no %s: run the bench from the repository root, as make bench does", rbacFile), nil
	}
	repo, err := os.Getwd()
	if err != nil {
		return nil, "", err
	}
	etcd, kubeAPIServer, err := apiserver.Binaries(repo)
	if err != nil {
		return nil, err.Error(), nil
	}
	dir, err := os.MkdirTemp("", "rbgate")
	if err != nil {
		return nil, "", err
	}
	s := &gateSetup{dir: dir}
	if s.server, err = apiserver.Start(ctx, dir, etcd, kubeAPIServer, apiserver.User{
		Token: gateToken, Name: "system:serviceaccount:default:csi-node", Groups: []string{"system:serviceaccounts"},
	}); err != nil {
		return s, "", err
	}
	if err := s.server.ApplyRBAC(rbacFile); err != nil {
		return s, "", err
	}
	sa := filepath.Join(dir, "serviceaccount")
	if err := os.Mkdir(sa, 0o700); err != nil {
		return s, "", err
	}
	ca, err := os.ReadFile(s.server.CAFile)
	if err != nil {
		return s, "", err
	}
	if err := errors.Join(os.WriteFile(filepath.Join(sa, "token"), []byte(gateToken), 0o600),
		os.WriteFile(filepath.Join(sa, "ca.crt"), ca, 0o644)); err != nil {
		return s, "", err
	}
	s.launcher = []string{unshare, "--mount", "--propagation", "private", "sh", "-c", serviceAccountScript, "sh", sa}
	host, port, _ := strings.Cut(strings.TrimPrefix(s.server.URL, "https://"), ":")
	s.env = []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port}
	// The mount itself, once: a root without CAP_SYS_ADMIN (a container)
	// cannot.
	check := slices.Concat(s.launcher, []string{"cat", "/var/run/secrets/kubernetes.io/serviceaccount/token"})
	if out, err := exec.CommandContext(ctx, check[0], check[1:]...).CombinedOutput(); err != nil || string(out) != gateToken {
		return s, fmt.Sprintf("cannot place the service account's files in a mount namespace: %v %s", err, strings.TrimSpace(string(out))), nil
	}
	return s, "", nil
}

func (s *gateSetup) close() {
	if s.server != nil {
		s.server.Stop()
	}
	_ = os.RemoveAll(s.dir)
}

// createNode creates a Node with the startup taint and starts a watch of
// its changes from then on.
func (s *gateSetup) createNode(ctx context.Context, nodeName string) (*json.Decoder, io.Closer, error) {
	rv, err := s.server.CreateNode(nodeName, startupTaint+":NoSchedule")
	if err != nil {
		return nil, nil, err
	}
	watch, err := s.server.Watch(ctx, "/api/v1/nodes?watch=true&resourceVersion="+rv+"&fieldSelector=metadata.name%3D"+nodeName)
	if err != nil {
		return nil, nil, err
	}
	return json.NewDecoder(watch), watch, nil
}

// referencePatch creates a Node with the startup taint, then removes its
// taints with a patch of its own, and times the patch until the watch
// shows the taint gone: what the API server and the watch take, without
// the registrar.
func (s *gateSetup) referencePatch(ctx context.Context, nodeName string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	events, watch, err := s.createNode(ctx, nodeName)
	if err != nil {
		return 0, err
	}
	defer watch.Close()
	patched := time.Now()
	if _, err := s.server.Do(http.MethodPatch, "/api/v1/nodes/"+nodeName, "application/merge-patch+json", []byte(`{"spec":{"taints":null}}`)); err != nil {
		return 0, err
	}
	for {
		nd, err := nextNode(events)
		if err != nil {
			return 0, fmt.Errorf("watching node %s: %w", nodeName, err)
		}
		if !nd.tainted() {
			return time.Since(patched), nil
		}
	}
}

// run starts a registrar for the Node nodeName, created with the startup
// taint, with the gate off or on, registers it as kubelet does and measures
// it.
func (s *gateSetup) run(ctx context.Context, cfg config, nodeName string, gate bool) (gateRun, error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	events, watch, err := s.createNode(ctx, nodeName)
	if err != nil {
		return gateRun{}, err
	}
	defer watch.Close()
	n, err := started(ctx, cfg, func(n *node) {
		n.launcher = s.launcher
		n.registrarEnv = append(slices.Clip(s.env), "NODE_NAME="+nodeName)
		if gate {
			n.registrarArgs = []string{"--remove-node-taint=" + startupTaint, "--node-condition"}
		}
	})
	if err != nil {
		return gateRun{}, err
	}
	defer n.close()

	var r gateRun
	var before cpuUsage
	var notified time.Time
	if err := n.notifyAsKubelet(ctx, func() (err error) {
		before, err = readCPU(n.registrar.pid())
		notified = time.Now()
		return err
	}); err != nil {
		return gateRun{}, err
	}
	last := "kubelet registered the driver"
	if gate {
		last = "Set the node's condition"
		for r.untaint == 0 || r.condition == 0 {
			nd, err := nextNode(events)
			if err != nil {
				return gateRun{}, n.registrar.failed("watching node "+nodeName, err)
			}
			since := time.Since(notified)
			if r.untaint == 0 && !nd.tainted() {
				r.untaint = since
			}
			if r.condition == 0 && nd.registeredCondition() {
				r.condition = since
			}
		}
	}
	if err := n.registrar.output.waitFor(ctx, last); err != nil {
		return gateRun{}, n.registrar.failed("the registrar's log", err)
	}
	after, err := readCPU(n.registrar.pid())
	if err != nil {
		return gateRun{}, err
	}
	r.cpu = after.exact - before.exact
	if err := n.waitReady(ctx); err != nil {
		return gateRun{}, err
	}
	mem, err := readMemory(n.registrar.pid())
	r.rss = mem.vmRSS
	return r, err
}

// benchNode is what the figures read of a Node.
type benchNode struct {
	Spec struct {
		Taints []struct{ Key string } `json:"taints"`
	} `json:"spec"`
	Status struct {
		Conditions []struct{ Type, Status string } `json:"conditions"`
	} `json:"status"`
}

// nextNode reads the next watch event, which must be of a Node.
func nextNode(events *json.Decoder) (benchNode, error) {
	var ev struct {
		Type   string
		Object json.RawMessage
	}
	if err := events.Decode(&ev); err != nil {
		return benchNode{}, err
	}
	if ev.Type != "ADDED" && ev.Type != "MODIFIED" {
		return benchNode{}, fmt.Errorf("watch event %s: %s", strconv.Quote(ev.Type), ev.Object)
	}
	var n benchNode
	return n, json.Unmarshal(ev.Object, &n)
}

func (n benchNode) tainted() bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t struct{ Key string }) bool { return t.Key == startupTaint })
}

func (n benchNode) registeredCondition() bool {
	return slices.ContainsFunc(n.Status.Conditions, func(c struct{ Type, Status string }) bool {
		return c.Type == driverName+"/NodePluginRegistered" && c.Status == "True"
	})
}
