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

// The histogram that csi-lib-utils' metrics manager keeps for every CSI
// sidecar (livenessprobe included), with its name, help text (with the
// stability prefix k8s.io/component-base adds), labels, buckets and label
// values, so that dashboards written for the sidecars read the probes here.
const (
	OperationsMetric = "csi_sidecar_operations_seconds"
	operationsHelp   = "[ALPHA] Container Storage Interface operation duration with gRPC error code status total"

	labelDriver = "driver_name"
	labelMethod = "method_name"
	labelCode   = "grpc_status_code"
	// unknownDriver is the driver_name before the driver's name is known.
	unknownDriver = "unknown-driver"
	// nonGRPCCode is the code of an error that is not a gRPC status.
	nonGRPCCode = "unknown-non-grpc"
)

var operationsBuckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600}

// series is one label set of the histogram.
type series struct{ driver, method, code string }

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
	key := series{driver, method, code}
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.series[key]
	if h == nil {
		h = histogram.New(operationsBuckets)
		o.series[key] = h
	}
	h.Observe(d.Seconds())
}

// Families is the histogram for /metrics: no family before the first
// probe, as csi-lib-utils' registry writes none.
func (p *Prober) Families() []*dto.MetricFamily {
	return p.metrics.families()
}

func (o *operations) families() []*dto.MetricFamily {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.series) == 0 {
		return nil
	}
	keys := make([]series, 0, len(o.series))
	for k := range o.series {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.driver != b.driver {
			return a.driver < b.driver
		}
		if a.method != b.method {
			return a.method < b.method
		}
		return a.code < b.code
	})
	metrics := make([]*dto.Metric, 0, len(keys))
	for _, k := range keys {
		metrics = append(metrics, &dto.Metric{
			Label: []*dto.LabelPair{
				{Name: proto.String(labelDriver), Value: proto.String(k.driver)},
				{Name: proto.String(labelCode), Value: proto.String(k.code)},
				{Name: proto.String(labelMethod), Value: proto.String(k.method)},
			},
			Histogram: o.series[k].Proto(),
		})
	}
	return []*dto.MetricFamily{{
		Name:   proto.String(OperationsMetric),
		Help:   proto.String(operationsHelp),
		Type:   dto.MetricType_HISTOGRAM.Enum(),
		Metric: metrics,
	}}
}
