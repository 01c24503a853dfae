//go:build linux

package selinuxcheck

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// selinuxfs is where selinuxfs is mounted in this container, "" when it is
// not; anywhere but /sys/fs/selinux only when anywhere.
func selinuxfs(anywhere bool) string {
	const usual = "/sys/fs/selinux"
	var st unix.Statfs_t
	if err := unix.Statfs(usual, &st); err == nil && uint32(st.Type) == uint32(unix.SELINUX_MAGIC) {
		return usual
	}
	if !anywhere {
		return ""
	}
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("selinuxfs"))
	if err != nil || len(mounts) == 0 {
		return ""
	}
	return mounts[0].Mountpoint
}

// policy asks the loaded policy through selinuxfs.
type policy struct{ dir string }

// usable says why the policy cannot be asked here; "" when it can.
func (p policy) usable(self string) string {
	if p.dir == "" {
		return "selinuxfs is not mounted in this container; mount the host's /sys/fs/selinux there (hostPath, read-write) for the registrar to ask the policy"
	}
	_, err := p.allowed(self, self, "process")
	switch {
	case err == nil:
		return ""
	case errors.Is(err, unix.EROFS):
		return "selinuxfs is mounted read-only in this container (" + p.dir + "), and asking the policy takes a write"
	case errors.Is(err, unix.EACCES):
		return fmt.Sprintf("this container's domain %s may not ask the policy (security { compute_av }); a privileged container's (spc_t) may", typeOf(self))
	}
	return "the policy did not answer: " + err.Error()
}

// valid tells whether the loaded policy defines a context.
func (p policy) valid(context string) (bool, error) {
	f, err := os.OpenFile(filepath.Join(p.dir, "context"), os.O_RDWR, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if _, err := f.Write([]byte(context + "\x00")); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// denied are the permissions of perms the policy does not grant source
// on target of class. A class or permission the policy does not define is
// left out: the kernel then does what the policy's handle_unknown says.
func (p policy) denied(source, target, class string, perms []string) ([]string, error) {
	allowed, err := p.allowed(source, target, class)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var denied []string
	for _, perm := range perms {
		value, err := p.number(filepath.Join("class", class, "perms", perm))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, err
		case value < 1 || value > 32:
			return nil, fmt.Errorf("permission %s of class %s has the number %d, not 1 to 32", perm, class, value)
		case allowed&(1<<(value-1)) == 0:
			denied = append(denied, perm)
		}
	}
	return denied, nil
}

// allowed is the access vector the policy grants source on target of
// class: selinuxfs's access file takes "source target class-number
// requested" and answers "allowed decided auditallow auditdeny seqno
// flags", in hexadecimal but for seqno.
func (p policy) allowed(source, target, class string) (uint32, error) {
	index, err := p.number(filepath.Join("class", class, "index"))
	if err != nil {
		return 0, err
	}
	f, err := os.OpenFile(filepath.Join(p.dir, "access"), os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s %s %d %x", source, target, index, ^uint32(0)); err != nil {
		return 0, fmt.Errorf("asking for %s on %s (%s): %w", source, target, class, err)
	}
	answer := make([]byte, 256)
	n, err := f.Read(answer)
	if err != nil {
		return 0, fmt.Errorf("reading the answer for %s on %s (%s): %w", source, target, class, err)
	}
	return parseDecision(string(answer[:n]))
}

// parseDecision reads the allowed vector from an access file's answer.
func parseDecision(answer string) (uint32, error) {
	fields := strings.Fields(answer)
	if len(fields) < 4 {
		return 0, fmt.Errorf("unexpected answer from selinuxfs's access file: %q", answer)
	}
	allowed, err := strconv.ParseUint(fields[0], 16, 32)
	if err != nil {
		return 0, fmt.Errorf("unexpected answer from selinuxfs's access file: %q", answer)
	}
	return uint32(allowed), nil
}

// number reads a number from a file of selinuxfs.
func (p policy) number(name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(p.dir, name))
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", filepath.Join(p.dir, name), b)
	}
	return n, nil
}
