package healthz

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/poll"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func notify(t *testing.T, socket string, registered bool, reason string) {
	t.Helper()
	conn, err := grpc.NewClient("unix:"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := registerapi.NewRegistrationClient(conn)
	if _, err := c.GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: registered, Error: reason}); err != nil {
		t.Fatal(err)
	}
}

func TestReadyz(t *testing.T) {
	if code, body := probe(t, New(notRunning(t), Options{}), "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for the CSI driver") {
		t.Errorf("before the registration runs: /readyz = %d %q", code, body)
	}
	srv, _ := startRegistration(t, tempDir(t))
	hz := New(srv, Options{})
	if code, body := probe(t, hz, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for kubelet") {
		t.Errorf("before kubelet's verdict: /readyz = %d %q", code, body)
	}
	notify(t, srv.Status().SocketPath, false, "NodeGetInfo failed")
	poll.Until(t, "the rejection is recorded", func() bool {
		code, _ := probe(t, hz, "/readyz")
		return code != http.StatusServiceUnavailable || srv.Status().RegistrationFailures == 1
	})
	if code, body := probe(t, hz, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "rejected by kubelet: NodeGetInfo failed") {
		t.Errorf("after a rejection: /readyz = %d %q", code, body)
	}
	notify(t, srv.Status().SocketPath, true, "")
	poll.Until(t, "ready", func() bool { code, _ := probe(t, hz, "/readyz"); return code == http.StatusOK })
	if code, body := probe(t, hz, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %q", code, body)
	}
}

func TestStatus(t *testing.T) {
	srv, _ := startRegistration(t, tempDir(t))
	hz := New(srv, Options{Version: "v9.9.9"})
	notify(t, srv.Status().SocketPath, true, "")
	poll.Until(t, "registered", func() bool { return srv.Status().Ready })

	code, body := probe(t, hz, "/status")
	if code != http.StatusOK {
		t.Fatalf("/status = %d", code)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("/status is not JSON: %v\n%s", err, body)
	}
	want := map[string]any{
		"version":         "v9.9.9",
		"driverName":      testDriver,
		"endpoint":        "/csi.sock",
		"state":           "registered",
		"ready":           true,
		"driverReachable": true,
	}
	for key, value := range want {
		if doc[key] != value {
			t.Errorf("/status %s = %v, want %v", key, doc[key], value)
		}
	}
	for _, key := range []string{"socketPath", "lastKubeletVerdict", "lastGetInfoTime", "lastNotifyTime", "socketPublications", "kubeletCalls"} {
		if _, ok := doc[key]; !ok {
			t.Errorf("/status has no %s:\n%s", key, body)
		}
	}
}

// scrape parses /metrics with Prometheus' own text parser.
func scrape(t *testing.T, hz *Server) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := probe(t, hz, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics is not in the Prometheus text format: %v\n%s", err, body)
	}
	return families
}

// value finds the sample of a family whose labels include want.
func value(t *testing.T, families map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	family, ok := families[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range family.Metric {
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			return m.Untyped.GetValue()
		}
	}
	t.Fatalf("no sample of %s with labels %v", name, want)
	return 0
}

func TestMetrics(t *testing.T) {
	families := scrape(t, New(notRunning(t), Options{Version: "v9.9.9"}))
	if got := value(t, families, "csi_node_driver_registrar_registered", nil); got != 0 {
		t.Errorf("registered before the registration runs = %v", got)
	}

	srv, _ := startRegistration(t, tempDir(t))
	hz := New(srv, Options{Version: "v9.9.9"})
	hz.ObservePluginInfo(3*time.Millisecond, nil)
	hz.ObservePluginInfo(time.Second, status.Error(codes.Unavailable, "not yet"))
	notify(t, srv.Status().SocketPath, false, "no")
	poll.Until(t, "the rejection is recorded", func() bool { return srv.Status().RegistrationFailures == 1 })
	notify(t, srv.Status().SocketPath, true, "")
	poll.Until(t, "registered", func() bool { return srv.Status().Ready })

	families = scrape(t, hz)
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"csi_node_driver_registrar_registered", nil, 1},
		{"csi_node_driver_registrar_state", map[string]string{"state": "registered"}, 1},
		{"csi_node_driver_registrar_state", map[string]string{"state": "rejected"}, 0},
		{"csi_node_driver_registrar_kubelet_rpcs_total", map[string]string{"method": "GetInfo", "result": "ok"}, 2},
		{"csi_node_driver_registrar_kubelet_rpcs_total", map[string]string{"method": "NotifyRegistrationStatus", "result": "registered"}, 1},
		{"csi_node_driver_registrar_kubelet_rpcs_total", map[string]string{"method": "NotifyRegistrationStatus", "result": "rejected"}, 1},
		{"csi_node_driver_registrar_socket_publications_total", map[string]string{"reason": "start"}, 1},
		{"csi_node_driver_registrar_socket_publications_total", map[string]string{"reason": "deleted"}, 0},
		{"csi_node_driver_registrar_registration_failures_total", nil, 1},
		{"csi_node_driver_registrar_driver_reachable", nil, 1},
		{"csi_node_driver_registrar_driver_get_plugin_info_duration_seconds", nil, 2},
		{"csi_node_driver_registrar_driver_get_plugin_info_errors_total", map[string]string{"code": "Unavailable"}, 1},
		// go test stamps no VCS information into a test binary.
		{"csi_node_driver_registrar_build_info", map[string]string{"version": "v9.9.9", "revision": "unknown", "goversion": runtime.Version(), "driver_name": testDriver}, 1},
	}
	for _, c := range checks {
		if got := value(t, families, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if got := value(t, families, "csi_node_driver_registrar_last_registration_failure_timestamp_seconds", nil); got < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last failure timestamp = %v, want about now", got)
	}
	for name, family := range families {
		// go_* and process_* are the conventional families that any Go
		// exporter serves: conventions_test.go checks them.
		if !strings.HasPrefix(name, "csi_node_driver_registrar_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("metric %s is outside the registrar's namespace", name)
		}
		if family.GetType() == dto.MetricType_COUNTER && !strings.HasSuffix(name, "_total") {
			t.Errorf("counter %s does not end in _total", name)
		}
	}
}

// metricsOnly is a feature with metrics and no /status section.
type metricsOnly struct{ prometheus.Gatherer }

func (metricsOnly) StatusSection() (string, any)   { return "", nil }
func (f metricsOnly) Metrics() prometheus.Gatherer { return f.Gatherer }

// TestMetricsGatheredFromFeatures serves what the features gather beside
// the registrar's families, and what can be gathered when a part of it
// fails.
func TestMetricsGatheredFromFeatures(t *testing.T) {
	more := prometheus.NewRegistry()
	probes := prometheus.NewCounter(prometheus.CounterOpts{Name: "csi_sidecar_test_probes_total", Help: "Probes."})
	more.MustRegister(probes)
	probes.Add(3)
	failing := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		return nil, errors.New("cannot read /proc/self/stat")
	})
	families := scrape(t, New(notRunning(t), Options{Version: "v9.9.9", Features: []Feature{metricsOnly{more}, metricsOnly{failing}}}))
	if got := value(t, families, "csi_sidecar_test_probes_total", nil); got != 3 {
		t.Errorf("csi_sidecar_test_probes_total = %v, want 3", got)
	}
	if got := value(t, families, "csi_node_driver_registrar_build_info", map[string]string{"version": "v9.9.9"}); got != 1 {
		t.Errorf("csi_node_driver_registrar_build_info = %v, want 1", got)
	}
}
