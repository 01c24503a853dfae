package driverhealth_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/pkg/driver"
	"github.com/csi-registrar/node-driver-registrar/pkg/features/driverhealth"
)

// metricsText is what the Prober's metrics gather, in Prometheus' text
// format.
func metricsText(t *testing.T, p *driverhealth.Prober) string {
	t.Helper()
	families, err := p.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestMetricsBesideTheProcessCollector gathers the histogram with
// client_golang's process and Go collectors, as the registrar's /metrics
// does: no family twice, so nothing is left out of a scrape. It renames
// the driver while probes run, as the registrar's driver watch may.
func TestMetricsBesideTheProcessCollector(t *testing.T) {
	path := socketPath(t)
	newTestDriver(t, ready(true)).serve(t, path)
	p := driverhealth.New(path, probeTimeout, clock.RealClock{})
	t.Cleanup(func() { _ = p.Close() })
	var probes sync.WaitGroup
	for range 4 {
		probes.Go(func() {
			if err := p.Probe(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	p.DriverChanged(driver.Event{Name: "one.csi.example.com", Reachable: true})
	p.DriverChanged(driver.Event{Name: "two.csi.example.com", Reachable: true})
	probes.Wait()

	runtime := prometheus.NewRegistry()
	runtime.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	families, err := prometheus.Gatherers{runtime, p.Metrics()}.Gather()
	if err != nil {
		t.Fatalf("gathered with the runtime's collectors: %v", err)
	}
	var count uint64
	for _, f := range families {
		if f.GetName() != driverhealth.OperationsMetric {
			continue
		}
		for _, m := range f.GetMetric() {
			count += m.GetHistogram().GetSampleCount()
		}
	}
	if count != 4 {
		t.Errorf("%s counts %d probes, want 4:\n%s", driverhealth.OperationsMetric, count, metricsText(t, p))
	}
}
