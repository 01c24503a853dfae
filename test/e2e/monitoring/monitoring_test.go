//go:build monitoring

// Package monitoring_test evaluates every query of deploy/monitoring's
// Grafana dashboard on a real Prometheus (Debian's prometheus package)
// scraping real registrars, each between the mock CSI driver and kubelet's
// plugin manager and CSI handler (the e2e kubelet): one registered, one
// rejected, one waiting for its driver, and two with --confirm-csinode on
// a real kube-apiserver: one whose CSINode lists its driver, one whose
// CSINode the test deletes. Each query must return series of the shape
// its panel shows: non-empty where this set-up produces its data, with
// the labels its legend or its table's columns name, and the values
// these five registrars report; and only the chosen nodes' series, or
// none, when the node and namespace variables are narrowed.
//
// Build tag monitoring: make monitoring-test runs it (hack/monitoring-test.sh),
// not make e2e, which has no Prometheus.
package monitoring_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/apiserver"
	"github.com/csi-registrar/node-driver-registrar/test/e2e/harness"
)

const (
	// dashboardFile is the dashboard as shipped, relative to this package.
	dashboardFile = "../../../deploy/monitoring/dashboard.json"
	// namespace is the namespace label every target gets, as the
	// PodMonitor's scrape gives each pod's series its namespace.
	namespace = "storage"
	// container is the registrar's container, as the PodMonitor keeps it.
	container = "node-driver-registrar"
	// rateInterval stands for Grafana's $__rate_interval, at least four
	// scrape intervals: 2 min for the PodMonitor's 30 s. It holds the whole
	// run here, so that each increase() this test checks counts every
	// event since the first scrape, however late the check runs.
	rateInterval = "2m"
	// startTimeout bounds each process's start and each registrar's way
	// to its state: kubelet reconciles every second.
	startTimeout = 60 * time.Second
	// evalTimeout bounds the wait for every query to show what it must:
	// a few scrapes, and the rejected registrar's next rejection.
	evalTimeout = 90 * time.Second
)

var bins harness.Binaries

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	var cleanup func()
	var err error
	bins, cleanup, err = harness.BuildBinariesForMain("monitoring")
	defer cleanup()
	if err != nil {
		fmt.Fprintf(os.Stderr, "monitoring: %v\n", err)
		return 1
	}
	return m.Run()
}

// node is one registrar of the set-up, on a node of its own as in a
// DaemonSet: its labels in Prometheus, and the state it must reach.
type node struct {
	name, driver, state string
	driverCfg           harness.MockDriverConfig
	extraArgs           func(dir string) []string
	registrar           *harness.Registrar
}

// kubeconfig writes a kubeconfig for the registrars' --kubeconfig: the API
// server at url, trusted through caFile (insecure without one), with a
// bearer token.
func kubeconfig(t *testing.T, path, url, caFile, token string) string {
	t.Helper()
	trust := "insecure-skip-tls-verify: true"
	if caFile != "" {
		trust = "certificate-authority: " + caFile
	}
	config := `apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: ` + url + `
    ` + trust + `
users:
- name: registrar
  user:
    token: ` + token + `
contexts:
- name: registrar
  context: {cluster: cluster, user: registrar}
current-context: registrar
`
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// createNode creates a Node and returns its uid, which a CSINode's owner
// reference names.
func createNode(t *testing.T, s *apiserver.Server, name string) string {
	t.Helper()
	answer, err := s.Do(http.MethodPost, "/api/v1/nodes", "application/json", []byte(`{"metadata":{"name":"`+name+`"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var node struct {
		Metadata struct{ UID string } `json:"metadata"`
	}
	if err := json.Unmarshal(answer, &node); err != nil || node.Metadata.UID == "" {
		t.Fatalf("node %s: no uid in %s (%v)", name, answer, err)
	}
	return node.Metadata.UID
}

// createCSINode writes the node's CSINode listing the driver, owned by the
// Node, as kubelet writes it when it registers a driver: the e2e kubelet
// writes it to its own fake API server, not to this one.
func createCSINode(t *testing.T, s *apiserver.Server, node, uid, driver string) {
	t.Helper()
	body := fmt.Sprintf(`{"metadata":{"name":%q,"ownerReferences":[{"apiVersion":"v1","kind":"Node","name":%q,"uid":%q}]},"spec":{"drivers":[{"name":%q,"nodeID":%q}]}}`,
		node, node, uid, driver, node)
	if _, err := s.Do(http.MethodPost, "/apis/storage.k8s.io/v1/csinodes", "application/json", []byte(body)); err != nil {
		t.Fatal(err)
	}
}

func TestDashboardQueries(t *testing.T) {
	prometheusBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("no prometheus on PATH (Debian's prometheus package; hack/monitoring-test.sh installs it): %v", err)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("no promtool on PATH (Debian's prometheus package): %v", err)
	}
	dash := readDashboard(t)

	// Unix socket paths are short: stay near the root.
	dir, err := os.MkdirTemp("/tmp", "mon")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	registry := filepath.Join(dir, "registry")
	if err := os.Mkdir(registry, 0o755); err != nil {
		t.Fatal(err)
	}
	// The node gate's requests go to an API server that does not answer,
	// so that they fail with code "error" and the update stays pending.
	unreachable, err := harness.FreeLocalAddr()
	if err != nil {
		t.Fatal(err)
	}
	unreachableConfig := kubeconfig(t, filepath.Join(dir, "unreachable.kubeconfig"), "https://"+unreachable, "", "unused")
	// --confirm-csinode reads a real kube-apiserver's CSINodes.
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	api := apiserver.StartForTest(t, repo)
	apiConfig := kubeconfig(t, filepath.Join(dir, "apiserver.kubeconfig"), api.URL, api.CAFile, apiserver.AdminToken)
	uids := map[string]string{}
	for _, name := range []string{"node-d", "node-e"} {
		uids[name] = createNode(t, api, name)
	}
	// node-d's CSINode lists its driver from the start; node-e's does
	// until the test deletes it.
	createCSINode(t, api, "node-d", uids["node-d"], "d.csi.example.com")
	createCSINode(t, api, "node-e", uids["node-e"], "e.csi.example.com")

	kubelet, err := harness.StartKubelet(bins.FakeKubelet, harness.KubeletConfig{RegistryDir: registry, StartTimeout: startTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kubelet.Kill() })

	driverHealth, err := harness.FreeLocalAddr()
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*node{
		// Registered, with the driver container's liveness probe served
		// by the registrar (csi_sidecar_operations_seconds), which the
		// driver fails (FailedPrecondition).
		{name: "node-a", driver: "a.csi.example.com", state: "registered",
			driverCfg: harness.MockDriverConfig{Probe: "error"},
			extraArgs: func(string) []string { return []string{"--driver-health-endpoint=" + driverHealth} }},
		// kubelet rejects it at every try (NodeGetInfo fails); with
		// --node-condition, the node gate tries to set the condition False.
		{name: "node-b", driver: "b.csi.example.com", state: "rejected",
			driverCfg: harness.MockDriverConfig{FailNodeGetInfo: true},
			extraArgs: func(string) []string {
				return []string{"--node-condition", "--node-name=node-b", "--kubeconfig=" + unreachableConfig}
			}},
		// The driver answers every GetPluginInfo with Unavailable.
		{name: "node-c", driver: "c.csi.example.com", state: "waiting-for-driver",
			driverCfg: harness.MockDriverConfig{UnavailableCalls: math.MaxInt32}},
		// kubelet accepts it, and CSINode confirms it.
		{name: "node-d", driver: "d.csi.example.com", state: "registered",
			extraArgs: func(string) []string {
				return []string{"--confirm-csinode", "--node-name=node-d", "--kubeconfig=" + apiConfig}
			}},
		// kubelet accepts it, and CSINode confirms it until the test deletes
		// the CSINode: then unconfirmed, after a socket published again.
		{name: "node-e", driver: "e.csi.example.com", state: "registered",
			extraArgs: func(string) []string {
				return []string{"--confirm-csinode", "--node-name=node-e", "--kubeconfig=" + apiConfig}
			}},
	}
	for _, n := range nodes {
		socket := filepath.Join(dir, n.name+".sock")
		cfg := n.driverCfg
		cfg.Endpoint, cfg.Name, cfg.NodeID = socket, n.driver, n.name
		driver, err := harness.StartMockDriver(bins.MockDriver, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(driver.Kill)
		addr, err := harness.FreeLocalAddr()
		if err != nil {
			t.Fatal(err)
		}
		rc := harness.RegistrarConfig{CSIAddress: socket, KubeletRegistrationPath: socket, PluginRegistrationPath: registry, HTTPEndpoint: addr}
		if n.extraArgs != nil {
			rc.ExtraArgs = n.extraArgs(dir)
		}
		n.registrar, err = harness.StartRegistrar("registrar-"+n.name, bins.Registrar, rc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.registrar.Kill)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubelet:\n%s", kubelet.Tail(40))
			for _, n := range nodes {
				t.Logf("registrar on %s:\n%s", n.name, n.registrar.Tail(20))
			}
		}
	})
	for _, n := range nodes {
		if err := waitForState(n); err != nil {
			t.Fatal(err)
		}
	}

	// kubelet's liveness probe of the driver container, every second.
	ctx, stopProbes := context.WithCancel(context.Background())
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		for ctx.Err() == nil {
			_, _ = harness.Healthz(driverHealth)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	t.Cleanup(func() { stopProbes(); <-probed })

	prom := startPrometheus(t, prometheusBin, dir, nodes)

	// node-e's CSINode lost, once Prometheus scrapes, so that the loss is
	// a counter's increase: the registrar publishes its socket again, and
	// kubelet registers the driver again, which writes no CSINode here.
	if _, err := api.Do(http.MethodDelete, "/apis/storage.k8s.io/v1/csinodes/node-e", "", nil); err != nil {
		t.Fatal(err)
	}
	nodes[4].state = "unconfirmed"
	if err := waitForState(nodes[4]); err != nil {
		t.Fatal(err)
	}

	vars := map[string]string{
		"namespace":       namespace,
		"node":            ".*", // the All value the variable sets
		"__rate_interval": rateInterval,
	}
	checkVariables(t, prom, dash, nodes)

	var targets []target
	for _, p := range dash.Panels {
		for _, q := range p.Targets {
			targets = append(targets, target{panel: p, query: q, expr: substitute(q.Expr, vars)})
		}
	}
	checkSyntax(t, promtool, dir, targets)

	checked := map[string]bool{}
	for _, tg := range targets {
		key := tg.panel.Title + "/" + tg.query.RefID
		e, ok := expectations[key]
		if !ok {
			t.Errorf("panel %q, query %s: no expectation in this test; add one to expectations:\n%s", tg.panel.Title, tg.query.RefID, tg.expr)
			continue
		}
		checked[key] = true
		if e.why != "" {
			// Evaluated all the same: a query Prometheus refuses fails.
			if _, err := prom.query(tg.expr); err != nil {
				t.Errorf("panel %q, query %s: %v", tg.panel.Title, tg.query.RefID, err)
			}
			t.Logf("panel %q, query %s: not checked for data: %s", tg.panel.Title, tg.query.RefID, e.why)
			continue
		}
		var last []sample
		err := harness.Eventually(evalTimeout, 500*time.Millisecond, fmt.Sprintf("panel %q, query %s to show its data", tg.panel.Title, tg.query.RefID), func() (bool, error) {
			got, err := prom.query(tg.expr)
			if err != nil {
				return false, err
			}
			last = got
			if len(got) == 0 {
				return false, errors.New("no series")
			}
			if err := tg.labelsShown(got); err != nil {
				return false, err
			}
			if e.check != nil {
				if err := e.check(got); err != nil {
					return false, err
				}
			}
			return true, nil
		})
		if err != nil {
			t.Errorf("%v\nquery: %s\nlast result: %s", err, tg.expr, describe(last))
			continue
		}
		t.Logf("panel %q, query %s: %s", tg.panel.Title, tg.query.RefID, describe(last))
		if err := checkSelection(prom, tg, vars, last); err != nil {
			t.Errorf("panel %q, query %s: %v", tg.panel.Title, tg.query.RefID, err)
		}
	}
	for key := range expectations {
		if !checked[key] {
			t.Errorf("expectation %q: no such panel and query in %s", key, dashboardFile)
		}
	}
}

// checkSelection evaluates tg again with the variables set as an operator
// sets them: two nodes chosen (Grafana writes several values as a regex
// alternation), or another namespace. The series must be those of all
// (tg's result with every node) on the nodes chosen, and none in the
// other namespace.
func checkSelection(prom *prometheusServer, tg target, vars map[string]string, all []sample) error {
	chosen := []string{"node-b", "node-d"}
	// A query without $node or $namespace fails here: it shows the
	// same series whatever the operator chooses.
	if slices.ContainsFunc(all, func(s sample) bool { return s.Labels["node"] != "" }) {
		narrowed := maps.Clone(vars)
		narrowed["node"] = "(" + strings.Join(chosen, "|") + ")"
		expr := substitute(tg.query.Expr, narrowed)
		got, err := prom.query(expr)
		if err != nil {
			return err
		}
		var want []sample
		for _, s := range all {
			if slices.Contains(chosen, s.Labels["node"]) {
				want = append(want, s)
			}
		}
		if !slices.Equal(identities(got), identities(want)) {
			return fmt.Errorf("with node %s: series %v, want those of nodes %v: %v\nquery: %s", narrowed["node"], identities(got), chosen, identities(want), expr)
		}
	}
	{
		elsewhere := maps.Clone(vars)
		elsewhere["namespace"] = "elsewhere"
		expr := substitute(tg.query.Expr, elsewhere)
		got, err := prom.query(expr)
		if err != nil {
			return err
		}
		if len(got) != 0 {
			return fmt.Errorf("with namespace %s, where no registrar runs: %s\nquery: %s", elsewhere["namespace"], describe(got), expr)
		}
	}
	return nil
}

// identities are the series' label sets, sorted: what tells series apart,
// whatever their values at the time.
func identities(samples []sample) []string {
	var ids []string
	for _, s := range samples {
		keys := slices.Sorted(maps.Keys(s.Labels))
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, "%s=%q,", k, s.Labels[k])
		}
		ids = append(ids, "{"+strings.TrimSuffix(b.String(), ",")+"}")
	}
	slices.Sort(ids)
	return ids
}

func waitForState(n *node) error {
	var last harness.Status
	err := harness.Eventually(startTimeout, 100*time.Millisecond, fmt.Sprintf("the registrar on %s to be %s", n.name, n.state), func() (bool, error) {
		st, err := n.registrar.Status()
		if err != nil {
			return false, err
		}
		last = st
		return st.State == n.state, fmt.Errorf("state %s: %s", st.State, st.Reason)
	})
	if err != nil {
		return fmt.Errorf("%w\n/status: %s", err, last.Raw)
	}
	return nil
}

// expectation says what a query (by panel title and refId) shows here.
// A query without data here says why in why; it is still evaluated, and
// promtool checks its syntax.
type expectation struct {
	why   string
	check func([]sample) error
}

// sampleFor finds the series whose labels include kv.
func sampleFor(got []sample, kv ...string) (sample, error) {
	for _, s := range got {
		match := true
		for i := 0; i+1 < len(kv); i += 2 {
			if s.Labels[kv[i]] != kv[i+1] {
				match = false
			}
		}
		if match {
			return s, nil
		}
	}
	return sample{}, fmt.Errorf("no series with %v", kv)
}

// valueIs wants the series with labels kv to have value want.
func valueIs(want float64, kv ...string) func([]sample) error {
	return func(got []sample) error {
		s, err := sampleFor(got, kv...)
		if err != nil {
			return err
		}
		if s.Value != want {
			return fmt.Errorf("series %v: %v, want %v", kv, s.Value, want)
		}
		return nil
	}
}

// positive wants the series with labels kv to be above 0.
func positive(kv ...string) func([]sample) error {
	return func(got []sample) error {
		s, err := sampleFor(got, kv...)
		if err != nil {
			return err
		}
		if !(s.Value > 0) {
			return fmt.Errorf("series %v: %v, want more than 0", kv, s.Value)
		}
		return nil
	}
}

// seriesFor wants exactly one series for each of nodes (label node).
func seriesFor(nodes ...string) func([]sample) error {
	return func(got []sample) error {
		var seen []string
		for _, s := range got {
			seen = append(seen, s.Labels["node"])
		}
		slices.Sort(seen)
		if !slices.Equal(seen, nodes) {
			return fmt.Errorf("series for nodes %v, want %v", seen, nodes)
		}
		return nil
	}
}

func all(checks ...func([]sample) error) func([]sample) error {
	return func(got []sample) error {
		for _, c := range checks {
			if err := c(got); err != nil {
				return err
			}
		}
		return nil
	}
}

// allNodes are the nodes of TestDashboardQueries' registrars.
var allNodes = []string{"node-a", "node-b", "node-c", "node-d", "node-e"}

// expectations: the five registrars of TestDashboardQueries as each query
// shows them.
var expectations = map[string]expectation{
	"Registered/A": {check: valueIs(2)},
	"Registered/B": {check: valueIs(5)},
	"Registrations by state/A": {check: all(valueIs(2, "state", "registered"), valueIs(1, "state", "rejected"),
		valueIs(1, "state", "waiting-for-driver"), valueIs(1, "state", "unconfirmed"), count(4))},
	"Registrars not registered/A": {check: all(seriesFor("node-b", "node-c", "node-e"),
		valueIs(1, "node", "node-b", "state", "rejected"), valueIs(1, "node", "node-c", "state", "waiting-for-driver"),
		valueIs(1, "node", "node-e", "state", "unconfirmed"))},
	"Rejections by kubelet/A": {check: all(seriesFor(allNodes...), positive("node", "node-b"), valueIs(0, "node", "node-a"))},
	"Last rejection/A":        {check: all(seriesFor("node-b"), recentMillis("node", "node-b"))},
	"kubelet's calls/A": {check: all(positive("method", "GetInfo", "result", "ok"),
		positive("method", "NotifyRegistrationStatus", "result", "rejected"))},
	"Socket publications by reason/A": {check: all(sampleExists("reason", "start"), sampleExists("reason", "retry"), positive("reason", "csinode-lost"))},
	"Registrars scraped/A":            {check: all(seriesFor(allNodes...), valueIs(1, "node", "node-a"), valueIs(1, "node", "node-c"))},
	"Driver reachable/A": {check: all(seriesFor(allNodes...),
		valueIs(1, "node", "node-a"), valueIs(1, "node", "node-b"), valueIs(0, "node", "node-c"), valueIs(1, "node", "node-d"))},
	"GetPluginInfo errors by code/A": {check: positive("code", "Unavailable")},
	// Every registrar asked; node-c's driver answers Unavailable at once.
	"GetPluginInfo latency/A":                                    {check: seriesFor(allNodes...)},
	"/healthz latency (kubelet's liveness probe)/A":              {why: "prober_probe_duration_seconds is kubelet's own (its /metrics/probes), and the e2e kubelet runs only the plugin manager, no prober"},
	"Driver liveness probe latency (--driver-health-endpoint)/A": {check: seriesFor("node-a")},
	"Driver liveness probe latency (--driver-health-endpoint)/B": {check: all(seriesFor("node-a"), positive("grpc_status_code", "FailedPrecondition"))},
	"Restarts/A": {why: "kube_pod_container_status_restarts_total and kube_pod_info are kube-state-metrics' series about Pods: neither kube-state-metrics nor Pods run here"},
	// node-d confirmed; node-a is registered without --confirm-csinode.
	"CSINode confirmations and losses/A": {check: valueIs(1)},
	"CSINode confirmations and losses/B": {check: valueIs(1)},
	"CSINode confirmations and losses/C": {check: all(seriesFor(allNodes...), positive("node", "node-e"), valueIs(0, "node", "node-d"))},
	"CSINode API requests/A":             {check: all(sampleExists("verb", "list", "code", "200"), sampleExists("verb", "get", "code", "200"))},
	"Node gate API requests/A":           {check: sampleExists("code", "error")},
	// Only a registrar with the node gate on serves node_update_pending.
	"Node gate API requests/B": {check: all(seriesFor("node-b"), valueIs(1, "node", "node-b"))},
	"Registrar versions/A": {check: all(seriesFor(allNodes...),
		sampleExists("node", "node-a", "driver_name", "a.csi.example.com"))},
}

func count(n int) func([]sample) error {
	return func(got []sample) error {
		if len(got) != n {
			return fmt.Errorf("%d series, want %d", len(got), n)
		}
		return nil
	}
}

func sampleExists(kv ...string) func([]sample) error {
	return func(got []sample) error {
		_, err := sampleFor(got, kv...)
		return err
	}
}

// recentMillis wants a time in milliseconds since the epoch within the
// last few minutes, as the table shows it.
func recentMillis(kv ...string) func([]sample) error {
	return func(got []sample) error {
		s, err := sampleFor(got, kv...)
		if err != nil {
			return err
		}
		at := time.UnixMilli(int64(s.Value))
		if since := time.Since(at); since < -time.Minute || since > 10*time.Minute {
			return fmt.Errorf("series %v: %v is not a time of this test's run", kv, at)
		}
		return nil
	}
}

// The dashboard as far as this test reads it.
type dashboard struct {
	Panels []panel `json:"panels"`
	// Templating holds the variables.
	Templating struct {
		List []struct {
			Type  string `json:"type"`
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Type            string  `json:"type"`
	Title           string  `json:"title"`
	Targets         []query `json:"targets"`
	Transformations []struct {
		ID      string `json:"id"`
		Options struct {
			IncludeByName map[string]bool `json:"includeByName"`
		} `json:"options"`
	} `json:"transformations"`
}

type query struct {
	RefID        string `json:"refId"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
	Format       string `json:"format"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var panels []panel
	for _, p := range d.Panels {
		if p.Type != "row" {
			panels = append(panels, p)
		}
	}
	if len(panels) == 0 {
		t.Fatalf("%s has no panel", dashboardFile)
	}
	d.Panels = panels
	return d
}

// target is one query of a panel, with the variables substituted.
type target struct {
	panel panel
	query query
	expr  string
}

var legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// labelsShown checks that every series has each label the legend names
// (a legend of a series without it shows an empty name), and that a table
// has every column it includes in some row.
func (tg target) labelsShown(got []sample) error {
	for _, m := range legendLabel.FindAllStringSubmatch(tg.query.LegendFormat, -1) {
		for _, s := range got {
			if s.Labels[m[1]] == "" {
				return fmt.Errorf("series %v has no label %s, which the legend %q shows", s.Labels, m[1], tg.query.LegendFormat)
			}
		}
	}
	for _, tr := range tg.panel.Transformations {
		for column := range tr.Options.IncludeByName {
			if column == "Value" {
				continue
			}
			if !slices.ContainsFunc(got, func(s sample) bool { return s.Labels[column] != "" }) {
				return fmt.Errorf("no series has the label %s, which the table shows as a column", column)
			}
		}
	}
	return nil
}

// substitute replaces Grafana's variables ($name, ${name}) with values.
func substitute(expr string, vars map[string]string) string {
	// Longest names first: $node must not replace the start of $nodes.
	names := make([]string, 0, len(vars))
	for name := range vars {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) })
	for _, name := range names {
		expr = strings.ReplaceAll(expr, "${"+name+"}", vars[name])
		expr = strings.ReplaceAll(expr, "$"+name, vars[name])
	}
	return expr
}

var labelValues = regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// checkVariables runs each query variable as Grafana's Prometheus data
// source does (label_values(selector, label): the label's values among
// the selector's series), and wants the values of this set-up.
func checkVariables(t *testing.T, prom *prometheusServer, dash dashboard, nodes []*node) {
	t.Helper()
	want := map[string][]string{"namespace": {namespace}}
	for _, n := range nodes {
		want["node"] = append(want["node"], n.name)
	}
	seen := 0
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		seen++
		q, _ := v.Query.(string)
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, v.Query)
			continue
		}
		selector := substitute(m[1], map[string]string{"namespace": namespace})
		var values []string
		err := harness.Eventually(evalTimeout, 500*time.Millisecond, "variable "+v.Name+"'s values", func() (bool, error) {
			var err error
			values, err = prom.labelValues(m[2], selector)
			if err != nil {
				return false, err
			}
			return slices.Equal(values, want[v.Name]), fmt.Errorf("values %v, want %v", values, want[v.Name])
		})
		if err != nil {
			t.Errorf("%v (query %s)", err, q)
		}
	}
	if seen != len(want) {
		t.Errorf("%d query variables, want %d: %v", seen, len(want), slices.Sorted(maps.Keys(want)))
	}
}

// checkSyntax runs promtool check rules on every query as a recording
// rule: it parses them as Prometheus does, those without data here too.
func checkSyntax(t *testing.T, promtool, dir string, targets []target) {
	t.Helper()
	var rules strings.Builder
	rules.WriteString("groups:\n- name: dashboard\n  rules:\n")
	for i, tg := range targets {
		expr, _ := json.Marshal(tg.expr)
		fmt.Fprintf(&rules, "  - record: dashboard:query_%d\n    expr: %s\n", i, expr)
	}
	path := filepath.Join(dir, "dashboard-rules.yaml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s\n%s", err, out, rules.String())
	}
}

// prometheusServer is a running Prometheus, asked through its HTTP API.
type prometheusServer struct {
	addr string
}

// startPrometheus runs Prometheus scraping every registrar's /metrics each
// second, with the labels the PodMonitor's scrape gives each series, and
// waits until it has scraped each of them.
func startPrometheus(t *testing.T, bin, dir string, nodes []*node) *prometheusServer {
	t.Helper()
	addr, err := harness.FreeLocalAddr()
	if err != nil {
		t.Fatal(err)
	}
	var config strings.Builder
	config.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n- job_name: storage/csi-node\n  static_configs:\n")
	for _, n := range nodes {
		fmt.Fprintf(&config, "  - targets: [%q]\n    labels: {namespace: %q, pod: %q, container: %q, node: %q}\n",
			n.registrar.Config.HTTPEndpoint, namespace, "csi-node-"+strings.TrimPrefix(n.name, "node-"), container, n.name)
	}
	configPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configPath, []byte(config.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := harness.StartProcess("prometheus", bin, []string{
		"--config.file=" + configPath,
		"--storage.tsdb.path=" + filepath.Join(dir, "tsdb"),
		"--web.listen-address=" + addr,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := p.Stop(15 * time.Second); err != nil {
			t.Errorf("stopping prometheus: %v", err)
		}
		if t.Failed() {
			t.Logf("prometheus:\n%s", p.Tail(30))
		}
	})
	prom := &prometheusServer{addr: addr}
	err = harness.Eventually(startTimeout, 200*time.Millisecond, "every registrar to be scraped", func() (bool, error) {
		got, err := prom.query(`count(up{job="storage/csi-node"} == 1)`)
		if err != nil {
			return false, err
		}
		if len(got) != 1 || got[0].Value != float64(len(nodes)) {
			return false, fmt.Errorf("up: %s", describe(got))
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v\nprometheus:\n%s", err, p.Tail(30))
	}
	return prom
}

// sample is one series of an instant query's result.
type sample struct {
	Labels map[string]string
	Value  float64
}

func describe(got []sample) string {
	if len(got) == 0 {
		return "no series"
	}
	var parts []string
	for _, s := range got {
		parts = append(parts, fmt.Sprintf("%v %v", s.Labels, s.Value))
	}
	return strings.Join(parts, "; ")
}

func (p *prometheusServer) get(path string, params url.Values, data any) error {
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + p.addr + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var answer struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return fmt.Errorf("GET %s: %s: %w", path, resp.Status, err)
	}
	if answer.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, answer.Error)
	}
	return json.Unmarshal(answer.Data, data)
}

// query evaluates expr now, as a panel's last point.
func (p *prometheusServer) query(expr string) ([]sample, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("result of type %s, want an instant vector", data.ResultType)
	}
	var got []sample
	for _, r := range data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("value %v: %w", r.Value[1], err)
		}
		got = append(got, sample{Labels: r.Metric, Value: v})
	}
	return got, nil
}

// labelValues are the values of label among the series of selector in the
// last hour, sorted, as Grafana asks for label_values.
func (p *prometheusServer) labelValues(label, selector string) ([]string, error) {
	var values []string
	now := time.Now()
	params := url.Values{"match[]": {selector}, "start": {strconv.FormatInt(now.Add(-time.Hour).Unix(), 10)}, "end": {strconv.FormatInt(now.Unix(), 10)}}
	if err := p.get("/api/v1/label/"+url.PathEscape(label)+"/values", params, &values); err != nil {
		return nil, err
	}
	slices.Sort(values)
	return values, nil
}
