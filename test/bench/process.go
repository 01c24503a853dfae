package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is a started program whose output is kept for diagnostics and
// can be waited on.
type process struct {
	name   string
	cmd    *exec.Cmd
	output *output
	exited chan struct{}
	err    error // set when exited is closed
}

// start starts bin with the bench's environment and env added to it. The
// caller must call stop.
func start(name string, env []string, bin string, args ...string) (*process, error) {
	p := &process{name: name, cmd: exec.Command(bin, args...), output: newOutput(), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.output, p.output
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// stop ends the process with SIGTERM, or SIGKILL after 10 s.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// failed explains why something did not happen, with the end of the
// process's output.
func (p *process) failed(what string, err error) error {
	select {
	case <-p.exited:
		err = errors.Join(err, fmt.Errorf("%s exited: %v", p.name, p.err))
	default:
	}
	return fmt.Errorf("%s: %w\n%s output:\n%s", what, err, p.name, p.output.String())
}

// output keeps the last part of what a process wrote, and wakes those
// waiting for a string in it.
type output struct {
	mu      sync.Mutex
	buf     []byte
	changed chan struct{} // closed and replaced on each write
}

const outputLimit = 256 << 10

func newOutput() *output { return &output{changed: make(chan struct{})} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(o.buf, p...)
	if len(o.buf) > outputLimit {
		o.buf = o.buf[len(o.buf)-outputLimit:]
	}
	close(o.changed)
	o.changed = make(chan struct{})
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return string(o.buf)
}

// waitFor returns once s has been written, or with ctx's error.
func (o *output) waitFor(ctx context.Context, s string) error {
	for {
		o.mu.Lock()
		found, changed := bytes.Contains(o.buf, []byte(s)), o.changed
		o.mu.Unlock()
		if found {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %q in the output: %w", s, ctx.Err())
		}
	}
}

// memory is what /proc/PID/status says of a process's memory, in bytes.
type memory struct {
	vmRSS, rssAnon, rssFile, vmHWM int64
}

func readMemory(pid int) (memory, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, err
	}
	var m memory
	fields := map[string]*int64{"VmRSS:": &m.vmRSS, "RssAnon:": &m.rssAnon, "RssFile:": &m.rssFile, "VmHWM:": &m.vmHWM}
	for line := range strings.Lines(string(raw)) {
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == "kB" && fields[f[0]] != nil {
			kB, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return memory{}, fmt.Errorf("/proc/%d/status: %q: %w", pid, line, err)
			}
			*fields[f[0]] = kB << 10
		}
	}
	return m, nil
}

// clockTicksPerSecond is USER_HZ, the unit of /proc/PID/stat's times: 100
// on every Linux architecture Kubernetes runs on.
const clockTicksPerSecond = 100

// cpuUsage is the CPU time a process has used: in clock ticks from
// /proc/PID/stat (utime + stime, what top and upstream's figures count) and
// in nanoseconds from the scheduler (/proc/PID/task/*/schedstat), with the
// number of times its threads were scheduled.
type cpuUsage struct {
	ticks      int64
	exact      time.Duration
	timeSlices int64
}

func readCPU(pid int) (cpuUsage, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return cpuUsage{}, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// count the fields after its closing parenthesis. utime and stime are
	// fields 14 and 15.
	rest := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(rest) < 13 {
		return cpuUsage{}, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	var usage cpuUsage
	for _, field := range rest[11:13] {
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return cpuUsage{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		usage.ticks += n
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil {
		return cpuUsage{}, err
	}
	for _, task := range tasks {
		raw, err := os.ReadFile(task)
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(raw))
		if len(f) < 3 {
			return cpuUsage{}, fmt.Errorf("%s: %q", task, raw)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return cpuUsage{}, fmt.Errorf("%s: %w", task, err)
		}
		count, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return cpuUsage{}, fmt.Errorf("%s: %w", task, err)
		}
		usage.exact += time.Duration(ns)
		usage.timeSlices += count
	}
	return usage, nil
}

// freeTCPAddress returns a loopback address nobody listens on at the moment.
func freeTCPAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
