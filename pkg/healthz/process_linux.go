package healthz

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// userHZ is the unit of the times in /proc/self/stat: USER_HZ, 100 on
// every architecture Kubernetes runs on.
const userHZ = 100

// processFigures reads what client_golang's process collector reads on
// Linux, by family name.
func processFigures() (map[string]float64, error) {
	out := map[string]float64{}
	stat, statErr := readStat()
	boot, bootErr := bootTime()
	if statErr == nil {
		out["process_cpu_seconds_total"] = (stat[14] + stat[15]) / userHZ
		out["process_virtual_memory_bytes"] = stat[23]
		out["process_resident_memory_bytes"] = stat[24] * float64(os.Getpagesize())
		if bootErr == nil {
			out["process_start_time_seconds"] = boot + stat[22]/userHZ
		}
	}
	fds, fdsErr := openFDs()
	if fdsErr == nil {
		out["process_open_fds"] = float64(fds)
	}
	// The soft limits, as /proc/self/limits shows them; unlimited is 2^64-1.
	var files, addressSpace syscall.Rlimit
	limitsErr := errors.Join(syscall.Getrlimit(syscall.RLIMIT_NOFILE, &files), syscall.Getrlimit(syscall.RLIMIT_AS, &addressSpace))
	if limitsErr == nil {
		out["process_max_fds"] = float64(files.Cur)
		out["process_virtual_memory_max_bytes"] = float64(addressSpace.Cur)
	}
	received, sent, netErr := networkBytes()
	if netErr == nil {
		out["process_network_receive_bytes_total"] = received
		out["process_network_transmit_bytes_total"] = sent
	}
	return out, errors.Join(statErr, bootErr, fdsErr, limitsErr, netErr)
}

// readStat reads the fields of /proc/self/stat that processFigures uses,
// by their number in proc_pid_stat(5).
func readStat() (map[int]float64, error) {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return nil, err
	}
	// The command name, in parentheses, may hold spaces and parentheses:
	// field 3 starts after the last ')'.
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	out := map[int]float64{}
	for _, n := range []int{14, 15, 22, 23, 24} {
		if n-3 >= len(fields) {
			return nil, fmt.Errorf("/proc/self/stat has %d fields, not %d", len(fields)+2, n)
		}
		if out[n], err = strconv.ParseFloat(fields[n-3], 64); err != nil {
			return nil, fmt.Errorf("/proc/self/stat: field %d: %w", n, err)
		}
	}
	return out, nil
}

// bootTime is read once: it does not change.
var bootTime = sync.OnceValues(func() (float64, error) {
	btime, err := procLines("/proc/stat", "btime ")
	if err != nil || len(btime) == 0 || len(btime[0]) == 0 {
		return 0, errors.Join(err, errors.New("/proc/stat has no btime line"))
	}
	return strconv.ParseFloat(btime[0][0], 64)
})

// openFDs counts the process's file descriptors: since Linux 6.2 the size
// of /proc/self/fd; before, that is 0 and the directory is read.
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

// networkBytes reads the IP bytes received and sent in the process's
// network namespace: a line of IpExt's names, then one of their values. A
// counter that is not there is 0.
func networkBytes() (received, sent float64, err error) {
	ipExt, err := procLines("/proc/self/net/netstat", "IpExt:")
	if err != nil || len(ipExt) != 2 {
		return 0, 0, err
	}
	for i, name := range ipExt[0][:min(len(ipExt[0]), len(ipExt[1]))] {
		switch name {
		case "InOctets":
			received, err = strconv.ParseFloat(ipExt[1][i], 64)
		case "OutOctets":
			sent, err = strconv.ParseFloat(ipExt[1][i], 64)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/self/net/netstat: IpExt %s: %w", name, err)
		}
	}
	return received, sent, nil
}

// procLines are the lines of a file that start with prefix, each split
// into the fields after it.
func procLines(path, prefix string) ([][]string, error) {
	data, err := os.ReadFile(path)
	var lines [][]string
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			lines = append(lines, strings.Fields(rest))
		}
	}
	return lines, err
}
