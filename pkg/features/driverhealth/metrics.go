package driverhealth

import (
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// OperationsMetric is every CSI sidecar's histogram of CSI calls, kept by
// the same csi-lib-utils manager so that the sidecars' dashboards read it.
const OperationsMetric = "csi_sidecar_operations_seconds"

// newMetricsManager leaves out process_start_time_seconds: client_golang's
// has another help text, and the two would fail the gathering.
func newMetricsManager() metrics.CSIMetricsManager {
	return metrics.NewCSIMetricsManagerWithOptions("", metrics.WithProcessStartTime(false))
}

// observe records one probe. The manager's driver name is a plain field,
// so it is set and read under p.mu.
func (p *Prober) observe(driver string, err error, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.metrics.SetDriverName(driver)
	p.metrics.RecordMetrics(csi.Identity_Probe_FullMethodName, err, d)
}

// StatusSection: the liveness probe adds no section to /status.
func (p *Prober) StatusSection() (string, any) { return "", nil }

// Metrics gathers the histogram: no family before the first probe.
func (p *Prober) Metrics() prometheus.Gatherer {
	return p.metrics.GetRegistry()
}
