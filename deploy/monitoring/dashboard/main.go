// Command dashboard writes deploy/monitoring's Grafana dashboard: the
// dashboard's JSON, and the same JSON in a ConfigMap labelled
// grafana_dashboard: "1", which the Grafana sidecar of kube-prometheus-stack
// loads. Both files are generated: edit this program, then run
// make dashboard (make dashboard-check fails when they differ from it).
//
//	go run . -out ..        (in deploy/monitoring/dashboard)
//
// A module of its own, so that the product's go.mod never carries Grafana's
// foundation SDK.
//
// The SDK marks the classic dashboard model deprecated in favour of
// dashboardv2, Grafana 12's resource schema, which Grafana loads only with
// its new-layouts feature; the sidecar's file provisioning and Grafana's
// import take the classic JSON in every Grafana that kube-prometheus-stack
// ships.
//
//lint:file-ignore SA1019 the classic model is the one the sidecar loads (above)
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

const (
	// JSONFile and ConfigMapFile are written into -out.
	JSONFile      = "dashboard.json"
	ConfigMapFile = "grafana-dashboard.yaml"
	// uid stays the same across versions, so that Grafana replaces the
	// dashboard rather than adding another.
	uid = "csi-node-driver-registrar"
	// container is the registrar's container in deploy/'s DaemonSet, the
	// one the PodMonitor keeps: kube-state-metrics' and kubelet's series
	// name it.
	container = "node-driver-registrar"
)

// sel is the selector every registrar series gets: the dashboard's
// variables, on the labels the PodMonitor gives each series.
const sel = `namespace=~"$namespace", node=~"$node"`

// ds is the datasource variable every query uses.
var ds = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

func query(ref, expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().RefId(ref).Datasource(ds).Expr(expr).LegendFormat(legend).Range()
}

// instant is a query of a table: one row per series, its labels as columns.
func instant(ref, expr string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().RefId(ref).Datasource(ds).Expr(expr).Instant().
		Format(prometheus.PromQueryFormatTable).LegendFormat("__auto")
}

func series(title, description, unit string, width uint32, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(description).Datasource(ds).
		Unit(unit).Height(8).Span(width).Min(0).NoValue("0").
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeTable).
			Placement(common.LegendPlacementBottom).Calcs([]string{"lastNotNull", "max"}))
	for _, q := range queries {
		p.WithTarget(q)
	}
	return p
}

func stacked(p *timeseries.PanelBuilder) *timeseries.PanelBuilder {
	return p.Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).FillOpacity(30)
}

// labelsTable shows the labels of an instant query's series, one row each.
func labelsTable(title, description string, width uint32, columns []string, q *prometheus.DataqueryBuilder) *table.PanelBuilder {
	include := map[string]any{}
	for _, c := range columns {
		include[c] = true
	}
	return table.NewPanelBuilder().Title(title).Description(description).Datasource(ds).Height(8).Span(width).
		WithTarget(q).
		WithTransformation(dashboard.DataTransformerConfig{
			Id:      "organize",
			Options: map[string]any{"excludeByName": map[string]any{"Time": true, "__name__": true}, "includeByName": include},
		})
}

func variable(name, label, definition string) *dashboard.QueryVariableBuilder {
	q := dashboard.StringOrMap{String: cog.ToPtr(definition)}
	return dashboard.NewQueryVariableBuilder(name).Label(label).Datasource(ds).Query(q).Definition(definition).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).IncludeAll(true).AllValue(".*").
		Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr("All")}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr("$__all")}})
}

func row(title string) *dashboard.RowBuilder { return dashboard.NewRowBuilder(title) }

// build is the dashboard. Every panel's queries are evaluated against
// registrars scraped by a real Prometheus in make monitoring-test
// (test/e2e/monitoring), which knows each panel by its title.
func build() *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder("CSI node-driver-registrar").
		Uid(uid).
		Description("Registrations of CSI drivers with kubelet on every node, as the node-driver-registrar sidecar reports them. Generated by deploy/monitoring/dashboard; see docs/monitoring.md.").
		Tags([]string{"csi", "storage", "kubelet", "node-driver-registrar"}).
		Refresh("1m").
		Time("now-3h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Link(dashboard.NewDashboardLinkBuilder("Runbooks").Type(dashboard.DashboardLinkTypeLink).
			Url("https://runbooks.example.com/csi-node-driver-registrar/").TargetBlank(true).Icon("doc")).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(variable("namespace", "Namespace", "label_values(csi_node_driver_registrar_build_info, namespace)")).
		WithVariable(variable("node", "Node", `label_values(csi_node_driver_registrar_build_info{namespace=~"$namespace"}, node)`)).
		WithRow(row("Registrations")).
		WithPanel(stat.NewPanelBuilder().Title("Registered").
			Description("Registrars whose driver kubelet has accepted through their current registration socket, out of the registrars scraped.").
			Datasource(ds).Height(8).Span(4).NoValue("0").
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
			WithTarget(query("A", `sum(csi_node_driver_registrar_registered{`+sel+`})`, "registered")).
			WithTarget(query("B", `count(csi_node_driver_registrar_registered{`+sel+`})`, "registrars"))).
		WithPanel(stacked(series("Registrations by state",
			"Registrars in each state (csi_node_driver_registrar_state): registered, unconfirmed (--confirm-csinode: CSINode does not list the driver), rejected, kubelet-silent, waiting-for-driver, waiting-for-kubelet, superseded and deferring (a rolling update), stopped.",
			"none", 10,
			query("A", `count by (state) (csi_node_driver_registrar_state{`+sel+`} == 1)`, "{{state}}")))).
		WithPanel(labelsTable("Registrars not registered",
			"Each registrar in a state other than registered, with its node and pod: /status on its HTTP port, or --diagnose in its container, says why.",
			10, []string{"node", "pod", "state"},
			instant("A", `csi_node_driver_registrar_state{`+sel+`, state!="registered"} == 1`))).
		WithRow(row("kubelet")).
		WithPanel(series("Rejections by kubelet",
			"kubelet's NotifyRegistrationStatus(false) per node. kubelet's reason is free text, not a label: it is in /status (lastKubeletVerdict.reason), in the registrar's log, in the --diagnose line \"kubelet's registration\", and (with --rejection-policy=exit) in the container's termination message.",
			"none", 8,
			query("A", `sum by (node) (increase(csi_node_driver_registrar_registration_failures_total{`+sel+`}[$__rate_interval]))`, "{{node}}"))).
		WithPanel(labelsTable("Last rejection",
			"When kubelet last rejected the driver on each node where it ever did (csi_node_driver_registrar_last_registration_failure_timestamp_seconds); the reason is in that pod's /status.",
			8, []string{"node", "pod", "Value"},
			instant("A", `csi_node_driver_registrar_last_registration_failure_timestamp_seconds{`+sel+`} * 1000 > 0`)).
			WithOverride(dashboard.MatcherConfig{Id: "byName", Options: "Value"}, []dashboard.DynamicConfigValue{{Id: "unit", Value: "dateTimeAsIso"}, {Id: "displayName", Value: "last rejection"}})).
		WithPanel(series("kubelet's calls",
			"kubelet's calls on the registration sockets: GetInfo, and NotifyRegistrationStatus with its verdict.",
			"none", 8,
			query("A", `sum by (method, result) (increase(csi_node_driver_registrar_kubelet_rpcs_total{`+sel+`}[$__rate_interval]))`, "{{method}} {{result}}"))).
		WithPanel(stacked(series("Socket publications by reason",
			"Registration sockets published: start, deleted (someone deleted ours), vacated, stale, retry (after a rejection), renamed, handover (a rolling update), csinode-lost (--confirm-csinode).",
			"none", 12,
			query("A", `sum by (reason) (increase(csi_node_driver_registrar_socket_publications_total{`+sel+`}[$__rate_interval]))`, "{{reason}}")))).
		WithPanel(series("Registrars scraped",
			"Prometheus' up for each registrar's /metrics: 0, or a gap, is a pod that does not answer (restarting, or its node gone), which the registrar's own series cannot show.",
			"none", 12,
			query("A", `max by (node, pod) (up{namespace=~"$namespace", node=~"$node", container="`+container+`"})`, "{{node}} {{pod}}")).Max(1)).
		WithRow(row("CSI driver")).
		WithPanel(series("Driver reachable",
			"1 while the CSI driver's socket is there and the driver answered GetPluginInfo (csi_node_driver_registrar_driver_reachable).",
			"none", 8,
			query("A", `max by (node, pod) (csi_node_driver_registrar_driver_reachable{`+sel+`})`, "{{node}} {{pod}}")).Max(1)).
		WithPanel(series("GetPluginInfo errors by code",
			"Failed GetPluginInfo calls to the driver, by gRPC code: Unavailable while nothing listens on the socket, DeadlineExceeded when the driver is slower than --timeout.",
			"none", 8,
			query("A", `sum by (code) (increase(csi_node_driver_registrar_driver_get_plugin_info_errors_total{`+sel+`}[$__rate_interval]))`, "{{code}}"))).
		WithPanel(series("GetPluginInfo latency",
			"99th percentile of the registrar's GetPluginInfo calls to the driver, failed ones included.",
			"s", 8,
			query("A", `histogram_quantile(0.99, sum by (node, le) (rate(csi_node_driver_registrar_driver_get_plugin_info_duration_seconds_bucket{`+sel+`}[$__rate_interval])))`, "p99 {{node}}"))).
		WithRow(row("Probes and restarts")).
		WithPanel(series("/healthz latency (kubelet's liveness probe)",
			"99th percentile of kubelet's liveness probe of the registrar's /healthz, as kubelet measures it: prober_probe_duration_seconds from kubelet's /metrics/probes (kube-prometheus-stack scrapes it), joined with the registrar's build_info for its node. The registrar itself keeps no figure of its own /healthz, which answers from memory.",
			"s", 8,
			query("A", `histogram_quantile(0.99, sum by (namespace, pod, le) (rate(prober_probe_duration_seconds_bucket{namespace=~"$namespace", container="`+container+`", probe_type="Liveness"}[$__rate_interval]))) * on (namespace, pod) group_left (node) max by (namespace, pod, node) (csi_node_driver_registrar_build_info{`+sel+`})`, "p99 {{node}} {{pod}}"))).
		WithPanel(series("Driver liveness probe latency (--driver-health-endpoint)",
			"99th percentile of the CSI driver's Identity.Probe calls that the registrar's --driver-health-endpoint /healthz makes for the driver container's liveness probe (csi_sidecar_operations_seconds, as livenessprobe exports it).",
			"s", 8,
			query("A", `histogram_quantile(0.99, sum by (node, le) (rate(csi_sidecar_operations_seconds_bucket{`+sel+`, method_name="/csi.v1.Identity/Probe"}[$__rate_interval])))`, "p99 {{node}}"),
			query("B", `sum by (node, grpc_status_code) (increase(csi_sidecar_operations_seconds_count{`+sel+`, method_name="/csi.v1.Identity/Probe", grpc_status_code!="OK"}[$__rate_interval]))`, "failed {{node}} {{grpc_status_code}}"))).
		WithPanel(series("Restarts",
			"Restarts of the registrar's container in the last hour, from kube-state-metrics (kube_pod_container_status_restarts_total), with kube_pod_info's node. A registration that fails for --unhealthy-after fails /healthz, and kubelet restarts the container.",
			"none", 8,
			query("A", `sum by (namespace, pod) (increase(kube_pod_container_status_restarts_total{namespace=~"$namespace", container="`+container+`"}[1h])) * on (namespace, pod) group_left (node) max by (namespace, pod, node) (kube_pod_info{namespace=~"$namespace", node=~"$node"})`, "{{node}} {{pod}}"))).
		WithRow(row("Node API: CSINode and the node gate")).
		WithPanel(series("CSINode confirmations and losses",
			"With --confirm-csinode: registrars whose driver this node's CSINode lists (confirmed), registrars kubelet accepted but CSINode does not list (unconfirmed), and sockets published again because CSINode lost the driver while kubelet had it registered (lost).",
			"none", 8,
			query("A", `count((csi_node_driver_registrar_state{`+sel+`, state="registered"} == 1) and on (namespace, pod) csi_node_driver_registrar_csinode_api_requests_total)`, "confirmed"),
			query("B", `count(csi_node_driver_registrar_state{`+sel+`, state="unconfirmed"} == 1)`, "unconfirmed"),
			query("C", `sum by (node) (increase(csi_node_driver_registrar_socket_publications_total{`+sel+`, reason="csinode-lost"}[$__rate_interval]))`, "lost {{node}}"))).
		WithPanel(series("CSINode API requests",
			"With --confirm-csinode: requests about this node's CSINode (list, watch) and Node (get), by HTTP status code; error: no answer. 403 is RBAC (deploy/csinode).",
			"none", 8,
			query("A", `sum by (verb, code) (increase(csi_node_driver_registrar_csinode_api_requests_total{`+sel+`}[$__rate_interval]))`, "{{verb}} {{code}}"))).
		WithPanel(series("Node gate API requests",
			"With --remove-node-taint or --node-condition: requests about the Node (get-node, remove-taints, set-condition) by HTTP status code, and the registrars whose Node does not show yet what they know (pending). 403 is RBAC (deploy/node-gate), 404 a wrong node name.",
			"none", 8,
			query("A", `sum by (request, code) (increase(csi_node_driver_registrar_node_api_requests_total{`+sel+`}[$__rate_interval]))`, "{{request}} {{code}}"),
			query("B", `sum by (node) (csi_node_driver_registrar_node_update_pending{`+sel+`})`, "pending {{node}}"))).
		WithRow(row("Versions")).
		WithPanel(labelsTable("Registrar versions",
			"The registrar's version, commit and Go release, and the driver it registers, per pod: a rolling update shows here as two versions.",
			24, []string{"node", "pod", "driver_name", "version", "revision", "goversion"},
			instant("A", `csi_node_driver_registrar_build_info{`+sel+`}`)))
}

func main() {
	out := flag.String("out", "..", "directory to write "+JSONFile+" and "+ConfigMapFile+" into")
	flag.Parse()
	if err := write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	d, err := build().Build()
	if err != nil {
		return err
	}
	// Grafana tells panels apart by id (links to a panel, its editor).
	for i, p := range d.Panels {
		id := uint32(i + 1)
		if p.RowPanel != nil {
			p.RowPanel.Id = id
		} else {
			p.Panel.Id = &id
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, JSONFile), buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ConfigMapFile), configMap(buf.String()), 0o644)
}

// configMap is the ConfigMap that Grafana's sidecar loads (its default
// label, grafana_dashboard: "1"), with the JSON as a literal block.
func configMap(js string) []byte {
	var b strings.Builder
	b.WriteString(`# Generated by deploy/monitoring/dashboard (make dashboard): do not edit.
# The dashboard of docs/monitoring.md for Grafana's dashboard sidecar
# (kube-prometheus-stack: grafana.sidecar.dashboards), which loads every
# ConfigMap labelled grafana_dashboard: "1" in the namespaces it searches
# (by default Grafana's own: set searchNamespace, or put this ConfigMap
# there). The same JSON is in dashboard.json, for Grafana's import.
apiVersion: v1
kind: ConfigMap
metadata:
  name: csi-node-driver-registrar-dashboard
  labels:
    grafana_dashboard: "1"
    app.kubernetes.io/name: csi-node
    app.kubernetes.io/component: csi-node-plugin
data:
  csi-node-driver-registrar.json: |
`)
	for _, line := range strings.Split(strings.TrimSuffix(js, "\n"), "\n") {
		b.WriteString("    " + line + "\n")
	}
	return []byte(b.String())
}
