package csinode

import "github.com/prometheus/client_golang/prometheus"

// StatusKey is the watcher's section of the registrar's /status.
const StatusKey = "csiNode"

// StatusSection is the watcher's section of /status.
func (w *Watcher) StatusSection() (string, any) { return StatusKey, w.Status() }

// Metrics gathers the watcher's requests to the API server at each scrape,
// from a snapshot, so that the watcher stays the only owner of what it
// reports.
func (w *Watcher) Metrics() prometheus.Gatherer {
	registry := prometheus.NewRegistry()
	registry.MustRegister(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		w.Status().Requests.Collect(ch, apiRequestsDesc)
	}))
	return registry
}

var apiRequestsDesc = prometheus.NewDesc("csi_node_driver_registrar_csinode_api_requests_total",
	"Requests to the API server about this node's CSINode (list, watch) and Node (get), by verb and HTTP status code (error: no answer).", []string{"verb", "code"}, nil)
