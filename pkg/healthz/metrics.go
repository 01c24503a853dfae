package healthz

import (
	"net/http"
	"runtime"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/internal/histogram"
	"github.com/csi-registrar/node-driver-registrar/pkg/nodegate"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// Metric names, listed in the README.
const (
	metricRegistered         = "csi_node_driver_registrar_registered"
	metricState              = "csi_node_driver_registrar_state"
	metricKubeletRPCs        = "csi_node_driver_registrar_kubelet_rpcs_total"
	metricPublications       = "csi_node_driver_registrar_socket_publications_total"
	metricFailures           = "csi_node_driver_registrar_registration_failures_total"
	metricLastFailure        = "csi_node_driver_registrar_last_registration_failure_timestamp_seconds"
	metricDriverReachable    = "csi_node_driver_registrar_driver_reachable"
	metricPluginInfoDuration = "csi_node_driver_registrar_driver_get_plugin_info_duration_seconds"
	metricPluginInfoErrors   = "csi_node_driver_registrar_driver_get_plugin_info_errors_total"
	metricBuildInfo          = "csi_node_driver_registrar_build_info"
	metricNodeAPIRequests    = "csi_node_driver_registrar_node_api_requests_total"
	metricNodeUpdatePending  = "csi_node_driver_registrar_node_update_pending"
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

// metricSet holds what cannot be read from the registration's status at
// scrape time: the driver's GetPluginInfo calls, observed as they happen.
// Everything else is taken from a status snapshot when scraped, and
// written with Prometheus' own text encoder.
type metricSet struct {
	version  string
	revision string

	mu         sync.Mutex
	pluginInfo *histogram.Histogram
	errByCode  map[string]uint64
}

func newMetricSet(version string) *metricSet {
	return &metricSet{
		version:    version,
		revision:   vcsRevision(),
		pluginInfo: histogram.New(pluginInfoBuckets),
		errByCode:  map[string]uint64{},
	}
}

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

// observePluginInfo records one GetPluginInfo call to the driver.
func (m *metricSet) observePluginInfo(d time.Duration, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pluginInfo.Observe(d.Seconds())
	if err != nil {
		m.errByCode[status.Code(err).String()]++
	}
}

// families builds the registrar's own metrics from a status snapshot.
func (m *metricSet) families(st registration.Status) []*dto.MetricFamily {
	boolean := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	var out []*dto.MetricFamily
	add := func(name, help string, typ dto.MetricType, metrics ...*dto.Metric) {
		out = append(out, &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: typ.Enum(), Metric: metrics})
	}

	add(metricRegistered, "1 when kubelet has accepted the driver through the current registration socket, 0 otherwise.",
		dto.MetricType_GAUGE, gauge(boolean(st.State == registration.Registered)))

	states := make([]*dto.Metric, 0, len(registration.States))
	for _, state := range registration.States {
		states = append(states, gauge(boolean(st.State == state), "state", string(state)))
	}
	add(metricState, "The registration's state: 1 for the current one.", dto.MetricType_GAUGE, states...)

	add(metricKubeletRPCs, "Calls by kubelet on the registration socket, by method and result.", dto.MetricType_COUNTER,
		counter(st.KubeletCalls.GetInfo, "method", "GetInfo", "result", "ok"),
		counter(st.KubeletCalls.NotifyRegistered, "method", "NotifyRegistrationStatus", "result", "registered"),
		counter(st.KubeletCalls.NotifyRejected, "method", "NotifyRegistrationStatus", "result", "rejected"))

	publications := make([]*dto.Metric, 0, len(publicationReasons))
	for _, reason := range publicationReasons {
		publications = append(publications, counter(st.Publications[reason], "reason", reason))
	}
	add(metricPublications, "Registration sockets published, by reason.", dto.MetricType_COUNTER, publications...)

	add(metricFailures, "Rejections of the driver by kubelet.", dto.MetricType_COUNTER, counter(st.RegistrationFailures))
	var lastFailure float64
	if st.LastFailure != nil {
		lastFailure = float64(st.LastFailure.UnixNano()) / 1e9
	}
	add(metricLastFailure, "Time of kubelet's last rejection of the driver, in seconds since the epoch; 0 if none.",
		dto.MetricType_GAUGE, gauge(lastFailure))
	add(metricDriverReachable, "1 while the CSI driver's socket is there and its driver answered, 0 otherwise.",
		dto.MetricType_GAUGE, gauge(boolean(st.DriverReachable)))

	m.mu.Lock()
	pluginInfo := m.pluginInfo.Proto()
	codes := make([]string, 0, len(m.errByCode))
	for code := range m.errByCode {
		codes = append(codes, code)
	}
	sort.Strings(codes)
	errors := make([]*dto.Metric, 0, len(codes))
	for _, code := range codes {
		errors = append(errors, counter(m.errByCode[code], "code", code))
	}
	m.mu.Unlock()
	add(metricPluginInfoDuration, "Duration of GetPluginInfo calls to the CSI driver, failed ones included.",
		dto.MetricType_HISTOGRAM, &dto.Metric{Histogram: pluginInfo})
	if len(errors) > 0 {
		add(metricPluginInfoErrors, "Failed GetPluginInfo calls to the CSI driver, by gRPC code.", dto.MetricType_COUNTER, errors...)
	}

	add(metricBuildInfo, "Always 1: the registrar's version, the commit and Go release it was built from, and the driver it registers.", dto.MetricType_GAUGE,
		gauge(1, "version", m.version, "revision", m.revision, "goversion", runtime.Version(), "driver_name", st.DriverName))

	return out
}

// nodeGateFamilies are the node gate's metrics, with --remove-node-taint
// or --node-condition.
func nodeGateFamilies(st *nodegate.Status) []*dto.MetricFamily {
	if st == nil {
		return nil
	}
	var requests []*dto.Metric
	for _, request := range []string{nodegate.RequestGetNode, nodegate.RequestRemoveTaints, nodegate.RequestSetCondition} {
		for _, code := range nodegate.Codes(st.Requests[request]) {
			requests = append(requests, counter(st.Requests[request][code], "request", request, "code", code))
		}
	}
	pending := 0.0
	if st.Pending {
		pending = 1
	}
	out := []*dto.MetricFamily{{Name: proto.String(metricNodeUpdatePending),
		Help: proto.String("1 while the Node does not show yet what the registrar knows of the driver's registration (its startup taints, its condition), 0 otherwise."),
		Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{gauge(pending)}}}
	if len(requests) > 0 {
		out = append(out, &dto.MetricFamily{Name: proto.String(metricNodeAPIRequests),
			Help: proto.String("Requests to the API server about this node, by request (get-node, remove-taints, set-condition) and HTTP status code (error: no answer)."),
			Type: dto.MetricType_COUNTER.Enum(), Metric: requests})
	}
	return out
}

func gauge(v float64, labels ...string) *dto.Metric {
	return &dto.Metric{Label: labelPairs(labels), Gauge: &dto.Gauge{Value: proto.Float64(v)}}
}

func counter(v uint64, labels ...string) *dto.Metric {
	return counterValue(float64(v), labels...)
}

// counterValue is a counter of a quantity that is not a count, such as
// seconds.
func counterValue(v float64, labels ...string) *dto.Metric {
	return &dto.Metric{Label: labelPairs(labels), Counter: &dto.Counter{Value: proto.Float64(v)}}
}

func labelPairs(kv []string) []*dto.LabelPair {
	pairs := make([]*dto.LabelPair, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		pairs = append(pairs, &dto.LabelPair{Name: proto.String(kv[i]), Value: proto.String(kv[i+1])})
	}
	return pairs
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	families := s.metrics.families(s.registration.Status())
	families = append(families, nodeGateFamilies(s.nodeGateStatus())...)
	families = append(families, s.runtimeFamilies(r.Context())...)
	if s.more != nil {
		families = append(families, s.more()...)
	}
	sort.Slice(families, func(i, j int) bool { return families[i].GetName() < families[j].GetName() })
	for _, family := range families {
		if _, err := expfmt.MetricFamilyToText(w, family); err != nil {
			klog.FromContext(r.Context()).V(5).Info("Cannot write metrics", "err", err)
			return
		}
	}
}
