package csinode

import "github.com/prometheus/client_golang/prometheus"

// StatusKey is the watcher's section of the registrar's /status.
const StatusKey = "csiNode"

// StatusSection is the watcher's section of /status.
func (w *Watcher) StatusSection() (string, any) { return StatusKey, w.Status() }

// Metrics gathers the watcher's requests to the API server at each scrape.
func (w *Watcher) Metrics() prometheus.Gatherer {
	registry := prometheus.NewRegistry()
	registry.MustRegister(statusCollector{w.Status})
	return registry
}

var apiRequestsDesc = prometheus.NewDesc("csi_node_driver_registrar_csinode_api_requests_total",
	"Requests to the API server about this node's CSINode (list, watch) and Node (get), by verb and HTTP status code (error: no answer).", []string{"verb", "code"}, nil)

// statusCollector reads the status at each scrape, so that the watcher
// stays the only owner of what it reports.
type statusCollector struct{ status func() Status }

func (c statusCollector) Describe(ch chan<- *prometheus.Desc) { ch <- apiRequestsDesc }

func (c statusCollector) Collect(ch chan<- prometheus.Metric) {
	c.status().Requests.Collect(ch, apiRequestsDesc)
}
