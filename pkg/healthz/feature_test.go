package healthz

import (
	"encoding/json"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// testFeature reports a fixed section and one gauge.
type testFeature struct {
	key     string
	section any
	gauge   float64
}

func (f testFeature) StatusSection() (string, any) { return f.key, f.section }

func (f testFeature) Metrics() prometheus.Gatherer {
	registry := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_feature_" + f.key, Help: "A test feature's figure."})
	g.Set(f.gauge)
	registry.MustRegister(g)
	return registry
}

// A feature's section is in /status under its key, after the
// registration's status, and its metrics are in /metrics; without the
// feature, neither is.
func TestFeaturesInStatusAndMetrics(t *testing.T) {
	gate := testFeature{key: "nodeGate", section: map[string]any{"node": "n1", "pending": true}, gauge: 1}
	families := scrape(t, New(notRunning(t), Options{Version: "v9.9.9"}))
	if _, ok := families["test_feature_nodeGate"]; ok {
		t.Error("a feature's metric served without the feature")
	}
	if _, body := probe(t, New(notRunning(t), Options{Version: "v9.9.9"}), "/status"); containsKey(t, body, "nodeGate") {
		t.Errorf("/status has a feature's section without the feature:\n%s", body)
	}

	hz := New(notRunning(t), Options{Version: "v9.9.9", Features: []Feature{gate, testFeature{key: "second", section: 2, gauge: 2}}})
	families = scrape(t, hz)
	if got := value(t, families, "test_feature_nodeGate", nil); got != 1 {
		t.Errorf("test_feature_nodeGate = %v, want 1", got)
	}
	if got := value(t, families, "test_feature_second", nil); got != 2 {
		t.Errorf("test_feature_second = %v, want 2", got)
	}
	code, body := probe(t, hz, "/status")
	var doc struct {
		Version  string `json:"version"`
		State    string `json:"state"`
		NodeGate *struct {
			Node    string `json:"node"`
			Pending bool   `json:"pending"`
		} `json:"nodeGate"`
		Second int `json:"second"`
	}
	if err := json.Unmarshal([]byte(body), &doc); code != 200 || err != nil {
		t.Fatalf("/status = %d %v:\n%s", code, err, body)
	}
	if doc.Version != "v9.9.9" || doc.State != "waiting-for-driver" || doc.NodeGate == nil || doc.NodeGate.Node != "n1" || !doc.NodeGate.Pending || doc.Second != 2 {
		t.Errorf("/status with two features:\n%s", body)
	}
}

func containsKey(t *testing.T, body, key string) bool {
	t.Helper()
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	_, ok := doc[key]
	return ok
}
