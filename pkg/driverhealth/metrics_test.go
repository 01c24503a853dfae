package driverhealth_test

import (
	"strings"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/pkg/driverhealth"
	"github.com/csi-registrar/node-driver-registrar/pkg/healthz"
)

// metricsText is the Prober's families in Prometheus' text format.
func metricsText(t *testing.T, p *driverhealth.Prober) string {
	t.Helper()
	var b strings.Builder
	if err := healthz.WriteMetrics(&b, p.Families()); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
