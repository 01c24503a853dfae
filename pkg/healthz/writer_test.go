package healthz

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestWriteMetricsAsExpfmt checks that WriteMetrics writes what Prometheus'
// own encoder writes for the same families, byte for byte: its text, read
// by Prometheus' parser and written again by its encoder, is unchanged.
func TestWriteMetricsAsExpfmt(t *testing.T) {
	h := NewHistogram([]float64{0.001, 0.25, 1, 120})
	for _, v := range []float64{0.0005, 0.001, 0.3, 2, 1000} {
		h.Observe(v)
	}
	families := []Family{
		family("z_gauge", `help with a \ and a`+"\nnew line", sample(1.5e-7, "b", `quote " backslash \ new line`+"\n", "a", "1"), sample(math.Inf(1), "b", "2")),
		family("a_total", "A counter.", sample(1234567), sample(math.NaN(), "x", "y")),
		{"m_seconds", "A histogram.", "histogram", h.Series("driver", "d")},
		{"s_seconds", "A summary.", "summary", []Series{sample(0.5, "quantile", "0"), sample(2, "quantile", "1"), {"_sum", nil, 2.5}, {"_count", nil, 2}}},
	}
	var ours strings.Builder
	if err := WriteMetrics(&ours, families); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	parsed, err := parser.TextToMetricFamilies(strings.NewReader(ours.String()))
	if err != nil {
		t.Fatalf("not in the Prometheus text format: %v\n%s", err, ours.String())
	}
	if len(parsed) != len(families) {
		t.Errorf("%d families read back, want %d:\n%s", len(parsed), len(families), ours.String())
	}
	var theirs strings.Builder
	for _, name := range slices.Sorted(maps.Keys(parsed)) {
		if _, err := expfmt.MetricFamilyToText(&theirs, parsed[name]); err != nil {
			t.Fatal(err)
		}
	}
	if ours.String() != theirs.String() {
		t.Errorf("WriteMetrics wrote:\n%s\nPrometheus' encoder writes:\n%s", ours.String(), theirs.String())
	}
	if want := `m_seconds_bucket{driver="d",le="0.25"} 2`; !strings.Contains(ours.String(), want+"\n") {
		t.Errorf("no line %q in:\n%s", want, ours.String())
	}
	if want := `m_seconds_bucket{driver="d",le="+Inf"} 5`; !strings.Contains(ours.String(), want+"\n") {
		t.Errorf("no line %q in:\n%s", want, ours.String())
	}
}
