package integration

import (
	"debug/buildinfo"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// checkRegisteredStatus checks /status after one GetInfo and kubelet's
// confirmation on the socket published at start.
func checkRegisteredStatus(t *testing.T, st map[string]any, name, socketPath string, started time.Time) {
	t.Helper()
	want := map[string]any{
		"version":         registrarVersion,
		"driverName":      name,
		"driverReachable": true,
		"endpoint":        "/var/lib/kubelet/plugins/test/csi.sock",
		"socketPath":      socketPath,
		"state":           "registered",
		"ready":           true,
	}
	for key, value := range want {
		if st[key] != value {
			t.Errorf("/status %s = %v, want %v", key, st[key], value)
		}
	}
	counts := map[string]map[string]any{
		"kubeletCalls":       {"getInfo": 1.0, "notifyRegistered": 1.0, "notifyRejected": 0.0},
		"socketPublications": {"start": 1.0},
	}
	for key, wantCounts := range counts {
		got, _ := st[key].(map[string]any)
		for k, v := range wantCounts {
			if got[k] != v {
				t.Errorf("/status %s = %v, want %s %v", key, st[key], k, v)
			}
		}
	}
	for _, key := range []string{"lastGetInfoTime", "lastNotifyTime", "lastPublishTime"} {
		text, _ := st[key].(string)
		at, err := time.Parse(time.RFC3339Nano, text)
		if err != nil || at.Before(started) || at.After(time.Now()) {
			t.Errorf("/status %s = %q, want a time since the test started (%s)", key, text, started.Format(time.RFC3339Nano))
		}
	}
}

// checkRegisteredMetrics checks /metrics after the same calls as
// checkRegisteredStatus: the registrar's counters and gauges, and the
// process figures it reads from /proc.
func checkRegisteredMetrics(t *testing.T, families map[string]*dto.MetricFamily, name string, started time.Time) {
	t.Helper()
	revision, goVersion := binaryBuildInfo(t, registrarBin)
	samples := []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{"csi_node_driver_registrar_registered", nil, 1},
		{"csi_node_driver_registrar_state", map[string]string{"state": "registered"}, 1},
		{"csi_node_driver_registrar_state", map[string]string{"state": "waiting-for-kubelet"}, 0},
		{"csi_node_driver_registrar_kubelet_rpcs_total", map[string]string{"method": "GetInfo", "result": "ok"}, 1},
		{"csi_node_driver_registrar_kubelet_rpcs_total", map[string]string{"method": "NotifyRegistrationStatus", "result": "registered"}, 1},
		{"csi_node_driver_registrar_socket_publications_total", map[string]string{"reason": "start"}, 1},
		{"csi_node_driver_registrar_registration_failures_total", nil, 0},
		{"csi_node_driver_registrar_driver_reachable", nil, 1},
		{"csi_node_driver_registrar_build_info", map[string]string{"version": registrarVersion, "revision": revision, "goversion": goVersion, "driver_name": name}, 1},
	}
	for _, s := range samples {
		got, err := sampleValue(families, s.family, s.labels)
		if err != nil {
			t.Error(err)
		} else if got != s.want {
			t.Errorf("%s%v = %v, want %v", s.family, s.labels, got, s.want)
		}
	}
	if h := families["csi_node_driver_registrar_driver_get_plugin_info_duration_seconds"]; h == nil || len(h.Metric) != 1 || h.Metric[0].GetHistogram().GetSampleCount() != 1 {
		t.Errorf("csi_node_driver_registrar_driver_get_plugin_info_duration_seconds: want one GetPluginInfo call, got %v", h)
	}
	// From /proc/stat and /proc/self/stat: whole seconds of boot time plus
	// ticks since boot, so allow a few seconds either side.
	if start, err := sampleValue(families, "process_start_time_seconds", nil); err != nil {
		t.Error(err)
	} else if at := time.Unix(0, int64(start*1e9)); at.Before(started.Add(-3*time.Second)) || at.After(time.Now().Add(3*time.Second)) {
		t.Errorf("process_start_time_seconds = %v (%s), want about when the registrar started, after %s", start, at.Format(time.RFC3339), started.Format(time.RFC3339))
	}
	if fds, err := sampleValue(families, "process_open_fds", nil); err != nil || fds < 3 {
		t.Errorf("process_open_fds = %v (%v), want at least 3", fds, err)
	}
}

// sampleValue returns the value of the sample of family with labels.
// binaryBuildInfo reads from a Go binary the commit it was built from
// ("unknown" where the go command stamped none) and the Go release.
func binaryBuildInfo(t *testing.T, bin string) (revision, goVersion string) {
	t.Helper()
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	revision = "unknown"
	for _, setting := range info.Settings {
		if setting.Key == "vcs.revision" && setting.Value != "" {
			revision = setting.Value
		}
	}
	return revision, info.GoVersion
}

func sampleValue(families map[string]*dto.MetricFamily, family string, labels map[string]string) (float64, error) {
	f := families[family]
	if f == nil {
		return 0, fmt.Errorf("/metrics has no %s", family)
	}
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		if !maps.Equal(got, labels) {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), nil
		case m.Counter != nil:
			return m.Counter.GetValue(), nil
		}
		return 0, fmt.Errorf("%s%v is neither a gauge nor a counter", family, labels)
	}
	return 0, fmt.Errorf("/metrics has no %s sample with labels %v", family, labels)
}

// metrics reads and parses the registrar's /metrics.
func (n *node) metrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(n.httpAddr, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d %q", code, body)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics is not in the Prometheus text format: %v\n%s", err, body)
	}
	return families
}
