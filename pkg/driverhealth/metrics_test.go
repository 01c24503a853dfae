package driverhealth_test

import (
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"

	"github.com/csi-registrar/node-driver-registrar/pkg/driverhealth"
)

// metricsText is the Prober's families in Prometheus' text format.
func metricsText(t *testing.T, p *driverhealth.Prober) string {
	t.Helper()
	var b strings.Builder
	for _, f := range p.Families() {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}
