package driverhealth

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/status"

	"github.com/csi-registrar/node-driver-registrar/pkg/healthz"
)

// OperationsMetric is the histogram that csi-lib-utils' metrics manager
// keeps for every CSI sidecar (livenessprobe included). Its help text
// (with the stability prefix k8s.io/component-base adds), labels, buckets
// and label values are csi-lib-utils' too, so that dashboards written for
// the sidecars read the probes here. client_golang's HistogramVec would
// add 57 KB to the binary.
const OperationsMetric = "csi_sidecar_operations_seconds"

const (
	// unknownDriver is the driver_name before the driver's name is known.
	unknownDriver = "unknown-driver"
	// nonGRPCCode is the code of an error that is not a gRPC status.
	nonGRPCCode = "unknown-non-grpc"
)

var operationsBuckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600}

// series is one label set of the histogram; the method is always Probe.
type series struct{ driver, code string }

// observe records one probe.
func (p *Prober) observe(driver string, err error, d time.Duration) {
	if driver == "" {
		driver = unknownDriver
	}
	code := nonGRPCCode
	if st, ok := status.FromError(err); ok {
		code = st.Code().String() // "OK" for a nil error
	}
	key := series{driver, code}
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.series[key]
	if h == nil {
		h = healthz.NewHistogram(operationsBuckets)
		p.series[key] = h
	}
	h.Observe(d.Seconds())
}

// Families is the histogram for /metrics, its series sorted by labels as
// client_golang's registry sorts them: no family before the first probe,
// as csi-lib-utils' registry writes none.
func (p *Prober) Families() []healthz.Family {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.series) == 0 {
		return nil
	}
	keys := slices.SortedFunc(maps.Keys(p.series), func(a, b series) int {
		return cmp.Or(strings.Compare(a.driver, b.driver), strings.Compare(a.code, b.code))
	})
	family := healthz.Family{
		Name: OperationsMetric,
		Help: "[ALPHA] Container Storage Interface operation duration with gRPC error code status total",
		Type: "histogram",
	}
	for _, k := range keys {
		family.Series = append(family.Series, p.series[k].Series("driver_name", k.driver, "grpc_status_code", k.code, "method_name", csi.Identity_Probe_FullMethodName)...)
	}
	return []healthz.Family{family}
}
