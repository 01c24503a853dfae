package driverhealth

import (
	"sort"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/csi-registrar/node-driver-registrar/internal/histogram"
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
		h = histogram.New(operationsBuckets)
		p.series[key] = h
	}
	h.Observe(d.Seconds())
}

// Families is the histogram for /metrics, its series sorted by labels as
// client_golang's registry sorts them: no family before the first probe,
// as csi-lib-utils' registry writes none.
func (p *Prober) Families() []*dto.MetricFamily {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.series) == 0 {
		return nil
	}
	family := &dto.MetricFamily{
		Name: proto.String(OperationsMetric),
		Help: proto.String("[ALPHA] Container Storage Interface operation duration with gRPC error code status total"),
		Type: dto.MetricType_HISTOGRAM.Enum(),
	}
	keys := make([]series, 0, len(p.series))
	for k := range p.series {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return a.driver < b.driver || a.driver == b.driver && a.code < b.code
	})
	for _, k := range keys {
		family.Metric = append(family.Metric, &dto.Metric{
			Label: []*dto.LabelPair{
				{Name: proto.String("driver_name"), Value: proto.String(k.driver)},
				{Name: proto.String("grpc_status_code"), Value: proto.String(k.code)},
				{Name: proto.String("method_name"), Value: proto.String(csi.Identity_Probe_FullMethodName)},
			},
			Histogram: p.series[k].Proto(),
		})
	}
	return []*dto.MetricFamily{family}
}
