//go:build linux

// Package guest is what the VM of make selinux-test does as its /init (see
// ../README.md): it mounts the kernel's file systems, loads the SELinux
// policy, labels files, starts processes in chosen domains and reads the
// kernel's AVC messages. Its tests (the scenarios) run only as PID 1 of
// that VM.
package guest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// SELinuxFS is where the guest mounts selinuxfs.
const SELinuxFS = "/sys/fs/selinux"

// Boot mounts what the guest needs (proc, sysfs, devtmpfs, securityfs,
// selinuxfs, a tmpfs on /tmp) and brings the loopback interface up.
func Boot() error {
	mounts := []struct{ source, target, fstype string }{
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
		{"devtmpfs", "/dev", "devtmpfs"},
		{"securityfs", "/sys/kernel/security", "securityfs"},
		{"selinuxfs", SELinuxFS, "selinuxfs"},
		{"tmpfs", "/tmp", "tmpfs"},
	}
	for _, m := range mounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.source, m.target, m.fstype, 0, ""); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err)
		}
	}
	// printk_ratelimit would drop AVC messages (they reach the kernel log
	// through it when no audit daemon listens) after 10 in 5 s.
	if err := os.WriteFile("/proc/sys/kernel/printk_ratelimit", []byte("0"), 0); err != nil {
		return err
	}
	return loopbackUp()
}

// loopbackUp sets IFF_UP on lo, as ip link set lo up.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket for SIOCSIFFLAGS: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS lo: %w", err)
	}
	return nil
}

// LSMs is the kernel's list of active security modules.
func LSMs() (string, error) {
	b, err := os.ReadFile("/sys/kernel/security/lsm")
	return string(b), err
}

// LoadPolicy loads the binary policy in file.
func LoadPolicy(file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := os.WriteFile(SELinuxFS+"/load", b, 0); err != nil {
		return fmt.Errorf("loading the policy %s: %w (the kernel log says why)", file, err)
	}
	return nil
}

// SetEnforce switches between enforcing and permissive.
func SetEnforce(on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	if err := os.WriteFile(SELinuxFS+"/enforce", []byte(v), 0); err != nil {
		return fmt.Errorf("writing %s to %s/enforce: %w", v, SELinuxFS, err)
	}
	got, err := os.ReadFile(SELinuxFS + "/enforce")
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(got)) != v {
		return fmt.Errorf("%s/enforce is %q after writing %s", SELinuxFS, got, v)
	}
	return nil
}

// SetLabel sets path's SELinux context.
func SetLabel(path, context string) error {
	if err := unix.Lsetxattr(path, "security.selinux", []byte(context), 0); err != nil {
		return fmt.Errorf("labelling %s %s: %w", path, context, err)
	}
	if got, err := Label(path); err != nil || got != context {
		return fmt.Errorf("%s is labelled %q (%v) after setting %s", path, got, err, context)
	}
	return nil
}

// Label is path's SELinux context.
func Label(path string) (string, error) {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(path, "security.selinux", buf)
	if err != nil {
		return "", fmt.Errorf("reading %s's label: %w", path, err)
	}
	return strings.TrimRight(string(buf[:n]), "\x00"), nil
}

// ProcessLabel is the domain of process pid.
func ProcessLabel(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/attr/current", pid))
	return strings.TrimRight(string(b), "\x00\n"), err
}

// StartIn starts cmd in the SELinux domain context: the context is written
// to /proc/thread-self/attr/exec on a thread of its own that then forks and
// execs, so that only that exec changes domain. The thread is not given
// back to the Go scheduler (it ends with its goroutine), so no later exec
// inherits the context. It fails unless the process runs in context.
func StartIn(context string, cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread ends with this goroutine.
		if err := os.WriteFile("/proc/thread-self/attr/exec", []byte(context), 0); err != nil {
			errc <- fmt.Errorf("setting the exec context %s: %w", context, err)
			return
		}
		errc <- cmd.Start()
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("starting %s in %s: %w", cmd.Path, context, err)
	}
	// Start returns once the child closed its close-on-exec files, which
	// execve does a little before it commits the new credentials: wait for
	// them.
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := ProcessLabel(cmd.Process.Pid)
		if err != nil {
			return err
		}
		if got == context {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s runs in %q, not %s, 5 s after its execve", cmd.Path, got, context)
		}
		time.Sleep(time.Millisecond)
	}
}

// Kmsg collects the kernel log from /dev/kmsg.
type Kmsg struct {
	mu    sync.Mutex
	lines []string
	added chan struct{} // closed and replaced at each new line
	syncs int           // lines written by Sync
}

// ReadKmsg starts reading the kernel log, from its first record.
func ReadKmsg() (*Kmsg, error) {
	f, err := os.Open("/dev/kmsg")
	if err != nil {
		return nil, err
	}
	k := &Kmsg{added: make(chan struct{})}
	go func() {
		// Each read is one record: "prio,seq,usec,flags;text\n".
		r := bufio.NewReaderSize(f, 8192)
		for {
			line, err := r.ReadString('\n')
			if errors.Is(err, unix.EPIPE) {
				continue // records overwritten before they were read
			}
			if err != nil {
				return
			}
			if i := strings.IndexByte(line, ';'); i >= 0 {
				line = line[i+1:]
			}
			k.mu.Lock()
			k.lines = append(k.lines, strings.TrimRight(line, "\n"))
			close(k.added)
			k.added = make(chan struct{})
			k.mu.Unlock()
		}
	}()
	return k, nil
}

// Mark is the number of lines read so far: Since(Mark()) is what comes
// later.
func (k *Kmsg) Mark() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.lines)
}

// Sync writes a line of its own into the kernel log and waits until it has
// been read, so that everything the kernel logged before is in: it returns
// the Mark after that line.
func (k *Kmsg) Sync(timeout time.Duration) (int, error) {
	k.mu.Lock()
	k.syncs++
	line := fmt.Sprintf("selinuxvm: kernel log sync %d", k.syncs)
	k.mu.Unlock()
	if err := os.WriteFile("/dev/kmsg", []byte(line+"\n"), 0); err != nil {
		return 0, fmt.Errorf("writing to /dev/kmsg: %w", err)
	}
	deadline := time.After(timeout)
	for {
		k.mu.Lock()
		for i := len(k.lines) - 1; i >= 0; i-- {
			if k.lines[i] == line {
				k.mu.Unlock()
				return i + 1, nil
			}
		}
		added := k.added
		k.mu.Unlock()
		select {
		case <-added:
		case <-deadline:
			return 0, fmt.Errorf("the line written to /dev/kmsg was not read back within %s", timeout)
		}
	}
}

// Since returns the lines after mark that contain substr, and a channel
// closed when another line comes.
func (k *Kmsg) Since(mark int, substr string) ([]string, <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, l := range k.lines[min(mark, len(k.lines)):] {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out, k.added
}

// PowerOff ends the VM.
func PowerOff() error {
	unix.Sync()
	return unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}
