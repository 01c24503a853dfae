//go:build linux

package guest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Context is the full SELinux context of a process in domain (a type).
func Context(domain string) string { return "system_u:system_r:" + domain + ":s0" }

// FileContext is the full SELinux context of a file of type typ.
func FileContext(typ string) string { return "system_u:object_r:" + typ + ":s0" }

// Proc is a process started in an SELinux domain, with its output kept.
type Proc struct {
	Name   string
	Domain string
	cmd    *exec.Cmd
	out    lockedBuffer // stderr, and stdout unless read as lines
	done   chan struct{}
	err    error // Wait's, once done is closed
}

// Start runs path with args in domain; its stdout and stderr are kept.
func Start(name, domain, path string, args ...string) (*Proc, error) {
	return start(name, domain, nil, path, args...)
}

// StartLines is Start, but each line of the process's stdout is also
// passed to line, from one goroutine.
func StartLines(name, domain string, line func(string), path string, args ...string) (*Proc, error) {
	return start(name, domain, line, path, args...)
}

func start(name, domain string, line func(string), path string, args ...string) (*Proc, error) {
	p := &Proc{Name: name, Domain: domain, done: make(chan struct{})}
	cmd := exec.Command(path, args...)
	cmd.Stderr = &p.out
	var stdout io.ReadCloser
	if line == nil {
		cmd.Stdout = &p.out
	} else {
		var err error
		if stdout, err = cmd.StdoutPipe(); err != nil {
			return nil, err
		}
	}
	p.cmd = cmd
	if err := StartIn(Context(domain), cmd); err != nil {
		return nil, err
	}
	var lines sync.WaitGroup
	if stdout != nil {
		lines.Go(func() {
			s := bufio.NewScanner(stdout)
			s.Buffer(nil, 1<<20)
			for s.Scan() {
				p.out.Write(append(s.Bytes(), '\n'))
				line(s.Text())
			}
		})
	}
	go func() {
		lines.Wait()
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// ExitErr is how the process ended, once Done is closed.
func (p *Proc) ExitErr() error { return p.err }

// Output is what the process wrote so far.
func (p *Proc) Output() string { return p.out.String() }

// Stop sends SIGTERM, then SIGKILL after grace, and waits for the exit.
func (p *Proc) Stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Run runs path with args in domain to its end: its combined output and
// exit code (-1 when it did not exit normally).
func Run(domain string, timeout time.Duration, path string, args ...string) (string, int, error) {
	p, err := Start(path, domain, path, args...)
	if err != nil {
		return "", -1, err
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.Stop(time.Second)
		return p.Output(), -1, fmt.Errorf("%s did not exit within %s", path, timeout)
	}
	var exit *exec.ExitError
	switch {
	case p.err == nil:
		return p.Output(), 0, nil
	case errors.As(p.err, &exit):
		return p.Output(), exit.ExitCode(), nil
	default:
		return p.Output(), -1, p.err
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// KubeletEvent is one line of fakekubelet's report (test/e2e/kubelet/report):
// a call kubelet made into its CSI registration handler.
type KubeletEvent struct {
	Kind   string `json:"kind"`
	Driver string `json:"driver"`
	Error  string `json:"error"`
}

// ParseKubeletEvent reads one line of fakekubelet's standard output.
func ParseKubeletEvent(line string) (KubeletEvent, error) {
	var e KubeletEvent
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		return e, fmt.Errorf("fakekubelet wrote %q, not a report event: %w", line, err)
	}
	return e, nil
}
