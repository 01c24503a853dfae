package healthz

import (
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// publicationReasons are exported before they first happen, so that
// rate() and increase() see the first one.
var publicationReasons = []string{
	registration.ReasonStart, registration.ReasonDeleted, registration.ReasonVacated,
	registration.ReasonStale, registration.ReasonRetry, registration.ReasonRenamed, registration.ReasonHandover,
	registration.ReasonCSINodeLost,
}

// pluginInfoBuckets reach the edge of a generous --timeout.
var pluginInfoBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// vcsRevision is "unknown" where the go command stamped none (go test, a
// source archive, -buildvcs=false).
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

func runtimeCollectors() []prometheus.Collector {
	return []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
}

// metricsHandler serves the registrar's families and the features'; the
// others when one cannot be gathered.
func (s *Server) metricsHandler() http.Handler {
	registry := prometheus.NewRegistry()
	registry.MustRegister(runtimeCollectors()...)
	registry.MustRegister(s.pluginInfo, s.pluginInfoErrors, prometheus.CollectorFunc(s.collectRegistration))
	gatherers := prometheus.Gatherers{registry}
	for _, f := range s.opts.Features {
		gatherers = append(gatherers, f.Metrics())
	}
	return promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{ErrorLog: gatherErrorLog{}, ErrorHandling: promhttp.ContinueOnError})
}

// gatherErrorLog logs at V(4): a figure that cannot be read fails again at
// every scrape.
type gatherErrorLog struct{}

func (gatherErrorLog) Println(v ...any) {
	klog.Background().V(4).Info("Cannot serve every metric", "err", fmt.Sprint(v...))
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	registeredDesc   = desc("csi_node_driver_registrar_registered", "1 when kubelet has accepted the driver through the current registration socket, 0 otherwise.")
	stateDesc        = desc("csi_node_driver_registrar_state", "The registration's state: 1 for the current one.", "state")
	kubeletRPCsDesc  = desc("csi_node_driver_registrar_kubelet_rpcs_total", "Calls by kubelet on the registration socket, by method and result.", "method", "result")
	publicationsDesc = desc("csi_node_driver_registrar_socket_publications_total", "Registration sockets published, by reason.", "reason")
	failuresDesc     = desc("csi_node_driver_registrar_registration_failures_total", "Rejections of the driver by kubelet.")
	lastFailureDesc  = desc("csi_node_driver_registrar_last_registration_failure_timestamp_seconds", "Time of kubelet's last rejection of the driver, in seconds since the epoch; 0 if none.")
	reachableDesc    = desc("csi_node_driver_registrar_driver_reachable", "1 while the CSI driver's socket is there and its driver answered, 0 otherwise.")
	buildInfoDesc    = desc("csi_node_driver_registrar_build_info", "Always 1: the registrar's version, the commit and Go release it was built from, and the driver it registers.",
		"version", "revision", "goversion", "driver_name")
)

func oneIf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectRegistration reads the status at each scrape, so that the
// registration stays the only owner of what it reports.
func (s *Server) collectRegistration(ch chan<- prometheus.Metric) {
	st := s.registration.Status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(registeredDesc, oneIf(st.State == registration.Registered))
	for _, state := range registration.States {
		gauge(stateDesc, oneIf(st.State == state), string(state))
	}
	counter(kubeletRPCsDesc, st.KubeletCalls.GetInfo, "GetInfo", "ok")
	counter(kubeletRPCsDesc, st.KubeletCalls.NotifyRegistered, "NotifyRegistrationStatus", "registered")
	counter(kubeletRPCsDesc, st.KubeletCalls.NotifyRejected, "NotifyRegistrationStatus", "rejected")
	for _, reason := range publicationReasons {
		counter(publicationsDesc, st.Publications[reason], reason)
	}
	counter(failuresDesc, st.RegistrationFailures)
	var failedAt float64
	if st.LastFailure != nil {
		failedAt = float64(st.LastFailure.UnixNano()) / 1e9
	}
	gauge(lastFailureDesc, failedAt)
	gauge(reachableDesc, oneIf(st.DriverReachable))
	gauge(buildInfoDesc, 1, s.opts.Version, s.revision, runtime.Version(), st.DriverName)
}
