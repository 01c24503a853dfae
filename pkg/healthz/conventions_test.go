package healthz

import (
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// clientGolangFamilies gathers client_golang's default Go collector and
// its process collector, as any exporter built on client_golang serves
// them. Only this test links client_golang: the registrar does not.
func clientGolangFamilies(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{ReportErrors: true}))
	gathered, err := registry.Gather()
	if err != nil {
		t.Fatalf("client_golang's collectors: %v", err)
	}
	families := map[string]*dto.MetricFamily{}
	for _, f := range gathered {
		families[f.GetName()] = f
	}
	return families
}

// scrapeLoopback GETs /metrics over loopback HTTP and parses it with
// Prometheus' own text parser.
func scrapeLoopback(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	addr, _ := runLoopback(t)
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d %q", resp.StatusCode, body)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("/metrics is not in the Prometheus text format: %v\n%s", err, body)
	}
	return families
}

// labels are the label pairs of a family's samples, as name=value
// strings per sample, except the values that change with time.
func labels(f *dto.MetricFamily) [][]string {
	var out [][]string
	for _, m := range f.Metric {
		var pairs []string
		for _, l := range m.Label {
			pairs = append(pairs, l.GetName()+"="+l.GetValue())
		}
		if m.Summary != nil {
			for _, q := range m.Summary.Quantile {
				pairs = append(pairs, "quantile="+strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64))
			}
		}
		out = append(out, pairs)
	}
	return out
}

// TestRuntimeFamiliesAreClientGolangs checks that /metrics serves every
// go_* and process_* family client_golang's default collectors serve, with
// the same name, type, help text and labels, and nothing else under those
// prefixes; then that the values are plausible, and equal where they do not
// change with time.
func TestRuntimeFamiliesAreClientGolangs(t *testing.T) {
	ours := scrapeLoopback(t)
	theirs := clientGolangFamilies(t)

	for name, want := range theirs {
		got, ok := ours[name]
		if !ok {
			// On Windows the registrar serves only the process
			// collector's CPU and start times.
			if runtime.GOOS == "linux" || !strings.HasPrefix(name, "process_") {
				t.Errorf("/metrics has no %s (%s)", name, want.GetHelp())
			}
			continue
		}
		if got.GetType() != want.GetType() {
			t.Errorf("%s: type %s, client_golang's %s", name, got.GetType(), want.GetType())
		}
		if got.GetHelp() != want.GetHelp() {
			t.Errorf("%s: help %q,\nclient_golang's %q", name, got.GetHelp(), want.GetHelp())
		}
		if g, w := labels(got), labels(want); !slices.EqualFunc(g, w, slices.Equal) {
			t.Errorf("%s: labels %v, client_golang's %v", name, g, w)
		}
	}
	for name := range ours {
		if (strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_")) && theirs[name] == nil {
			t.Errorf("/metrics has %s, which client_golang's collectors do not serve", name)
		}
	}

	// Figures that do not change while the test runs are equal.
	for _, name := range []string{"go_gc_gogc_percent", "go_gc_gomemlimit_bytes", "go_sched_gomaxprocs_threads", "process_max_fds", "process_virtual_memory_max_bytes"} {
		if ours[name] == nil || theirs[name] == nil {
			continue
		}
		if got, want := value(t, ours, name, nil), value(t, theirs, name, nil); got != want {
			t.Errorf("%s = %v, client_golang's %v", name, got, want)
		}
	}
	if got, want := value(t, ours, "go_sched_gomaxprocs_threads", nil), float64(runtime.GOMAXPROCS(0)); got != want {
		t.Errorf("go_sched_gomaxprocs_threads = %v, GOMAXPROCS is %v", got, want)
	}
	gogc := debug.SetGCPercent(-1)
	debug.SetGCPercent(gogc)
	if got := value(t, ours, "go_gc_gogc_percent", nil); got != float64(gogc) {
		t.Errorf("go_gc_gogc_percent = %v, GOGC is %d", got, gogc)
	}

	// The others are plausible.
	positive := []string{"go_goroutines", "go_threads", "go_memstats_sys_bytes", "go_memstats_heap_alloc_bytes", "go_memstats_alloc_bytes_total", "go_memstats_next_gc_bytes"}
	if runtime.GOOS == "linux" {
		positive = append(positive, "process_open_fds", "process_max_fds")
		// qemu's user emulation (make arch-test, which says so in
		// REGISTRAR_EMULATOR) answers /proc/self/stat itself, with 0 for
		// both sizes; the kernel never does.
		if os.Getenv("REGISTRAR_EMULATOR") == "" {
			positive = append(positive, "process_resident_memory_bytes", "process_virtual_memory_bytes")
		}
	}
	for _, name := range positive {
		if v := value(t, ours, name, nil); !(v > 0) {
			t.Errorf("%s = %v, want more than 0", name, v)
		}
	}
	if cpu := value(t, ours, "process_cpu_seconds_total", nil); !(cpu >= 0) {
		t.Errorf("process_cpu_seconds_total = %v", cpu)
	}
	start := value(t, ours, "process_start_time_seconds", nil)
	if want := value(t, theirs, "process_start_time_seconds", nil); math.Abs(start-want) > 1 {
		t.Errorf("process_start_time_seconds = %v, client_golang's %v: more than a second apart", start, want)
	}
	if now := float64(time.Now().UnixNano()) / 1e9; start > now || start < now-time.Hour.Seconds() {
		t.Errorf("process_start_time_seconds = %v, not in the hour before now (%v)", start, now)
	}
}
