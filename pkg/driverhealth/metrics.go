package driverhealth

import (
	"sort"
	"sync"
	"time"

	"github.com/csi-registrar/node-driver-registrar/internal/histogram"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
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

// series is one label set of the histogram, its fields in the labels' order.
type series struct{ driver, code, method string }

// operations is the histogram.
type operations struct {
	mu     sync.Mutex
	series map[series]*histogram.Histogram
}

func newOperations() *operations {
	return &operations{series: map[series]*histogram.Histogram{}}
}

// observe records one call.
func (o *operations) observe(driver, method string, err error, d time.Duration) {
	if driver == "" {
		driver = unknownDriver
	}
	code := nonGRPCCode
	if st, ok := status.FromError(err); ok {
		code = st.Code().String() // "OK" for a nil error
	}
	key := series{driver, code, method}
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.series[key]
	if h == nil {
		h = histogram.New(operationsBuckets)
		o.series[key] = h
	}
	h.Observe(d.Seconds())
}

// Families is the histogram for /metrics, its series sorted by labels as
// client_golang's registry sorts them: no family before the first probe,
// as csi-lib-utils' registry writes none.
func (p *Prober) Families() []*dto.MetricFamily {
	o := p.metrics
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.series) == 0 {
		return nil
	}
	family := &dto.MetricFamily{
		Name: proto.String(OperationsMetric),
		Help: proto.String("[ALPHA] Container Storage Interface operation duration with gRPC error code status total"),
		Type: dto.MetricType_HISTOGRAM.Enum(),
	}
	keys := make([]series, 0, len(o.series))
	for k := range o.series {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return a.driver < b.driver || a.driver == b.driver && (a.code < b.code || a.code == b.code && a.method < b.method)
	})
	for _, k := range keys {
		family.Metric = append(family.Metric, &dto.Metric{
			Label: []*dto.LabelPair{
				{Name: proto.String("driver_name"), Value: proto.String(k.driver)},
				{Name: proto.String("grpc_status_code"), Value: proto.String(k.code)},
				{Name: proto.String("method_name"), Value: proto.String(k.method)},
			},
			Histogram: o.series[k].Proto(),
		})
	}
	return []*dto.MetricFamily{family}
}
