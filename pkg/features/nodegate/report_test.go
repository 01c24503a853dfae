package nodegate

import (
	"encoding/json"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// The gate reports its status as it stands: its /status section and its
// metrics, read at each request.
func TestGateReportsItsStatus(t *testing.T) {
	g := New(Config{NodeName: "n1"})
	g.st.Pending, g.st.LastError = true, "forbidden: ..."
	g.st.Requests = map[string]map[string]uint64{
		RequestGetNode:      {"200": 2, "503": 1},
		RequestSetCondition: {"403": 4},
	}

	families, err := g.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"csi_node_driver_registrar_node_update_pending", nil, 1},
		{"csi_node_driver_registrar_node_api_requests_total", map[string]string{"request": "get-node", "code": "200"}, 2},
		{"csi_node_driver_registrar_node_api_requests_total", map[string]string{"request": "get-node", "code": "503"}, 1},
		{"csi_node_driver_registrar_node_api_requests_total", map[string]string{"request": "set-condition", "code": "403"}, 4},
	}
	for _, c := range checks {
		if got, ok := sample(families, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (found: %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}

	key, section := g.StatusSection()
	if key != "nodeGate" {
		t.Errorf("/status section %q, want nodeGate", key)
	}
	encoded, err := json.Marshal(section)
	if err != nil {
		t.Fatal(err)
	}
	var st Status
	if err := json.Unmarshal(encoded, &st); err != nil {
		t.Fatal(err)
	}
	if st.Node != "n1" || !st.Pending || st.LastError != "forbidden: ..." {
		t.Errorf("/status nodeGate = %s", encoded)
	}
}

// sample is the value of the family's sample whose labels include want.
func sample(families []*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue next
				}
			}
			if m.Gauge != nil {
				return m.Gauge.GetValue(), true
			}
			return m.Counter.GetValue(), true
		}
	}
	return 0, false
}
