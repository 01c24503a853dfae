// Package driverhealth answers the CSI driver container's liveness probe as
// kubernetes-csi/livenessprobe does, so that a DaemonSet needs no livenessprobe
// sidecar. Unlike livenessprobe it keeps one gRPC connection, dialled again
// when the driver's socket is replaced. It shares nothing with the
// registration (docs/probes-and-metrics.md).
package driverhealth

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/driver"
)

// DefaultTimeout is livenessprobe's --probe-timeout default.
const DefaultTimeout = 3 * time.Second

// ErrNotReady is a probe's outcome for ready false; its text is livenessprobe's.
var ErrNotReady = errors.New("driver responded but is not ready")

// Prober calls the driver's Identity.Probe over a kept connection.
type Prober struct {
	path    string
	timeout time.Duration
	clock   clock.WithDelayedExecution

	mu         sync.Mutex
	conn       *grpc.ClientConn // nil until the first probe or after a redial
	driverName string
	metrics    metrics.CSIMetricsManager

	// lastOutcome is the last probe's error text, "" for none, nil before
	// the first: only changes are logged at level 0.
	lastOutcome atomic.Pointer[string]
}

// New probes the driver on the Unix socket at path within timeout, which
// must be positive (--probe-timeout is checked so); clk times the probes
// and the waits.
func New(path string, timeout time.Duration, clk clock.WithDelayedExecution) *Prober {
	// No process_start_time_seconds: client_golang's has another help
	// text, and the two would fail the gathering.
	manager := metrics.NewCSIMetricsManagerWithOptions("", metrics.WithProcessStartTime(false))
	return &Prober{path: path, timeout: timeout, clock: clk, metrics: manager}
}

// DriverChanged makes the next probe dial afresh, so that a kept connection
// to a replaced socket does not answer for the new driver. A driver gone
// leaves its name for the metrics: the next one on the socket is usually
// the same.
func (p *Prober) DriverChanged(e driver.Event) {
	p.mu.Lock()
	if e.Reachable {
		p.driverName = e.Name
	}
	old := p.conn
	p.conn = nil
	p.mu.Unlock()
	if old != nil {
		// Probes still using it end within the timeout.
		p.clock.AfterFunc(p.timeout, func() { _ = old.Close() })
	}
}

// Close closes the connection.
func (p *Prober) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return nil
	}
	err := p.conn.Close()
	p.conn = nil
	return err
}

// client returns the kept connection. One in TransientFailure retries now,
// not after its backoff, so that a driver back on its socket is reached.
func (p *Prober) client() (*grpc.ClientConn, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		// As csi-lib-utils' connections: retried every second at most,
		// never idle-closed.
		retry := backoff.DefaultConfig
		retry.MaxDelay = time.Second
		conn, err := unixgrpc.NewClient(p.path,
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: retry}),
			grpc.WithIdleTimeout(0),
			grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
		if err != nil {
			return nil, p.driverName, err
		}
		p.conn = conn
	} else if p.conn.GetState() == connectivity.TransientFailure {
		p.conn.ResetConnectBackoff()
	}
	return p.conn, p.driverName, nil
}

// Probe calls Identity.Probe once within the timeout: nil when ready or
// unsaid, ErrNotReady, or the call's error. It waits for the connection as
// livenessprobe waits for its dial.
func (p *Prober) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	conn, name, err := p.client()
	if err != nil {
		return err
	}
	start := p.clock.Now()
	ready, err := rpc.Probe(ctx, conn)
	p.observe(name, err, p.clock.Since(start))
	if err == nil && !ready {
		return ErrNotReady
	}
	return err
}

// OperationsMetric is every CSI sidecar's histogram of CSI calls, kept by
// the same csi-lib-utils manager so that the sidecars' dashboards read it.
const OperationsMetric = "csi_sidecar_operations_seconds"

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
