package healthz

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// The process_* families are those of client_golang's process collector
// on Linux (collectors.NewProcessCollector), with its names, types and help
// texts, read from the same files of /proc; gometrics_test.go compares the
// two. As there, a figure that cannot be read is left out, and the rest
// is served.

// userHZ is the unit of the times in /proc/PID/stat: USER_HZ, 100 on
// every architecture Kubernetes runs on.
const userHZ = 100

// processFamilies reads this process's figures now.
func processFamilies() []*dto.MetricFamily {
	var out []*dto.MetricFamily
	add := func(name, help string, typ dto.MetricType, v float64) {
		m := gauge(v)
		if typ == dto.MetricType_COUNTER {
			m = counterValue(v)
		}
		out = append(out, &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: typ.Enum(), Metric: []*dto.Metric{m}})
	}

	if stat, err := readProcessStat(); err == nil {
		add("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", dto.MetricType_COUNTER, stat.cpuSeconds)
		add("process_virtual_memory_bytes", "Virtual memory size in bytes.", dto.MetricType_GAUGE, stat.virtualBytes)
		add("process_resident_memory_bytes", "Resident memory size in bytes.", dto.MetricType_GAUGE, stat.residentBytes)
		if start, err := processStartTime(); err == nil {
			add("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", dto.MetricType_GAUGE, start)
		}
	}
	if fds, err := openFDs(); err == nil {
		add("process_open_fds", "Number of open file descriptors.", dto.MetricType_GAUGE, float64(fds))
	}
	if maxFDs, maxAddressSpace, err := readLimits(); err == nil {
		add("process_max_fds", "Maximum number of open file descriptors.", dto.MetricType_GAUGE, maxFDs)
		add("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", dto.MetricType_GAUGE, maxAddressSpace)
	}
	if received, sent, err := readNetworkBytes(); err == nil {
		add("process_network_receive_bytes_total", "Number of bytes received by the process over the network.", dto.MetricType_COUNTER, received)
		add("process_network_transmit_bytes_total", "Number of bytes sent by the process over the network.", dto.MetricType_COUNTER, sent)
	}
	return out
}

type processStat struct {
	cpuSeconds, virtualBytes, residentBytes float64
	startTicks                              uint64 // since boot, in 1/userHZ s
}

// readProcessStat reads /proc/self/stat (proc_pid_stat(5)).
func readProcessStat() (processStat, error) {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return processStat{}, err
	}
	// The command name, in parentheses, may hold spaces and parentheses:
	// the fields that follow start after the last ')', with field 3.
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return processStat{}, errors.New("/proc/self/stat: no ')' after the command name")
	}
	fields := strings.Fields(string(data[end+1:]))
	field := func(n int) (uint64, error) {
		if n-3 >= len(fields) {
			return 0, fmt.Errorf("/proc/self/stat: %d fields, not %d", len(fields)+2, n)
		}
		return strconv.ParseUint(fields[n-3], 10, 64)
	}
	var values [5]uint64 // utime, stime, starttime, vsize, rss
	for i, n := range []int{14, 15, 22, 23, 24} {
		if values[i], err = field(n); err != nil {
			return processStat{}, fmt.Errorf("/proc/self/stat: field %d: %w", n, err)
		}
	}
	return processStat{
		cpuSeconds:    float64(values[0]+values[1]) / userHZ,
		startTicks:    values[2],
		virtualBytes:  float64(values[3]),
		residentBytes: float64(values[4] * uint64(os.Getpagesize())),
	}, nil
}

// processStartTime is read once: the boot time in /proc/stat and the start
// in /proc/self/stat do not change.
var processStartTime = sync.OnceValues(func() (float64, error) {
	stat, err := readProcessStat()
	if err != nil {
		return 0, err
	}
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if value, ok := strings.CutPrefix(scanner.Text(), "btime "); ok {
			boot, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/stat: btime: %w", err)
			}
			return float64(boot) + float64(stat.startTicks)/userHZ, nil
		}
	}
	if err := scanner.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("/proc/stat: no btime line")
})

// openFDs counts this process's file descriptors. Since Linux 6.2 the
// size of /proc/self/fd is that count; before, it is 0 and the directory
// is read (which counts the descriptor that reads it, as client_golang's
// does).
func openFDs() (int, error) {
	info, err := os.Stat("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	if info.Size() > 0 {
		return int(info.Size()), nil
	}
	entries, err := os.ReadDir("/proc/self/fd")
	return len(entries), err
}

// readLimits reads the soft limits of open files and of the address space
// from /proc/self/limits; "unlimited" is the largest uint64.
func readLimits() (openFiles, addressSpace float64, err error) {
	data, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		return 0, 0, err
	}
	soft := func(limit string) (float64, error) {
		for line := range strings.Lines(string(data)) {
			rest, ok := strings.CutPrefix(line, limit)
			if !ok {
				continue
			}
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				break
			}
			if fields[0] == "unlimited" {
				return math.MaxUint64, nil
			}
			v, err := strconv.ParseUint(fields[0], 10, 64)
			return float64(v), err
		}
		return 0, fmt.Errorf("/proc/self/limits: no %q line", limit)
	}
	if openFiles, err = soft("Max open files "); err != nil {
		return 0, 0, err
	}
	addressSpace, err = soft("Max address space ")
	return openFiles, addressSpace, err
}

// readNetworkBytes reads the IP bytes received and sent in this process's
// network namespace, from the IpExt lines of /proc/self/net/netstat: a
// line of names, then a line of values. A missing counter is 0.
func readNetworkBytes() (received, sent float64, err error) {
	data, err := os.ReadFile("/proc/self/net/netstat")
	if err != nil {
		return 0, 0, err
	}
	var names []string
	for line := range strings.Lines(string(data)) {
		rest, ok := strings.CutPrefix(line, "IpExt:")
		if !ok {
			continue
		}
		if names == nil {
			names = strings.Fields(rest)
			continue
		}
		for i, v := range strings.Fields(rest) {
			if i >= len(names) {
				break
			}
			switch names[i] {
			case "InOctets":
				received, err = strconv.ParseFloat(v, 64)
			case "OutOctets":
				sent, err = strconv.ParseFloat(v, 64)
			}
			if err != nil {
				return 0, 0, fmt.Errorf("/proc/self/net/netstat: IpExt %s: %w", names[i], err)
			}
		}
		break
	}
	return received, sent, nil
}
