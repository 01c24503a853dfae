// Package harness starts and watches the processes of an end-to-end run: the
// registrar under test, the mock CSI driver and the e2e kubelet
// (test/kubelet). It captures their output line by line and lets callers
// wait for conditions on it, woken by each new line, with a deadline.
package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Stream names one of a process's output streams.
type Stream string

const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// Process is a started program whose output is being captured.
type Process struct {
	// Name labels the process in errors and logs.
	Name string

	cmd    *exec.Cmd
	onLine func(Stream, string)
	done   chan struct{}

	mu       sync.Mutex
	lines    []string // both streams, in arrival order, prefixed with the stream
	stderr   []string
	changed  chan struct{} // closed and replaced on every new line and at exit
	exitCode int
	waitErr  error
}

// StartProcess runs bin with args. onLine, if not nil, sees every output
// line before waiters do; it is called from two goroutines at once.
func StartProcess(name, bin string, args []string, onLine func(Stream, string)) (*Process, error) {
	p := &Process{
		Name:    name,
		cmd:     exec.Command(bin, args...),
		onLine:  onLine,
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	p.cmd.SysProcAttr = sysProcAttr()
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go p.read(&readers, Stdout, stdout)
	go p.read(&readers, Stderr, stderr)
	go func() {
		// exec.Cmd.Wait closes the pipes: read them to the end first.
		readers.Wait()
		err := p.cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.exitCode = p.cmd.ProcessState.ExitCode()
		p.notifyLocked()
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

func (p *Process) read(readers *sync.WaitGroup, stream Stream, r io.Reader) {
	defer readers.Done()
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			line = strings.TrimSuffix(line, "\n")
			if p.onLine != nil {
				p.onLine(stream, line)
			}
			p.mu.Lock()
			p.lines = append(p.lines, string(stream)+"| "+line)
			if stream == Stderr {
				p.stderr = append(p.stderr, line)
			}
			p.notifyLocked()
			p.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (p *Process) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Output is everything the process printed so far, each line prefixed with
// its stream.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// Tail is the last n lines the process printed, as Output gives them.
func (p *Process) Tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines[max(0, len(p.lines)-n):], "\n")
}

// Stderr is what the process printed on standard error so far.
func (p *Process) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.stderr, "\n")
}

// Done is closed once the process has exited and its output is read.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and its exit code (-1 if a
// signal ended it).
func (p *Process) Exited() (bool, int) {
	select {
	case <-p.done:
		return true, p.exitCode
	default:
		return false, 0
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error {
	if exited, _ := p.Exited(); exited {
		return fmt.Errorf("%s has already exited", p.Name)
	}
	return p.cmd.Process.Signal(sig)
}

// Wait waits up to timeout for the process to exit and returns its exit code
// (-1 if a signal ended it).
func (p *Process) Wait(timeout time.Duration) (int, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return p.exitCode, nil
	case <-timer.C:
		return 0, fmt.Errorf("%s (pid %d) still running after %v", p.Name, p.Pid(), timeout)
	}
}

// Stop sends SIGTERM and waits up to timeout for the exit, then kills the
// process. It returns the exit code of a process that exited by itself.
func (p *Process) Stop(timeout time.Duration) (int, error) {
	if exited, code := p.Exited(); exited {
		return code, nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return 0, err
	}
	code, err := p.Wait(timeout)
	if err != nil {
		p.Kill()
		return 0, fmt.Errorf("%w: killed it", err)
	}
	return code, nil
}

// Kill ends the process with SIGKILL, if it still runs, and waits for it.
// It is safe to call at any time, any number of times.
func (p *Process) Kill() {
	if exited, _ := p.Exited(); exited {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// WaitUntil waits up to timeout until cond holds. cond is evaluated now and
// after every output line; it runs without locks held. what describes the
// condition for the error.
func (p *Process) WaitUntil(timeout time.Duration, what string, cond func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-changed:
		case <-p.done:
			if cond() {
				return nil
			}
			_, code := p.Exited()
			return fmt.Errorf("%s exited (code %d) before %s", p.Name, code, what)
		case <-deadline.C:
			return fmt.Errorf("%s: timed out after %v waiting for %s", p.Name, timeout, what)
		}
	}
}

// WaitForLine waits up to timeout for an output line containing substr and
// returns it.
func (p *Process) WaitForLine(timeout time.Duration, substr string) (string, error) {
	var found string
	err := p.WaitUntil(timeout, fmt.Sprintf("a line containing %q", substr), func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, l := range p.lines {
			if strings.Contains(l, substr) {
				found = l
				return true
			}
		}
		return false
	})
	return found, err
}

// Eventually polls cond every interval until it reports true, fails, or
// timeout passes. For conditions that no process output announces (a file,
// an HTTP status).
func Eventually(timeout, interval time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		lastErr = err
		if time.Now().After(deadline) {
			if lastErr != nil {
				return fmt.Errorf("timed out after %v waiting for %s: %w", timeout, what, lastErr)
			}
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(interval)
	}
}
