package healthz

import (
	"bufio"
	"io"
	"maps"
	"math"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/pkg/nodegate"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// Family is one metric family of /metrics, written in Prometheus' text
// format by WriteMetrics: Prometheus' own encoder (expfmt, with its data
// model) made the binary 36 KB larger.
type Family struct {
	Name, Help string
	// Type is "counter", "gauge", "histogram" or "summary".
	Type   string
	Series []Series
}

// Series is one line of a family: its name's suffix (_bucket, _sum or
// _count in a histogram or a summary), its labels as name, value pairs, and
// its value.
type Series struct {
	Suffix string
	Labels []string
	Value  float64
}

// family is a family of labelled values: a counter when its name ends in
// _total, a gauge otherwise.
func family(name, help string, series ...Series) Family {
	if strings.HasSuffix(name, "_total") {
		return Family{name, help, "counter", series}
	}
	return Family{name, help, "gauge", series}
}

func sample(v float64, labels ...string) Series {
	return Series{Labels: labels, Value: v}
}

func oneIf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// WriteMetrics writes families in Prometheus' text format, version 0.0.4,
// sorted by name.
func WriteMetrics(w io.Writer, families []Family) error {
	slices.SortFunc(families, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	out := bufio.NewWriter(w)
	for _, f := range families {
		out.WriteString("# HELP " + f.Name + " " + helpEscaper.Replace(f.Help) + "\n# TYPE " + f.Name + " " + f.Type + "\n")
		for _, s := range f.Series {
			out.WriteString(f.Name + s.Suffix)
			separator := "{"
			for i := 0; i+1 < len(s.Labels); i += 2 {
				out.WriteString(separator + s.Labels[i] + `="` + labelEscaper.Replace(s.Labels[i+1]) + `"`)
				separator = ","
			}
			if separator == "," {
				out.WriteString("}")
			}
			out.WriteString(" " + formatFloat(s.Value) + "\n")
		}
	}
	return out.Flush()
}

func formatFloat(v float64) string {
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Histogram counts observations in fixed buckets. It is not safe for
// concurrent use: its owner holds the lock it already takes for its other
// counts.
type Histogram struct {
	bounds []float64 // upper bounds, ascending, +Inf last
	counts []uint64  // per bucket, not cumulative
	sum    float64
}

// NewHistogram is an empty histogram with these upper bounds, ascending,
// and +Inf.
func NewHistogram(bounds []float64) *Histogram {
	return &Histogram{bounds: append(slices.Clip(bounds), math.Inf(1)), counts: make([]uint64, len(bounds)+1)}
}

// Observe records one value.
func (h *Histogram) Observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v)
	h.counts[i]++
	h.sum += v
}

// Series are the histogram's lines with these labels: the cumulative
// count of each bucket, then the sum and the count.
func (h *Histogram) Series(labels ...string) []Series {
	var out []Series
	var cumulative uint64
	for i, upper := range h.bounds {
		cumulative += h.counts[i]
		out = append(out, Series{"_bucket", append(slices.Clip(labels), "le", formatFloat(upper)), float64(cumulative)})
	}
	return append(out, Series{"_sum", labels, h.sum}, Series{"_count", labels, float64(cumulative)})
}

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
// snapshot, and the runtime's.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	logger := klog.FromContext(r.Context())
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
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
	if err := WriteMetrics(w, families); err != nil {
		logger.V(5).Info("Cannot write metrics", "err", err)
	}
}

// registrationFamilies are the registrar's own metrics.
func (s *Server) registrationFamilies(st registration.Status) []Family {
	states := make([]Series, 0, len(registration.States))
	for _, state := range registration.States {
		states = append(states, sample(oneIf(st.State == state), "state", string(state)))
	}
	publications := make([]Series, 0, len(publicationReasons))
	for _, reason := range publicationReasons {
		publications = append(publications, sample(float64(st.Publications[reason]), "reason", reason))
	}
	var lastFailure float64
	if st.LastFailure != nil {
		lastFailure = float64(st.LastFailure.UnixNano()) / 1e9
	}
	out := []Family{
		family("csi_node_driver_registrar_registered", "1 when kubelet has accepted the driver through the current registration socket, 0 otherwise.",
			sample(oneIf(st.State == registration.Registered))),
		family("csi_node_driver_registrar_state", "The registration's state: 1 for the current one.", states...),
		family("csi_node_driver_registrar_kubelet_rpcs_total", "Calls by kubelet on the registration socket, by method and result.",
			sample(float64(st.KubeletCalls.GetInfo), "method", "GetInfo", "result", "ok"),
			sample(float64(st.KubeletCalls.NotifyRegistered), "method", "NotifyRegistrationStatus", "result", "registered"),
			sample(float64(st.KubeletCalls.NotifyRejected), "method", "NotifyRegistrationStatus", "result", "rejected")),
		family("csi_node_driver_registrar_socket_publications_total", "Registration sockets published, by reason.", publications...),
		family("csi_node_driver_registrar_registration_failures_total", "Rejections of the driver by kubelet.", sample(float64(st.RegistrationFailures))),
		family("csi_node_driver_registrar_last_registration_failure_timestamp_seconds", "Time of kubelet's last rejection of the driver, in seconds since the epoch; 0 if none.",
			sample(lastFailure)),
		family("csi_node_driver_registrar_driver_reachable", "1 while the CSI driver's socket is there and its driver answered, 0 otherwise.",
			sample(oneIf(st.DriverReachable))),
		family("csi_node_driver_registrar_build_info", "Always 1: the registrar's version, the commit and Go release it was built from, and the driver it registers.",
			sample(1, "version", s.opts.Version, "revision", s.revision, "goversion", runtime.Version(), "driver_name", st.DriverName)),
	}

	s.callsMu.Lock()
	defer s.callsMu.Unlock()
	out = append(out, Family{"csi_node_driver_registrar_driver_get_plugin_info_duration_seconds", "Duration of GetPluginInfo calls to the CSI driver, failed ones included.",
		"histogram", s.pluginInfo.Series()})
	if len(s.pluginInfoErrors) > 0 {
		var errors []Series
		for _, code := range slices.Sorted(maps.Keys(s.pluginInfoErrors)) {
			errors = append(errors, sample(float64(s.pluginInfoErrors[code]), "code", code))
		}
		out = append(out, family("csi_node_driver_registrar_driver_get_plugin_info_errors_total", "Failed GetPluginInfo calls to the CSI driver, by gRPC code.", errors...))
	}
	return out
}

// nodeGateFamilies are the node gate's metrics, with --remove-node-taint
// or --node-condition.
func nodeGateFamilies(st *nodegate.Status) []Family {
	if st == nil {
		return nil
	}
	out := []Family{family("csi_node_driver_registrar_node_update_pending",
		"1 while the Node does not show yet what the registrar knows of the driver's registration (its startup taints, its condition), 0 otherwise.",
		sample(oneIf(st.Pending)))}
	var requests []Series
	for _, request := range []string{nodegate.RequestGetNode, nodegate.RequestRemoveTaints, nodegate.RequestSetCondition} {
		for _, code := range nodegate.Codes(st.Requests[request]) {
			requests = append(requests, sample(float64(st.Requests[request][code]), "request", request, "code", code))
		}
	}
	if len(requests) > 0 {
		out = append(out, family("csi_node_driver_registrar_node_api_requests_total",
			"Requests to the API server about this node, by request (get-node, remove-taints, set-condition) and HTTP status code (error: no answer).",
			requests...))
	}
	return out
}
