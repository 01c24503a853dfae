package deploy

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
)

// metricsSources hold, in their non-test Go files, the name of every
// family the registrar serves: its own, and those of the features.
var metricsSources = []string{"../../pkg", "../../internal"}

const (
	// monitoringDoc holds a runbook section per alert.
	monitoringDoc = "../../docs/monitoring.md"
	// statesSource names every value of the state label.
	statesSource = "../../pkg/registration/status.go"
)

// The alerts the monitoring component must have, one per way a driver
// fails to be usable on a node.
var wantAlerts = []string{"CSIDriverNotRegistered", "CSIDriverRegistrationRejected", "CSIDriverUnreachable", "CSINodeGatePending", "CSIKubeletSilent"}

// The PodMonitor scrapes the registrar's /metrics in the DaemonSet's pods.
func TestMonitoringPodMonitorScrapesTheRegistrar(t *testing.T) {
	objs := render(t, monitoringOverlayDir)
	ds := onlyDaemonSet(t, objs)
	monitor := only[*monitoringv1.PodMonitor](t, objs)
	for _, err := range CheckPodMonitor(ds, monitor) {
		t.Error(err)
	}
	// Every alert names the node: the PodMonitor must set it.
	hasNode := false
	for _, e := range monitor.Spec.PodMetricsEndpoints {
		for _, r := range e.RelabelConfigs {
			if r.TargetLabel == "node" && slices.Equal(r.SourceLabels, []monitoringv1.LabelName{"__meta_kubernetes_pod_node_name"}) {
				hasNode = true
			}
		}
	}
	if !hasNode {
		t.Errorf("PodMonitor %s does not set the label node from __meta_kubernetes_pod_node_name, which every alert names", monitor.Name)
	}
}

// CheckPodMonitor finds a PodMonitor that would scrape nothing.
func TestCheckPodMonitorFindsMistakes(t *testing.T) {
	objs := render(t, monitoringOverlayDir)
	ds := onlyDaemonSet(t, objs)
	good := only[*monitoringv1.PodMonitor](t, objs)
	otherPort := "liveness"
	for name, mutate := range map[string]func(m *monitoringv1.PodMonitor){
		"selector of another app": func(m *monitoringv1.PodMonitor) {
			m.Spec.Selector.MatchLabels = map[string]string{"app.kubernetes.io/name": "other"}
		},
		"empty selector":    func(m *monitoringv1.PodMonitor) { m.Spec.Selector.MatchLabels = nil },
		"another namespace": func(m *monitoringv1.PodMonitor) { m.Namespace = "monitoring" },
		"port not declared": func(m *monitoringv1.PodMonitor) { m.Spec.PodMetricsEndpoints[0].Port = &otherPort },
		"another path":      func(m *monitoringv1.PodMonitor) { m.Spec.PodMetricsEndpoints[0].Path = "/healthz" },
	} {
		t.Run(name, func(t *testing.T) {
			m := good.DeepCopy()
			mutate(m)
			if errs := CheckPodMonitor(ds, m); len(errs) == 0 {
				t.Errorf("no mistake found in %+v", m.Spec)
			}
		})
	}
}

// Every alert of the PrometheusRule reads families and states the
// registrar has, and links to its runbook in docs/monitoring.md.
func TestMonitoringAlertsHaveRunbooks(t *testing.T) {
	rule := only[*monitoringv1.PrometheusRule](t, render(t, monitoringOverlayDir))
	doc, err := os.ReadFile(monitoringDoc)
	if err != nil {
		t.Fatal(err)
	}
	served := servedFamilies(t)
	states := map[string]bool{}
	stateSource, err := os.ReadFile(statesSource)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`State = "([a-z-]+)"`).FindAllStringSubmatch(string(stateSource), -1) {
		states[m[1]] = true
	}
	if len(states) == 0 {
		t.Fatalf("no State constant in %s", statesSource)
	}
	stateMatcher := regexp.MustCompile(`state=~?"([^"]*)"`)
	headings := map[string]bool{}
	for line := range strings.Lines(string(doc)) {
		if title, ok := strings.CutPrefix(strings.TrimSpace(line), "### "); ok {
			headings[strings.ToLower(title)] = true
		}
	}

	var alerts []string
	for _, group := range rule.Spec.Groups {
		for _, r := range group.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			for _, family := range regexp.MustCompile(`csi_node_driver_registrar_[a-z_]+`).FindAllString(r.Expr.String(), -1) {
				if !served[family] {
					t.Errorf("alert %s reads %s, which the registrar does not serve (%s)", r.Alert, family, strings.Join(metricsSources, ", "))
				}
			}
			for _, m := range stateMatcher.FindAllStringSubmatch(r.Expr.String(), -1) {
				for _, state := range strings.Split(m[1], "|") {
					if !states[state] {
						t.Errorf("alert %s reads the state %q, which the registrar does not have (%s)", r.Alert, state, statesSource)
					}
				}
			}
			url := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(url, "https://runbooks.example.com/csi-node-driver-registrar/monitoring.md#")
			switch {
			case !ok:
				t.Errorf("alert %s: runbook_url %q is not a section of monitoring.md under the documented placeholder", r.Alert, url)
			case anchor != strings.ToLower(r.Alert):
				t.Errorf("alert %s: runbook_url %q leads to another alert's section", r.Alert, url)
			case !headings[anchor]:
				t.Errorf("alert %s: %s has no section %q for runbook_url %q", r.Alert, monitoringDoc, "### "+r.Alert, url)
			}
			for _, key := range []string{"summary", "description"} {
				if r.Annotations[key] == "" {
					t.Errorf("alert %s has no %s", r.Alert, key)
				}
			}
			if r.Labels["severity"] == "" {
				t.Errorf("alert %s has no severity label", r.Alert)
			}
		}
	}
	slices.Sort(alerts)
	want := slices.Sorted(slices.Values(wantAlerts))
	if !slices.Equal(alerts, want) {
		t.Errorf("alerts %v, want %v", alerts, want)
	}
}

// dashboardJSON is the dashboard's JSON as Grafana imports it; the
// ConfigMap holds the same.
const dashboardJSON = "../../deploy/monitoring/dashboard.json"

// The component's ConfigMap is one Grafana's dashboard sidecar loads (its
// default label), it holds dashboard.json as it is, every registrar family
// its queries read is one the registrar serves, and docs/monitoring.md
// lists each panel with its queries as they are. (make
// monitoring-test evaluates the queries against running registrars.)
func TestMonitoringDashboardConfigMap(t *testing.T) {
	cm := only[*corev1.ConfigMap](t, render(t, monitoringOverlayDir))
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap %s has labels %v: Grafana's sidecar loads those labelled grafana_dashboard: \"1\"", cm.Name, cm.Labels)
	}
	want, err := os.ReadFile(dashboardJSON)
	if err != nil {
		t.Fatal(err)
	}
	if len(cm.Data) != 1 {
		t.Fatalf("ConfigMap %s has %d keys, want one, the dashboard", cm.Name, len(cm.Data))
	}
	for key, got := range cm.Data {
		if !strings.HasSuffix(key, ".json") {
			t.Errorf("ConfigMap %s: key %s: the sidecar writes each key as a file, and Grafana loads *.json", cm.Name, key)
		}
		if got != string(want) {
			t.Errorf("ConfigMap %s: %s differs from %s: run make dashboard", cm.Name, key, dashboardJSON)
		}
	}

	var dashboard struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(want, &dashboard); err != nil {
		t.Fatalf("%s: %v", dashboardJSON, err)
	}
	if dashboard.UID == "" {
		t.Errorf("%s has no uid: Grafana would add a copy at every load instead of replacing it", dashboardJSON)
	}
	served := servedFamilies(t)
	doc, err := os.ReadFile(monitoringDoc)
	if err != nil {
		t.Fatal(err)
	}
	queries := 0
	for _, p := range dashboard.Panels {
		cell := "| " + p.Title + " |"
		if p.Type == "row" {
			cell = "| **" + p.Title + "** |"
		}
		if !strings.Contains(string(doc), cell) {
			t.Errorf("%s does not list the panel %q in its table of the dashboard", monitoringDoc, p.Title)
		}
		for _, target := range p.Targets {
			queries++
			if !strings.Contains(string(doc), "`"+target.Expr+"`") {
				t.Errorf("%s does not show the query of panel %q as the dashboard has it: %s", monitoringDoc, p.Title, target.Expr)
			}
			for _, family := range regexp.MustCompile(`csi_node_driver_registrar_[a-z_]+`).FindAllString(target.Expr, -1) {
				family = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(family, "_bucket"), "_count"), "_sum")
				if !served[family] {
					t.Errorf("panel %q reads %s, which the registrar does not serve (%s)", p.Title, family, strings.Join(metricsSources, ", "))
				}
			}
		}
	}
	if queries == 0 {
		t.Errorf("%s has no query", dashboardJSON)
	}
}

// servedFamilies are the csi_node_driver_registrar_* families named in
// metricsSources.
func servedFamilies(t *testing.T) map[string]bool {
	t.Helper()
	served := map[string]bool{}
	family := regexp.MustCompile(`"(csi_node_driver_registrar_[a-z_]+)"`)
	for _, dir := range metricsSources {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			source, err := os.ReadFile(path)
			for _, m := range family.FindAllStringSubmatch(string(source), -1) {
				served[m[1]] = true
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(served) == 0 {
		t.Fatalf("no csi_node_driver_registrar_* family named in %v", metricsSources)
	}
	return served
}
