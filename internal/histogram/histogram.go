// Package histogram counts observations in fixed buckets and writes them
// as a Prometheus histogram, for the registrar's metrics, which it writes
// without client_golang's registry.
package histogram

import (
	"sort"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// Histogram is one series. It is not safe for concurrent use: its owner
// holds the lock it already takes for its other counts.
type Histogram struct {
	bounds []float64 // upper bounds, ascending; +Inf is implied
	counts []uint64  // per bucket, not cumulative; the last is +Inf
	sum    float64
	count  uint64
}

// New is an empty histogram with these upper bounds, ascending.
func New(bounds []float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// Observe records one value.
func (h *Histogram) Observe(v float64) {
	h.counts[sort.SearchFloat64s(h.bounds, v)]++
	h.sum += v
	h.count++
}

// Proto is the histogram as Prometheus' data model has it: cumulative
// counts per upper bound.
func (h *Histogram) Proto() *dto.Histogram {
	out := &dto.Histogram{SampleCount: proto.Uint64(h.count), SampleSum: proto.Float64(h.sum)}
	var cumulative uint64
	for i, upper := range h.bounds {
		cumulative += h.counts[i]
		out.Bucket = append(out.Bucket, &dto.Bucket{UpperBound: proto.Float64(upper), CumulativeCount: proto.Uint64(cumulative)})
	}
	return out
}
