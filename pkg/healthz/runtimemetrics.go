package healthz

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The go_* and process_* families are those of client_golang's default Go
// and process collectors (names, types, help texts and figures), so that
// dashboards and alerts written for any Go exporter read the registrar too.
// Importing client_golang would cost 0.25 MB of binary and 0.3 MB of
// memory: its init builds the default registry's collectors.

// goFamiliesFromRuntime are read from runtime/metrics, which does not stop
// the world as runtime.ReadMemStats does; each value is the sum of its
// samples, as client_golang derives MemStats' fields. An empty help is the
// runtime's own description of the sample.
var goFamiliesFromRuntime = []struct {
	name, help string
	samples    []string
}{
	{"go_gc_gogc_percent", "", []string{"/gc/gogc:percent"}},
	{"go_gc_gomemlimit_bytes", "", []string{"/gc/gomemlimit:bytes"}},
	{"go_sched_gomaxprocs_threads", "", []string{"/sched/gomaxprocs:threads"}},
	{"go_memstats_alloc_bytes", "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", []string{"/memory/classes/heap/objects:bytes"}},
	{"go_memstats_alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", []string{"/gc/heap/allocs:bytes"}},
	{"go_memstats_sys_bytes", "Number of bytes obtained from system. Equals to /memory/classes/total:byte.", []string{"/memory/classes/total:bytes"}},
	{"go_memstats_mallocs_total", "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.", []string{"/gc/heap/allocs:objects", "/gc/heap/tiny/allocs:objects"}},
	{"go_memstats_frees_total", "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.", []string{"/gc/heap/frees:objects", "/gc/heap/tiny/allocs:objects"}},
	{"go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.", []string{"/memory/classes/heap/objects:bytes"}},
	{"go_memstats_heap_sys_bytes", "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes", "/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes"}},
	{"go_memstats_heap_idle_bytes", "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", []string{"/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes"}},
	{"go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes", []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes"}},
	{"go_memstats_heap_released_bytes", "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.", []string{"/memory/classes/heap/released:bytes"}},
	{"go_memstats_heap_objects", "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", []string{"/gc/heap/objects:objects"}},
	{"go_memstats_stack_inuse_bytes", "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.", []string{"/memory/classes/heap/stacks:bytes"}},
	{"go_memstats_stack_sys_bytes", "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.", []string{"/memory/classes/heap/stacks:bytes", "/memory/classes/os-stacks:bytes"}},
	{"go_memstats_mspan_inuse_bytes", "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.", []string{"/memory/classes/metadata/mspan/inuse:bytes"}},
	{"go_memstats_mspan_sys_bytes", "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.", []string{"/memory/classes/metadata/mspan/inuse:bytes", "/memory/classes/metadata/mspan/free:bytes"}},
	{"go_memstats_mcache_inuse_bytes", "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.", []string{"/memory/classes/metadata/mcache/inuse:bytes"}},
	{"go_memstats_mcache_sys_bytes", "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.", []string{"/memory/classes/metadata/mcache/inuse:bytes", "/memory/classes/metadata/mcache/free:bytes"}},
	{"go_memstats_buck_hash_sys_bytes", "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.", []string{"/memory/classes/profiling/buckets:bytes"}},
	{"go_memstats_gc_sys_bytes", "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.", []string{"/memory/classes/metadata/other:bytes"}},
	{"go_memstats_other_sys_bytes", "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.", []string{"/memory/classes/other:bytes"}},
	{"go_memstats_next_gc_bytes", "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.", []string{"/gc/heap/goal:bytes"}},
}

// processHelp are the help texts of the process_* families, by the names
// processFigures gives their figures.
var processHelp = map[string]string{
	"process_cpu_seconds_total":            "Total user and system CPU time spent in seconds.",
	"process_open_fds":                     "Number of open file descriptors.",
	"process_max_fds":                      "Maximum number of open file descriptors.",
	"process_virtual_memory_bytes":         "Virtual memory size in bytes.",
	"process_virtual_memory_max_bytes":     "Maximum amount of virtual memory available in bytes.",
	"process_resident_memory_bytes":        "Resident memory size in bytes.",
	"process_start_time_seconds":           "Start time of the process since unix epoch in seconds.",
	"process_network_receive_bytes_total":  "Number of bytes received by the process over the network.",
	"process_network_transmit_bytes_total": "Number of bytes sent by the process over the network.",
}

// runtimeFamilies reads the Go runtime's and the process's figures now. A
// process figure that cannot be read is left out and its error returned.
func runtimeFamilies() ([]Family, error) {
	var samples []metrics.Sample
	for _, f := range goFamiliesFromRuntime {
		for _, name := range f.samples {
			samples = append(samples, metrics.Sample{Name: name})
		}
	}
	metrics.Read(samples)
	var out []Family
	for _, f := range goFamiliesFromRuntime {
		var sum float64
		for _, s := range samples[:len(f.samples)] {
			if s.Value.Kind() == metrics.KindUint64 {
				sum += float64(s.Value.Uint64())
			}
		}
		samples = samples[len(f.samples):]
		for _, d := range metrics.All() {
			if f.help == "" && d.Name == f.samples[0] {
				f.help = d.Description + " Sourced from " + d.Name + "."
			}
		}
		out = append(out, family(f.name, f.help, sample(sum)))
	}

	var gc debug.GCStats
	gc.PauseQuantiles = make([]time.Duration, 5)
	debug.ReadGCStats(&gc)
	var pauses []Series
	for i, pause := range gc.PauseQuantiles {
		pauses = append(pauses, sample(pause.Seconds(), "quantile", formatFloat(float64(i)/4)))
	}
	pauses = append(pauses, Series{"_sum", nil, gc.PauseTotal.Seconds()}, Series{"_count", nil, float64(gc.NumGC)})
	threads, _ := runtime.ThreadCreateProfile(nil)
	out = append(out,
		Family{"go_gc_duration_seconds", "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.", "summary", pauses},
		family("go_info", "Information about the Go environment.", sample(1, "version", runtime.Version())),
		family("go_goroutines", "Number of goroutines that currently exist.", sample(float64(runtime.NumGoroutine()))),
		family("go_threads", "Number of OS threads created.", sample(float64(threads))),
		family("go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.", sample(float64(gc.LastGC.UnixNano())/1e9)))

	figures, err := processFigures()
	for name, v := range figures {
		out = append(out, family(name, processHelp[name], sample(v)))
	}
	return out, err
}
