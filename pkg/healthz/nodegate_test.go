package healthz

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/pkg/nodegate"
)

// fixedGate is a node gate's status as it stands.
type fixedGate nodegate.Status

func (g fixedGate) Status() nodegate.Status { return nodegate.Status(g) }

func TestNodeGateInStatusAndMetrics(t *testing.T) {
	families := scrape(t, New(notRunning(t), Options{Version: "v9.9.9"}))
	if _, ok := families["csi_node_driver_registrar_node_update_pending"]; ok {
		t.Error("csi_node_driver_registrar_node_update_pending served without a node gate")
	}
	hz := New(notRunning(t), Options{Version: "v9.9.9", NodeGate: fixedGate{Node: "n1", Pending: true, LastError: "forbidden: ...", Requests: map[string]map[string]uint64{
		nodegate.RequestGetNode:      {"200": 2, "503": 1},
		nodegate.RequestSetCondition: {"403": 4},
	}}})
	families = scrape(t, hz)
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
		if got := value(t, families, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	rec := httptest.NewRecorder()
	hz.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	var doc struct {
		NodeGate *nodegate.Status `json:"nodeGate"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.NodeGate == nil || doc.NodeGate.Node != "n1" || !doc.NodeGate.Pending || doc.NodeGate.LastError != "forbidden: ..." {
		t.Errorf("/status nodeGate = %+v", doc.NodeGate)
	}
}
