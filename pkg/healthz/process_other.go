//go:build !linux && !windows

package healthz

import dto "github.com/prometheus/client_model/go"

// processFamilies serves no process_* family where the registrar is not
// built for release.
func processFamilies() []*dto.MetricFamily { return nil }
