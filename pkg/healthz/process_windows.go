package healthz

import (
	"unsafe"

	"golang.org/x/sys/windows"
)

var (
	getProcessMemoryInfo  = windows.NewLazySystemDLL("psapi.dll").NewProc("GetProcessMemoryInfo")
	getProcessHandleCount = windows.NewLazySystemDLL("kernel32.dll").NewProc("GetProcessHandleCount")
)

// processMemoryCounters is psapi's PROCESS_MEMORY_COUNTERS_EX.
type processMemoryCounters struct {
	size       uint32
	_          uint32  // PageFaultCount
	_          uintptr // PeakWorkingSetSize
	workingSet uintptr
	_          [6]uintptr // the pools' and the page file's
	private    uintptr
}

// processFigures reads what client_golang's process collector reads on
// Windows, with the same calls, by family name: there the private bytes
// are the virtual memory, the working set the resident memory and the
// handles the open files, of at most 16 Mi.
func processFigures() (map[string]float64, error) {
	process := windows.CurrentProcess()
	var creation, exit, kernel, user windows.Filetime
	if err := windows.GetProcessTimes(process, &creation, &exit, &kernel, &user); err != nil {
		return nil, err
	}
	seconds := func(t windows.Filetime) float64 { // in 100 ns
		return float64(uint64(t.HighDateTime)<<32|uint64(t.LowDateTime)) / 1e7
	}
	out := map[string]float64{
		"process_start_time_seconds": float64(creation.Nanoseconds() / 1e9),
		"process_cpu_seconds_total":  seconds(kernel) + seconds(user),
	}
	memory := processMemoryCounters{size: uint32(unsafe.Sizeof(processMemoryCounters{}))}
	if ok, _, err := getProcessMemoryInfo.Call(uintptr(process), uintptr(unsafe.Pointer(&memory)), uintptr(memory.size)); ok == 0 {
		return out, err
	}
	out["process_virtual_memory_bytes"] = float64(memory.private)
	out["process_resident_memory_bytes"] = float64(memory.workingSet)
	var handles uint32
	if ok, _, err := getProcessHandleCount.Call(uintptr(process), uintptr(unsafe.Pointer(&handles))); ok == 0 {
		return out, err
	}
	out["process_open_fds"] = float64(handles)
	out["process_max_fds"] = 16 * 1024 * 1024
	return out, nil
}
