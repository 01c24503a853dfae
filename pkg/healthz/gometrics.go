package healthz

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// The go_* families are those of client_golang's default Go collector
// (collectors.NewGoCollector() without options), with its names, types and
// help texts, so that dashboards and alerts written for any Go exporter
// read them here too; gometrics_test.go compares the two. They are built
// here rather than linked from client_golang to keep the binary small (see
// the README, "Where the binary goes"). Like that collector, the memstats
// families come from runtime/metrics, which does not stop the world as
// runtime.ReadMemStats does.

// runtime/metrics samples read at each scrape.
const (
	rmTinyAllocs       = "/gc/heap/tiny/allocs:objects"
	rmAllocs           = "/gc/heap/allocs:objects"
	rmFrees            = "/gc/heap/frees:objects"
	rmAllocBytes       = "/gc/heap/allocs:bytes"
	rmHeapObjects      = "/gc/heap/objects:objects"
	rmHeapGoal         = "/gc/heap/goal:bytes"
	rmTotal            = "/memory/classes/total:bytes"
	rmHeapObjectBytes  = "/memory/classes/heap/objects:bytes"
	rmHeapUnused       = "/memory/classes/heap/unused:bytes"
	rmHeapReleased     = "/memory/classes/heap/released:bytes"
	rmHeapFree         = "/memory/classes/heap/free:bytes"
	rmHeapStacks       = "/memory/classes/heap/stacks:bytes"
	rmOSStacks         = "/memory/classes/os-stacks:bytes"
	rmMSpanInuse       = "/memory/classes/metadata/mspan/inuse:bytes"
	rmMSpanFree        = "/memory/classes/metadata/mspan/free:bytes"
	rmMCacheInuse      = "/memory/classes/metadata/mcache/inuse:bytes"
	rmMCacheFree       = "/memory/classes/metadata/mcache/free:bytes"
	rmProfilingBuckets = "/memory/classes/profiling/buckets:bytes"
	rmMetadataOther    = "/memory/classes/metadata/other:bytes"
	rmOther            = "/memory/classes/other:bytes"
	rmGOGC             = "/gc/gogc:percent"
	rmGOMEMLIMIT       = "/gc/gomemlimit:bytes"
	rmGOMAXPROCS       = "/sched/gomaxprocs:threads"
)

var runtimeSampleNames = []string{
	rmTinyAllocs, rmAllocs, rmFrees, rmAllocBytes, rmHeapObjects, rmHeapGoal, rmTotal,
	rmHeapObjectBytes, rmHeapUnused, rmHeapReleased, rmHeapFree, rmHeapStacks, rmOSStacks,
	rmMSpanInuse, rmMSpanFree, rmMCacheInuse, rmMCacheFree, rmProfilingBuckets,
	rmMetadataOther, rmOther, rmGOGC, rmGOMEMLIMIT, rmGOMAXPROCS,
}

// runtimeMetricFamilies are the families client_golang builds by default
// straight from runtime/metrics: its help text is the runtime's
// description of the metric, followed by where it comes from.
var runtimeMetricFamilies = []struct{ name, sample string }{
	{"go_gc_gogc_percent", rmGOGC},
	{"go_gc_gomemlimit_bytes", rmGOMEMLIMIT},
	{"go_sched_gomaxprocs_threads", rmGOMAXPROCS},
}

// runtimeDescriptions are runtime/metrics' descriptions, by name.
var runtimeDescriptions = sync.OnceValue(func() map[string]string {
	descriptions := map[string]string{}
	for _, d := range metrics.All() {
		descriptions[d.Name] = d.Description
	}
	return descriptions
})

// goFamilies reads the Go runtime's figures now.
func goFamilies() []*dto.MetricFamily {
	samples := make([]metrics.Sample, len(runtimeSampleNames))
	for i, name := range runtimeSampleNames {
		samples[i].Name = name
	}
	metrics.Read(samples)
	value := make(map[string]uint64, len(samples))
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			value[s.Name] = s.Value.Uint64()
		}
	}

	var out []*dto.MetricFamily
	add := func(name, help string, typ dto.MetricType, m *dto.Metric) {
		out = append(out, &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: typ.Enum(), Metric: []*dto.Metric{m}})
	}

	var gc debug.GCStats
	gc.PauseQuantiles = make([]time.Duration, 5)
	debug.ReadGCStats(&gc)
	pauses := &dto.Summary{SampleCount: proto.Uint64(uint64(gc.NumGC)), SampleSum: proto.Float64(gc.PauseTotal.Seconds())}
	for i, pause := range gc.PauseQuantiles {
		pauses.Quantile = append(pauses.Quantile, &dto.Quantile{Quantile: proto.Float64(float64(i) / 4), Value: proto.Float64(pause.Seconds())})
	}
	add("go_gc_duration_seconds", "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.",
		dto.MetricType_SUMMARY, &dto.Metric{Summary: pauses})
	add("go_goroutines", "Number of goroutines that currently exist.", dto.MetricType_GAUGE, gauge(float64(runtime.NumGoroutine())))
	threads, _ := runtime.ThreadCreateProfile(nil)
	add("go_threads", "Number of OS threads created.", dto.MetricType_GAUGE, gauge(float64(threads)))
	add("go_info", "Information about the Go environment.", dto.MetricType_GAUGE, gauge(1, "version", runtime.Version()))
	add("go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.",
		dto.MetricType_GAUGE, gauge(float64(gc.LastGC.UnixNano())/1e9))

	for _, f := range runtimeMetricFamilies {
		description := runtimeDescriptions()[f.sample]
		add(f.name, description+" Sourced from "+f.sample+".", dto.MetricType_GAUGE, gauge(float64(value[f.sample])))
	}

	// The figures of runtime.MemStats, from runtime/metrics as
	// client_golang computes them; tiny allocations count in both mallocs
	// and frees, as in MemStats.
	heapAlloc := value[rmHeapObjectBytes]
	heapInuse := heapAlloc + value[rmHeapUnused]
	heapIdle := value[rmHeapReleased] + value[rmHeapFree]
	for _, m := range []struct {
		name    string
		counter bool
		value   uint64
		help    string
	}{
		{"alloc_bytes", false, heapAlloc, "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes."},
		{"alloc_bytes_total", true, value[rmAllocBytes], "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes."},
		{"sys_bytes", false, value[rmTotal], "Number of bytes obtained from system. Equals to /memory/classes/total:byte."},
		{"mallocs_total", true, value[rmAllocs] + value[rmTinyAllocs], "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects."},
		{"frees_total", true, value[rmFrees] + value[rmTinyAllocs], "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects."},
		{"heap_alloc_bytes", false, heapAlloc, "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes."},
		{"heap_sys_bytes", false, heapInuse + heapIdle, "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes."},
		{"heap_idle_bytes", false, heapIdle, "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes."},
		{"heap_inuse_bytes", false, heapInuse, "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes"},
		{"heap_released_bytes", false, value[rmHeapReleased], "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes."},
		{"heap_objects", false, value[rmHeapObjects], "Number of currently allocated objects. Equals to /gc/heap/objects:objects."},
		{"stack_inuse_bytes", false, value[rmHeapStacks], "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes."},
		{"stack_sys_bytes", false, value[rmHeapStacks] + value[rmOSStacks], "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes."},
		{"mspan_inuse_bytes", false, value[rmMSpanInuse], "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes."},
		{"mspan_sys_bytes", false, value[rmMSpanInuse] + value[rmMSpanFree], "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes."},
		{"mcache_inuse_bytes", false, value[rmMCacheInuse], "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes."},
		{"mcache_sys_bytes", false, value[rmMCacheInuse] + value[rmMCacheFree], "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes."},
		{"buck_hash_sys_bytes", false, value[rmProfilingBuckets], "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes."},
		{"gc_sys_bytes", false, value[rmMetadataOther], "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes."},
		{"other_sys_bytes", false, value[rmOther], "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes."},
		{"next_gc_bytes", false, value[rmHeapGoal], "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes."},
	} {
		name := "go_memstats_" + m.name
		if m.counter {
			add(name, m.help, dto.MetricType_COUNTER, counter(m.value))
		} else {
			add(name, m.help, dto.MetricType_GAUGE, gauge(float64(m.value)))
		}
	}
	return out
}
