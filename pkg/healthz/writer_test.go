package healthz

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
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
	parsed, ours := writeAndParse(t, families)
	if len(parsed) != len(families) {
		t.Errorf("%d families read back, want %d:\n%s", len(parsed), len(families), ours)
	}
	var theirs strings.Builder
	for _, name := range slices.Sorted(maps.Keys(parsed)) {
		if _, err := expfmt.MetricFamilyToText(&theirs, parsed[name]); err != nil {
			t.Fatal(err)
		}
	}
	if ours != theirs.String() {
		t.Errorf("WriteMetrics wrote:\n%s\nPrometheus' encoder writes:\n%s", ours, theirs.String())
	}
	if want := `m_seconds_bucket{driver="d",le="0.25"} 2`; !strings.Contains(ours, want+"\n") {
		t.Errorf("no line %q in:\n%s", want, ours)
	}
	if want := `m_seconds_bucket{driver="d",le="+Inf"} 5`; !strings.Contains(ours, want+"\n") {
		t.Errorf("no line %q in:\n%s", want, ours)
	}
}

// writeAndParse writes families with WriteMetrics and reads the text back
// with Prometheus' parser; it fails t where the text is not in the format.
func writeAndParse(t *testing.T, families []Family) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	var text strings.Builder
	if err := WriteMetrics(&text, families); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	parsed, err := parser.TextToMetricFamilies(strings.NewReader(text.String()))
	if err != nil {
		t.Fatalf("not in the Prometheus text format: %v\n%s", err, text.String())
	}
	return parsed, text.String()
}
