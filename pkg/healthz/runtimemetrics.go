package healthz

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/klog/v2"
)

// newRuntimeRegistry gathers the go_* and process_* families every Go
// exporter serves, from client_golang's own collectors, so that dashboards
// and alerts written for any of them read the registrar too. Left with
// their defaults: the Go collector's families are the long-standing
// go_memstats_* set (read from runtime/metrics, which does not stop the
// world) and the process collector leaves out a figure it cannot read
// rather than failing the scrape. Built at the first scrape: a registrar
// nobody scrapes does not hold them.
func newRuntimeRegistry() *prometheus.Registry {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return registry
}

// runtimeFamilies reads the Go runtime's and the process's figures now.
// Gather returns what it could gather along with an error, so that one
// failing collector leaves the rest of /metrics served.
func (s *Server) runtimeFamilies(ctx context.Context) []*dto.MetricFamily {
	families, err := s.runtime().Gather()
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Cannot read every Go runtime or process metric", "err", err)
	}
	return families
}
