package nodegate

import "github.com/prometheus/client_golang/prometheus"

// StatusKey is the node gate's section of the registrar's /status.
const StatusKey = "nodeGate"

// StatusSection is the gate's section of /status.
func (g *Gate) StatusSection() (string, any) { return StatusKey, g.Status() }

// Metrics gathers the gate's pending update and requests at each scrape,
// from a snapshot, so that the gate stays the only owner of what it reports.
func (g *Gate) Metrics() prometheus.Gatherer {
	registry := prometheus.NewRegistry()
	registry.MustRegister(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		st := g.Status()
		pending := 0.0
		if st.Pending {
			pending = 1
		}
		ch <- prometheus.MustNewConstMetric(updatePendingDesc, prometheus.GaugeValue, pending)
		st.Requests.Collect(ch, apiRequestsDesc)
	}))
	return registry
}

var (
	updatePendingDesc = prometheus.NewDesc("csi_node_driver_registrar_node_update_pending",
		"1 while the Node does not show yet what the registrar knows of the driver's registration (its startup taints, its condition), 0 otherwise.", nil, nil)
	apiRequestsDesc = prometheus.NewDesc("csi_node_driver_registrar_node_api_requests_total",
		"Requests to the API server about this node, by request (get-node, remove-taints, set-condition) and HTTP status code (error: no answer).", []string{"request", "code"}, nil)
)
