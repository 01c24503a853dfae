package healthz

import (
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProcessFiguresRight reads the process_* families in this process,
// next to what the kernel says of it in other files than those they are
// read from.
func TestProcessFiguresRight(t *testing.T) {
	families := readRuntimeFamilies(t)
	// qemu's user emulation (make arch-test) answers /proc/self/stat
	// itself, with 0 for the sizes and the times, and /proc/self/status
	// with qemu's own.
	if os.Getenv("REGISTRAR_EMULATOR") == "" {
		status, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		for name, field := range map[string]string{"process_resident_memory_bytes": "VmRSS:", "process_virtual_memory_bytes": "VmSize:"} {
			kernel := procField(t, string(status), field) * 1024 // in kB
			if got := value(t, families, name, nil); got < kernel/2 || got > kernel*2 {
				t.Errorf("%s = %v, /proc/self/status has %s %v bytes", name, got, field, kernel)
			}
		}
		// The CPU time, once there is enough of it to tell seconds from ticks,
		// is what getrusage says before and after, give or take a tick.
		for cpuSeconds(t) < 0.2 {
		}
		before := cpuSeconds(t)
		cpu := value(t, readRuntimeFamilies(t), "process_cpu_seconds_total", nil)
		if after := cpuSeconds(t); cpu < before-0.02 || cpu > after+0.02 {
			t.Errorf("process_cpu_seconds_total = %v, getrusage says %v s before and %v s after", cpu, before, after)
		}
	}
	limits, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		t.Fatal(err)
	}
	for name, limit := range map[string]string{"process_max_fds": "Max open files", "process_virtual_memory_max_bytes": "Max address space"} {
		if got, want := value(t, families, name, nil), procField(t, string(limits), limit); got != want {
			t.Errorf("%s = %v, /proc/self/limits' %s is %v", name, got, limit, want)
		}
	}
	entries, err := os.ReadDir("/proc/self/fd") // which counts its own descriptor
	if err != nil {
		t.Fatal(err)
	}
	if got := value(t, families, "process_open_fds", nil); got != float64(len(entries)) && got != float64(len(entries)-1) {
		t.Errorf("process_open_fds = %v, /proc/self/fd has %d entries", got, len(entries))
	}
}

// cpuSeconds is the user and system CPU time of this process, as
// getrusage says.
func cpuSeconds(t *testing.T) float64 {
	t.Helper()
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		t.Fatal(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}

// procField is the number after the line prefix in a /proc file's text;
// unlimited is the largest uint64, as the kernel takes it.
func procField(t *testing.T, text, prefix string) float64 {
	t.Helper()
	for line := range strings.Lines(text) {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			field := strings.Fields(rest)[0]
			if field == "unlimited" {
				return math.MaxUint64
			}
			v, err := strconv.ParseFloat(field, 64)
			if err != nil {
				t.Fatalf("%s %q: %v", prefix, field, err)
			}
			return v
		}
	}
	t.Fatalf("no %q line in %q", prefix, text)
	return 0
}
