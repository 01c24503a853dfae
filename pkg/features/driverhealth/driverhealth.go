// Package driverhealth answers the CSI driver container's liveness probe in
// the registrar, so that a DaemonSet needs no livenessprobe sidecar: GET
// /healthz on its own listener (--driver-health-endpoint) calls the
// driver's Identity.Probe within a timeout and answers as
// kubernetes-csi/livenessprobe does: 200 "ok" when the driver is ready or
// does not say, 500 with the reason otherwise. The calls are counted in
// csi-lib-utils' csi_sidecar_operations_seconds histogram, kept by its
// metrics manager (metrics.go).
//
// Unlike livenessprobe, which dials the driver for every probe, it keeps one
// gRPC connection, dialled again when the driver's socket is replaced (the
// registrar follows it, see pkg/driver) and tried again at once when a
// probe finds it failed. It shares nothing with the registration: a driver
// whose probe fails does not change the registrar's own /healthz or its
// registration, and the reverse.
package driverhealth

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
)

// DefaultTimeout is livenessprobe's --probe-timeout default.
const DefaultTimeout = 3 * time.Second

// ErrNotReady is a probe's outcome when the driver answered Probe with
// ready false. Its text is livenessprobe's answer.
var ErrNotReady = errors.New("driver responded but is not ready")

// Prober calls the driver's Identity.Probe over a kept connection.
type Prober struct {
	path    string
	timeout time.Duration

	mu   sync.Mutex
	conn *grpc.ClientConn // nil until the first probe or after a redial
	// driverName labels the metrics; "" until the driver is found.
	driverName string
	// lastOutcome is the last probe's error text as logged, "" for none,
	// nil before the first: only changes are logged at level 0.
	lastOutcome *string
	// metrics keeps the probes' histogram.
	metrics metrics.CSIMetricsManager
}

// New probes the driver listening on the Unix socket at path; each probe
// takes at most timeout (DefaultTimeout when not positive).
func New(path string, timeout time.Duration) *Prober {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Prober{path: path, timeout: timeout, metrics: newMetricsManager()}
}

// DriverFound tells the Prober that a driver named name answers on a
// socket that may be new: the next probe dials it afresh, so that a kept
// connection to a driver whose socket was replaced does not keep answering
// for it. The name labels the metrics from then on.
func (p *Prober) DriverFound(name string) {
	p.mu.Lock()
	p.driverName = name
	p.mu.Unlock()
	p.DriverGone()
}

// DriverGone tells the Prober that the driver's socket was removed, or its
// driver stopped answering; the name stays for the metrics, as the next
// driver on the socket is usually the same.
func (p *Prober) DriverGone() {
	p.mu.Lock()
	old := p.conn
	p.conn = nil
	p.mu.Unlock()
	if old != nil {
		// Closed once probes that may still use it are over: none lasts
		// longer than the timeout.
		time.AfterFunc(p.timeout, func() { _ = old.Close() })
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

// client returns the kept connection, made on first use. One that failed
// to connect is told to try again now rather than after its backoff, so
// that a driver back on its socket is reached by this probe.
func (p *Prober) client() (*grpc.ClientConn, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		// As csi-lib-utils' connections: tried again every second at most
		// while the driver is away; never closed for being idle.
		retry := backoff.DefaultConfig
		retry.MaxDelay = time.Second
		// A probe waits for the connection, up to its timeout.
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

// Probe calls the driver's Identity.Probe once, within the timeout and
// ctx: nil when the driver is ready (or does not say), ErrNotReady when it
// says it is not, the call's error otherwise (DeadlineExceeded when the
// driver does not answer in time, or cannot be connected to). It waits
// for the connection as livenessprobe waits for its dial: a driver that
// is not there fails at the timeout.
func (p *Prober) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	conn, name, err := p.client()
	if err != nil {
		return err
	}
	start := time.Now()
	ready, err := rpc.Probe(ctx, conn)
	p.observe(name, err, time.Since(start))
	if err == nil && !ready {
		return ErrNotReady
	}
	return err
}
