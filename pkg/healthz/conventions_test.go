package healthz

import (
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// runtimeFamilies are the go_* and process_* families /metrics served
// before client_golang's collectors replaced the registrar's own, by type:
// dashboards and alerts read them, so none may go away or change type.
// The process_* ones are those of Linux; on Windows the registrar served
// the CPU and start times only.
var runtimeFamilies = map[string]dto.MetricType{
	"go_gc_duration_seconds":               dto.MetricType_SUMMARY,
	"go_gc_gogc_percent":                   dto.MetricType_GAUGE,
	"go_gc_gomemlimit_bytes":               dto.MetricType_GAUGE,
	"go_goroutines":                        dto.MetricType_GAUGE,
	"go_info":                              dto.MetricType_GAUGE,
	"go_memstats_alloc_bytes":              dto.MetricType_GAUGE,
	"go_memstats_alloc_bytes_total":        dto.MetricType_COUNTER,
	"go_memstats_buck_hash_sys_bytes":      dto.MetricType_GAUGE,
	"go_memstats_frees_total":              dto.MetricType_COUNTER,
	"go_memstats_gc_sys_bytes":             dto.MetricType_GAUGE,
	"go_memstats_heap_alloc_bytes":         dto.MetricType_GAUGE,
	"go_memstats_heap_idle_bytes":          dto.MetricType_GAUGE,
	"go_memstats_heap_inuse_bytes":         dto.MetricType_GAUGE,
	"go_memstats_heap_objects":             dto.MetricType_GAUGE,
	"go_memstats_heap_released_bytes":      dto.MetricType_GAUGE,
	"go_memstats_heap_sys_bytes":           dto.MetricType_GAUGE,
	"go_memstats_last_gc_time_seconds":     dto.MetricType_GAUGE,
	"go_memstats_mallocs_total":            dto.MetricType_COUNTER,
	"go_memstats_mcache_inuse_bytes":       dto.MetricType_GAUGE,
	"go_memstats_mcache_sys_bytes":         dto.MetricType_GAUGE,
	"go_memstats_mspan_inuse_bytes":        dto.MetricType_GAUGE,
	"go_memstats_mspan_sys_bytes":          dto.MetricType_GAUGE,
	"go_memstats_next_gc_bytes":            dto.MetricType_GAUGE,
	"go_memstats_other_sys_bytes":          dto.MetricType_GAUGE,
	"go_memstats_stack_inuse_bytes":        dto.MetricType_GAUGE,
	"go_memstats_stack_sys_bytes":          dto.MetricType_GAUGE,
	"go_memstats_sys_bytes":                dto.MetricType_GAUGE,
	"go_sched_gomaxprocs_threads":          dto.MetricType_GAUGE,
	"go_threads":                           dto.MetricType_GAUGE,
	"process_cpu_seconds_total":            dto.MetricType_COUNTER,
	"process_max_fds":                      dto.MetricType_GAUGE,
	"process_network_receive_bytes_total":  dto.MetricType_COUNTER,
	"process_network_transmit_bytes_total": dto.MetricType_COUNTER,
	"process_open_fds":                     dto.MetricType_GAUGE,
	"process_resident_memory_bytes":        dto.MetricType_GAUGE,
	"process_start_time_seconds":           dto.MetricType_GAUGE,
	"process_virtual_memory_bytes":         dto.MetricType_GAUGE,
	"process_virtual_memory_max_bytes":     dto.MetricType_GAUGE,
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

// TestRuntimeFamiliesKept checks that /metrics serves every go_* and
// process_* family it served before, with the same type, and that the
// values are the runtime's and the process's own.
func TestRuntimeFamiliesKept(t *testing.T) {
	ours := scrapeLoopback(t)

	for name, typ := range runtimeFamilies {
		got, ok := ours[name]
		if !ok {
			if runtime.GOOS == "linux" || !strings.HasPrefix(name, "process_") ||
				(runtime.GOOS == "windows" && (name == "process_cpu_seconds_total" || name == "process_start_time_seconds")) {
				t.Errorf("/metrics has no %s", name)
			}
			continue
		}
		if got.GetType() != typ {
			t.Errorf("%s: type %s, was %s", name, got.GetType(), typ)
		}
		if got.GetHelp() == "" {
			t.Errorf("%s has no help text", name)
		}
	}

	// Figures that do not change while the test runs are the runtime's
	// and the kernel's.
	if limit := debug.SetMemoryLimit(-1); value(t, ours, "go_gc_gomemlimit_bytes", nil) != float64(limit) {
		t.Errorf("go_gc_gomemlimit_bytes = %v, GOMEMLIMIT is %d", value(t, ours, "go_gc_gomemlimit_bytes", nil), limit)
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
	if now := float64(time.Now().UnixNano()) / 1e9; start > now || start < now-time.Hour.Seconds() {
		t.Errorf("process_start_time_seconds = %v, not in the hour before now (%v)", start, now)
	}
}
