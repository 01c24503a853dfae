package healthz

import (
	"maps"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/pkg/nodegate"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// publicationReasons are exported before they first happen, so that
// rate() and increase() see the first one.
var publicationReasons = []string{
	registration.ReasonStart, registration.ReasonDeleted, registration.ReasonVacated,
	registration.ReasonStale, registration.ReasonRetry, registration.ReasonRenamed, registration.ReasonHandover,
}

// pluginInfoBuckets span a driver that answers at once to one at the edge
// of a generous --timeout.
var pluginInfoBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// vcsRevision is the commit the binary was built from, as the go command
// stamps it when it builds in a git checkout; "unknown" where it did not
// (go test, a build from a source archive, -buildvcs=false).
func vcsRevision() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, setting := range info.Settings {
			if setting.Key == "vcs.revision" && setting.Value != "" {
				return setting.Value
			}
		}
	}
	return "unknown"
}

// serveMetrics writes the registrar's own metrics, taken from a status
// snapshot, and the runtime's, with Prometheus' own text encoder.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	logger := klog.FromContext(r.Context())
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	families := s.registrationFamilies(s.registration.Status())
	families = append(families, nodeGateFamilies(s.nodeGateStatus())...)
	// A figure that cannot be read leaves the rest of /metrics served.
	goAndProcess, err := runtimeFamilies()
	if err != nil {
		logger.V(4).Info("Cannot read every Go runtime or process metric", "err", err)
	}
	families = append(families, goAndProcess...)
	if s.opts.MoreMetrics != nil {
		families = append(families, s.opts.MoreMetrics()...)
	}
	sort.Slice(families, func(i, j int) bool { return families[i].GetName() < families[j].GetName() })
	for _, family := range families {
		if _, err := expfmt.MetricFamilyToText(w, family); err != nil {
			logger.V(5).Info("Cannot write metrics", "err", err)
			return
		}
	}
}

// registrationFamilies are the registrar's own metrics.
func (s *Server) registrationFamilies(st registration.Status) []*dto.MetricFamily {
	states := make([]*dto.Metric, 0, len(registration.States))
	for _, state := range registration.States {
		states = append(states, gauge(oneIf(st.State == state), "state", string(state)))
	}
	publications := make([]*dto.Metric, 0, len(publicationReasons))
	for _, reason := range publicationReasons {
		publications = append(publications, counter(st.Publications[reason], "reason", reason))
	}
	var lastFailure float64
	if st.LastFailure != nil {
		lastFailure = float64(st.LastFailure.UnixNano()) / 1e9
	}
	out := []*dto.MetricFamily{
		family("csi_node_driver_registrar_registered", "1 when kubelet has accepted the driver through the current registration socket, 0 otherwise.",
			dto.MetricType_GAUGE, gauge(oneIf(st.State == registration.Registered))),
		family("csi_node_driver_registrar_state", "The registration's state: 1 for the current one.", dto.MetricType_GAUGE, states...),
		family("csi_node_driver_registrar_kubelet_rpcs_total", "Calls by kubelet on the registration socket, by method and result.", dto.MetricType_COUNTER,
			counter(st.KubeletCalls.GetInfo, "method", "GetInfo", "result", "ok"),
			counter(st.KubeletCalls.NotifyRegistered, "method", "NotifyRegistrationStatus", "result", "registered"),
			counter(st.KubeletCalls.NotifyRejected, "method", "NotifyRegistrationStatus", "result", "rejected")),
		family("csi_node_driver_registrar_socket_publications_total", "Registration sockets published, by reason.", dto.MetricType_COUNTER, publications...),
		family("csi_node_driver_registrar_registration_failures_total", "Rejections of the driver by kubelet.", dto.MetricType_COUNTER, counter(st.RegistrationFailures)),
		family("csi_node_driver_registrar_last_registration_failure_timestamp_seconds", "Time of kubelet's last rejection of the driver, in seconds since the epoch; 0 if none.",
			dto.MetricType_GAUGE, gauge(lastFailure)),
		family("csi_node_driver_registrar_driver_reachable", "1 while the CSI driver's socket is there and its driver answered, 0 otherwise.",
			dto.MetricType_GAUGE, gauge(oneIf(st.DriverReachable))),
		family("csi_node_driver_registrar_build_info", "Always 1: the registrar's version, the commit and Go release it was built from, and the driver it registers.", dto.MetricType_GAUGE,
			gauge(1, "version", s.opts.Version, "revision", s.revision, "goversion", runtime.Version(), "driver_name", st.DriverName)),
	}

	s.callsMu.Lock()
	defer s.callsMu.Unlock()
	out = append(out, family("csi_node_driver_registrar_driver_get_plugin_info_duration_seconds", "Duration of GetPluginInfo calls to the CSI driver, failed ones included.",
		dto.MetricType_HISTOGRAM, &dto.Metric{Histogram: s.pluginInfo.Proto()}))
	if len(s.pluginInfoErrors) > 0 {
		errors := make([]*dto.Metric, 0, len(s.pluginInfoErrors))
		for _, code := range slices.Sorted(maps.Keys(s.pluginInfoErrors)) {
			errors = append(errors, counter(s.pluginInfoErrors[code], "code", code))
		}
		out = append(out, family("csi_node_driver_registrar_driver_get_plugin_info_errors_total", "Failed GetPluginInfo calls to the CSI driver, by gRPC code.", dto.MetricType_COUNTER, errors...))
	}
	return out
}

// nodeGateFamilies are the node gate's metrics, with --remove-node-taint
// or --node-condition.
func nodeGateFamilies(st *nodegate.Status) []*dto.MetricFamily {
	if st == nil {
		return nil
	}
	out := []*dto.MetricFamily{family("csi_node_driver_registrar_node_update_pending",
		"1 while the Node does not show yet what the registrar knows of the driver's registration (its startup taints, its condition), 0 otherwise.",
		dto.MetricType_GAUGE, gauge(oneIf(st.Pending)))}
	var requests []*dto.Metric
	for _, request := range []string{nodegate.RequestGetNode, nodegate.RequestRemoveTaints, nodegate.RequestSetCondition} {
		for _, code := range nodegate.Codes(st.Requests[request]) {
			requests = append(requests, counter(st.Requests[request][code], "request", request, "code", code))
		}
	}
	if len(requests) > 0 {
		out = append(out, family("csi_node_driver_registrar_node_api_requests_total",
			"Requests to the API server about this node, by request (get-node, remove-taints, set-condition) and HTTP status code (error: no answer).",
			dto.MetricType_COUNTER, requests...))
	}
	return out
}

func family(name, help string, typ dto.MetricType, metrics ...*dto.Metric) *dto.MetricFamily {
	return &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: typ.Enum(), Metric: metrics}
}

func oneIf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func gauge(v float64, labels ...string) *dto.Metric {
	return &dto.Metric{Label: labelPairs(labels), Gauge: &dto.Gauge{Value: proto.Float64(v)}}
}

func counter(v uint64, labels ...string) *dto.Metric {
	return &dto.Metric{Label: labelPairs(labels), Counter: &dto.Counter{Value: proto.Float64(float64(v))}}
}

func labelPairs(kv []string) []*dto.LabelPair {
	pairs := make([]*dto.LabelPair, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		pairs = append(pairs, &dto.LabelPair{Name: proto.String(kv[i]), Value: proto.String(kv[i+1])})
	}
	return pairs
}
