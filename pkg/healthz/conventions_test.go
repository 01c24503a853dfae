package healthz

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// servedRuntimeFamilies are the go_* and process_* families /metrics
// serves on Linux with client_golang's collectors, by type: dashboards and
// alerts read them, so none may go away or change its type. Their help
// texts are client_golang's and the Go runtime's, not pinned here.
var servedRuntimeFamilies = map[string]dto.MetricType{
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

// windowsProcessFamilies are the process_* families client_golang's
// collector serves on Windows.
var windowsProcessFamilies = []string{
	"process_cpu_seconds_total", "process_max_fds", "process_open_fds",
	"process_resident_memory_bytes", "process_start_time_seconds", "process_virtual_memory_bytes",
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
// process_* family it served before, with the same type and labels, no other, and the runtime's and the process's own figures.
func TestRuntimeFamiliesKept(t *testing.T) {
	ours := scrapeLoopback(t)

	for name, want := range servedRuntimeFamilies {
		got, ok := ours[name]
		if !ok {
			if !strings.HasPrefix(name, "process_") || runtime.GOOS == "linux" ||
				runtime.GOOS == "windows" && slices.Contains(windowsProcessFamilies, name) {
				t.Errorf("/metrics has no %s", name)
			}
			continue
		}
		if got.GetType() != want {
			t.Errorf("%s: type %s, was %s", name, got.GetType(), want)
		}
		if labels := got.GetMetric()[0].GetLabel(); name != "go_info" && len(labels) > 0 {
			t.Errorf("%s has labels %v, had none", name, labels)
		}
	}
	for name := range ours {
		if _, ok := servedRuntimeFamilies[name]; !ok && (strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_")) {
			t.Errorf("/metrics has %s, which it did not serve before", name)
		}
	}
	if labels := ours["go_info"].GetMetric()[0].GetLabel(); len(labels) != 1 || labels[0].GetName() != "version" || labels[0].GetValue() != runtime.Version() {
		t.Errorf("go_info's labels are %v, want version=%q", labels, runtime.Version())
	}
	var quantiles []float64
	for _, q := range ours["go_gc_duration_seconds"].GetMetric()[0].GetSummary().GetQuantile() {
		quantiles = append(quantiles, q.GetQuantile())
	}
	if !slices.Equal(quantiles, []float64{0, 0.25, 0.5, 0.75, 1}) {
		t.Errorf("go_gc_duration_seconds has the quantiles %v, want 0, 0.25, 0.5, 0.75, 1", quantiles)
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
		// The scrape itself came in over loopback, which IpExt counts.
		positive = append(positive, "process_open_fds", "process_max_fds", "process_network_receive_bytes_total", "process_network_transmit_bytes_total")
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

// TestRuntimeFiguresRight reads the go_* and process_* families in this
// process, next to what the runtime and the kernel say of it.
func TestRuntimeFiguresRight(t *testing.T) {
	runtime.GC()
	first := readRuntimeFamilies(t)
	var gc debug.GCStats
	debug.ReadGCStats(&gc)
	if count := first["go_gc_duration_seconds"].GetMetric()[0].GetSummary().GetSampleCount(); count < 1 || count > uint64(gc.NumGC) {
		t.Errorf("go_gc_duration_seconds counts %d collections, want 1 to %d after runtime.GC()", count, gc.NumGC)
	}
	if last := value(t, first, "go_memstats_last_gc_time_seconds", nil); last > float64(time.Now().UnixNano())/1e9 || last < float64(gc.LastGC.Add(-time.Hour).UnixNano())/1e9 {
		t.Errorf("go_memstats_last_gc_time_seconds = %v, the last collection was at %v", last, gc.LastGC)
	}
	// Nothing else in this test starts or ends a goroutine: the count read
	// is the one before and after, and the registry's own while it gathers,
	// at most one per collector and one that waits for them.
	before := runtime.NumGoroutine()
	goroutines := value(t, readRuntimeFamilies(t), "go_goroutines", nil)
	gathering := float64(len(runtimeCollectors()) + 1)
	if after := runtime.NumGoroutine(); before == after && (goroutines < float64(before) || goroutines > float64(before)+gathering) {
		t.Errorf("go_goroutines = %v, runtime.NumGoroutine() = %d, and the gathering's %v at most", goroutines, before, gathering)
	}

	var garbage [][]byte
	for range 1000 {
		garbage = append(garbage, make([]byte, 1024))
	}
	runtime.KeepAlive(garbage)
	second := readRuntimeFamilies(t)
	for name, f := range first {
		if f.GetType() == dto.MetricType_COUNTER && value(t, second, name, nil) < value(t, first, name, nil) {
			t.Errorf("%s went down from %v to %v", name, value(t, first, name, nil), value(t, second, name, nil))
		}
	}
	if grew := value(t, second, "go_memstats_alloc_bytes_total", nil) - value(t, first, "go_memstats_alloc_bytes_total", nil); grew < 1000*1024 {
		t.Errorf("go_memstats_alloc_bytes_total grew by %v after allocating 1000 KiB", grew)
	}
	heapSys := value(t, second, "go_memstats_heap_inuse_bytes", nil) + value(t, second, "go_memstats_heap_idle_bytes", nil)
	if got := value(t, second, "go_memstats_heap_sys_bytes", nil); got != heapSys {
		t.Errorf("go_memstats_heap_sys_bytes = %v, heap_inuse + heap_idle = %v", got, heapSys)
	}

	// runtime.ReadMemStats reads the same counters as runtime/metrics,
	// stopping the world: each go_memstats_* figure lies between a read
	// before and one after, give or take 10%.
	memStats := map[string]func(*runtime.MemStats) uint64{
		"go_memstats_alloc_bytes":         func(m *runtime.MemStats) uint64 { return m.Alloc },
		"go_memstats_alloc_bytes_total":   func(m *runtime.MemStats) uint64 { return m.TotalAlloc },
		"go_memstats_sys_bytes":           func(m *runtime.MemStats) uint64 { return m.Sys },
		"go_memstats_mallocs_total":       func(m *runtime.MemStats) uint64 { return m.Mallocs },
		"go_memstats_frees_total":         func(m *runtime.MemStats) uint64 { return m.Frees },
		"go_memstats_heap_alloc_bytes":    func(m *runtime.MemStats) uint64 { return m.HeapAlloc },
		"go_memstats_heap_sys_bytes":      func(m *runtime.MemStats) uint64 { return m.HeapSys },
		"go_memstats_heap_idle_bytes":     func(m *runtime.MemStats) uint64 { return m.HeapIdle },
		"go_memstats_heap_inuse_bytes":    func(m *runtime.MemStats) uint64 { return m.HeapInuse },
		"go_memstats_heap_released_bytes": func(m *runtime.MemStats) uint64 { return m.HeapReleased },
		"go_memstats_heap_objects":        func(m *runtime.MemStats) uint64 { return m.HeapObjects },
		"go_memstats_mspan_inuse_bytes":   func(m *runtime.MemStats) uint64 { return m.MSpanInuse },
		"go_memstats_mspan_sys_bytes":     func(m *runtime.MemStats) uint64 { return m.MSpanSys },
		"go_memstats_mcache_inuse_bytes":  func(m *runtime.MemStats) uint64 { return m.MCacheInuse },
		"go_memstats_mcache_sys_bytes":    func(m *runtime.MemStats) uint64 { return m.MCacheSys },
		"go_memstats_buck_hash_sys_bytes": func(m *runtime.MemStats) uint64 { return m.BuckHashSys },
		"go_memstats_gc_sys_bytes":        func(m *runtime.MemStats) uint64 { return m.GCSys },
		"go_memstats_other_sys_bytes":     func(m *runtime.MemStats) uint64 { return m.OtherSys },
		"go_memstats_next_gc_bytes":       func(m *runtime.MemStats) uint64 { return m.NextGC },
	}
	// With no collection in between, nor one still sweeping (the gathering
	// allocates enough to sweep a good part of the heap), most figures only
	// grow or only shrink. Some (other_sys) go up and down with the test's
	// other goroutines: a figure must lie between in one of five tries.
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	var third map[string]*dto.MetricFamily
	outside := map[string]string{}
	for name := range memStats {
		outside[name] = ""
	}
	for try := 0; try < 5 && len(outside) > 0; try++ {
		var statsBefore, statsAfter runtime.MemStats
		runtime.ReadMemStats(&statsBefore)
		third = readRuntimeFamilies(t)
		runtime.ReadMemStats(&statsAfter)
		for name := range outside {
			field := memStats[name]
			low, high := float64(min(field(&statsBefore), field(&statsAfter))), float64(max(field(&statsBefore), field(&statsAfter)))
			if got := value(t, third, name, nil); got >= low*0.9 && got <= high*1.1 {
				delete(outside, name)
			} else {
				outside[name] = fmt.Sprintf("%s = %v, runtime.ReadMemStats says %v before and %v after", name, got, field(&statsBefore), field(&statsAfter))
			}
		}
	}
	for _, why := range outside {
		t.Errorf("in each of five tries, for instance the last: %s", why)
	}
	// Stacks are not bracketed so: they grow and shrink as goroutines start
	// and end, which the test's other goroutines do meanwhile (under an
	// emulator's slow gathering, up and down again between the two reads).
	// Read at once, the stacks in use are part of the stacks' memory.
	inuse, sys := value(t, third, "go_memstats_stack_inuse_bytes", nil), value(t, third, "go_memstats_stack_sys_bytes", nil)
	if inuse <= 0 || sys < inuse {
		t.Errorf("go_memstats_stack_inuse_bytes = %v, go_memstats_stack_sys_bytes = %v: want in use > 0 and within the stacks' memory", inuse, sys)
	}
}

// readRuntimeFamilies gathers the go_* and process_* families now, from
// the collectors /metrics serves them with; it fails t on an error.
func readRuntimeFamilies(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	registry := prometheus.NewRegistry()
	registry.MustRegister(runtimeCollectors()...)
	families, err := registry.Gather()
	if err != nil {
		t.Fatalf("gathering the runtime's families: %v", err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	return byName
}
