package driverhealth

import (
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// OperationsMetric is the histogram of CSI calls that every CSI sidecar
// (livenessprobe included) serves through csi-lib-utils' metrics manager.
// The same manager keeps it here, so that dashboards written for the
// sidecars read the probes here.
const OperationsMetric = "csi_sidecar_operations_seconds"

// newMetricsManager is csi-lib-utils' manager for the sidecars, without
// its process_start_time_seconds: /metrics serves client_golang's, whose
// help text differs, and two families of one name with two help texts
// fail the gathering.
func newMetricsManager() metrics.CSIMetricsManager {
	return metrics.NewCSIMetricsManagerWithOptions("", metrics.WithProcessStartTime(false))
}

// observe records one probe of the driver named driver; "" is
// csi-lib-utils' "unknown-driver".
func (p *Prober) observe(driver string, err error, d time.Duration) {
	// The manager's driver name is a plain field: it is set and read
	// under p.mu, as probes may run at once.
	p.mu.Lock()
	defer p.mu.Unlock()
	p.metrics.SetDriverName(driver)
	p.metrics.RecordMetrics(csi.Identity_Probe_FullMethodName, err, d)
}

// StatusSection: the liveness probe adds no section to /status.
func (p *Prober) StatusSection() (string, any) { return "", nil }

// Metrics gathers the histogram for /metrics: no family before the first
// probe.
func (p *Prober) Metrics() prometheus.Gatherer {
	return p.metrics.GetRegistry()
}
