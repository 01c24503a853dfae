package healthz

import (
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/windows"
	"google.golang.org/protobuf/proto"
)

// processFamilies serves, of client_golang's process collector on Windows,
// the CPU time and the start time (GetProcessTimes); its memory and handle
// figures need psapi calls that golang.org/x/sys/windows does not wrap.
func processFamilies() []*dto.MetricFamily {
	var creation, exit, kernel, user windows.Filetime
	if err := windows.GetProcessTimes(windows.CurrentProcess(), &creation, &exit, &kernel, &user); err != nil {
		return nil
	}
	ticks := func(t windows.Filetime) float64 { // of 100 ns
		return float64(uint64(t.HighDateTime)<<32 | uint64(t.LowDateTime))
	}
	return []*dto.MetricFamily{
		{Name: proto.String("process_cpu_seconds_total"), Help: proto.String("Total user and system CPU time spent in seconds."),
			Type: dto.MetricType_COUNTER.Enum(), Metric: []*dto.Metric{counterValue((ticks(kernel) + ticks(user)) / 1e7)}},
		{Name: proto.String("process_start_time_seconds"), Help: proto.String("Start time of the process since unix epoch in seconds."),
			Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{gauge(float64(creation.Nanoseconds()) / 1e9)}},
	}
}
