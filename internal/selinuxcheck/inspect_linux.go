//go:build linux

package selinuxcheck

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// kubeletDomains are the domains kubelet runs in, as policies define them,
// tried in order when kubelet's process is not visible: container-selinux's
// kubelet_t (Fedora, RHEL, CoreOS), then the domain of services without a
// domain of their own.
var kubeletDomains = []string{"kubelet_t", "unconfined_service_t"}

// On tells whether SELinux is on, as Inspect tells it.
func On() bool {
	_, _, on := detect()
	return on
}

// detect finds this process's context and selinuxfs. Where this process
// has no SELinux context, SELinux is off but for a container that shows
// selinuxfs where it usually is; only there is the mount table read.
func detect() (self string, fsDir string, on bool) {
	self, err := processContext("/proc/thread-self/attr/current")
	fsDir = selinuxfs(err == nil)
	return self, fsDir, err == nil || fsDir != ""
}

// Inspect reports what SELinux says; nil when SELinux is off.
func Inspect(cfg Config) *Report {
	self, fsDir, on := detect()
	if !on {
		return nil
	}
	r := &Report{Mode: "unknown", Registrar: self}
	if fsDir != "" {
		switch b, _ := os.ReadFile(filepath.Join(fsDir, "enforce")); strings.TrimSpace(string(b)) {
		case "1":
			r.Mode = "enforcing"
		case "0":
			r.Mode = "permissive"
		}
	}
	labels := map[string]string{}
	add := func(what, path string) {
		if path == "" {
			return
		}
		f := File{What: what, Path: path}
		if label, err := fileLabel(path); err != nil {
			f.Error = err.Error()
		} else {
			f.Label = label
			labels[what] = label
		}
		r.Files = append(r.Files, f)
	}
	add(WhatRegistryDir, cfg.RegistryDir)
	add(WhatSocket, cfg.Socket)
	if cfg.DriverSocket != "" {
		add(WhatDriverSocketDir, filepath.Dir(cfg.DriverSocket))
		add(WhatDriverSocket, cfg.DriverSocket)
		r.Driver = peerContext(cfg.DriverSocket, cfg.DialTimeout)
	}

	if self == "" {
		r.Unchecked = "this process's own context cannot be read from /proc/thread-self/attr/current"
		return r
	}
	p := policy{dir: fsDir}
	if why := p.usable(self); why != "" {
		r.Unchecked = why
		return r
	}
	var err error
	r.Kubelet, r.KubeletSource, err = kubeletContext(p)
	switch {
	case err != nil:
		r.Unchecked = "the policy did not answer: " + err.Error()
		return r
	case r.Kubelet == "":
		r.Unchecked = "kubelet's process is not visible in this container (no hostPID) and the loaded policy defines none of the domains kubelet runs in (" + strings.Join(kubeletDomains, ", ") + ")"
		return r
	}

	r.askPolicy(p, needs(cfg, labels, self, r.Kubelet, r.Driver))
	return r
}

// needs are the questions to ask the policy, as denials of every
// permission: what kubelet needs to register the driver and reach it, and
// what this process needs to publish. labels are the files' labels by what
// they are.
func needs(cfg Config, labels map[string]string, self, kubelet, driver string) []Denial {
	var asks []Denial
	if label := labels[WhatRegistryDir]; label != "" {
		object := "the " + WhatRegistryDir + " " + cfg.RegistryDir
		asks = append(asks,
			Denial{"kubelet", kubelet, label, "dir", []string{"search", "getattr", "open", "read", "watch"}, object},
			Denial{"registrar", self, label, "dir", []string{"search", "write", "add_name", "remove_name"}, object})
	}
	if label := labels[WhatSocket]; label != "" {
		asks = append(asks, Denial{"kubelet", kubelet, label, "sock_file", []string{"getattr", "write"}, "the " + WhatSocket + " " + cfg.Socket})
	}
	asks = append(asks, Denial{"kubelet", kubelet, self, "unix_stream_socket", []string{"connectto"}, "the registrar's socket"})
	if label := labels[WhatDriverSocketDir]; label != "" {
		asks = append(asks, Denial{"kubelet", kubelet, label, "dir", []string{"search"}, "the " + WhatDriverSocketDir + " " + filepath.Dir(cfg.DriverSocket)})
	}
	if label := labels[WhatDriverSocket]; label != "" {
		asks = append(asks, Denial{"kubelet", kubelet, label, "sock_file", []string{"getattr", "write"}, "the " + WhatDriverSocket + " " + cfg.DriverSocket})
	}
	if driver != "" {
		asks = append(asks, Denial{"kubelet", kubelet, driver, "unix_stream_socket", []string{"connectto"}, "the driver's socket"})
	}
	return asks
}

// askPolicy records the policy's answers: the denials, and whether kubelet
// can reach what it needs and this process publish; or, when the policy
// does not answer, why.
func (r *Report) askPolicy(p policy, asks []Denial) {
	kubeletOK, registrarOK := true, true
	for _, d := range asks {
		denied, err := p.denied(d.Source, d.Target, d.Class, d.Permissions)
		if err != nil {
			r.Denials = nil
			r.Unchecked = "the policy did not answer: " + err.Error()
			return
		}
		if len(denied) > 0 {
			d.Permissions = denied
			r.Denials = append(r.Denials, d)
			kubeletOK = kubeletOK && d.Who != "kubelet"
			registrarOK = registrarOK && d.Who != "registrar"
		}
	}
	r.KubeletCanReach, r.RegistrarCanPublish = &kubeletOK, &registrarOK
}

// processContext reads a process's context from an attr/current file; an
// error when SELinux is not the security module that answers there (no
// module: EINVAL; AppArmor: a profile, which has no user:role:type form),
// or its policy is not loaded yet ("kernel").
func processContext(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	context := string(bytes.TrimRight(b, "\x00\n"))
	if !isContext(context) {
		return "", fmt.Errorf("%q is not an SELinux context", context)
	}
	return context, nil
}

// isContext tells whether s has the form user:role:type[:level].
func isContext(s string) bool {
	parts := strings.SplitN(s, ":", 4)
	if len(parts) < 3 || strings.ContainsAny(s, " \t\n") {
		return false
	}
	return !slices.Contains(parts[:3], "")
}

// fileLabel is a file's security.selinux attribute, not following a
// symbolic link.
func fileLabel(path string) (string, error) {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(path, "security.selinux", buf)
	if errors.Is(err, unix.ERANGE) {
		// The kernel's largest attribute value, XATTR_SIZE_MAX.
		buf = make([]byte, 64<<10)
		n, err = unix.Lgetxattr(path, "security.selinux", buf)
	}
	if errors.Is(err, unix.ENODATA) {
		err = errors.New("no label")
	}
	if err != nil {
		return "", &fs.PathError{Op: "getxattr", Path: path, Err: err}
	}
	return string(bytes.TrimRight(buf[:n], "\x00")), nil
}

// peerContext is the context of the process serving a socket, from a
// connection to it; "" when it cannot be read.
func peerContext(path string, timeout time.Duration) string {
	if timeout <= 0 {
		timeout = time.Second
	}
	conn, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return ""
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return ""
	}
	var context string
	_ = raw.Control(func(fd uintptr) {
		context, _ = unix.GetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_PEERSEC)
	})
	context = strings.TrimRight(context, "\x00")
	if !isContext(context) {
		return ""
	}
	return context
}

// kubeletContext is kubelet's context: its process's when visible (a pod
// with hostPID), else the first of kubeletDomains the policy defines, with
// the user, role and level kubelet gets from systemd.
func kubeletContext(p policy) (context, source string, err error) {
	if pid, context := kubeletProcess(); context != "" {
		return context, fmt.Sprintf("process %d", pid), nil
	}
	for _, domain := range kubeletDomains {
		for _, candidate := range []string{"system_u:system_r:" + domain + ":s0", "system_u:system_r:" + domain} {
			valid, err := p.valid(candidate)
			if err != nil {
				return "", "", err
			}
			if valid {
				return candidate, "assumed: kubelet's process is not visible here, and the policy defines " + domain, nil
			}
		}
	}
	return "", "", nil
}

// kubeletProcess finds a process named kubelet in /proc.
func kubeletProcess() (int, string) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, ""
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "kubelet" {
			continue
		}
		if context, err := processContext(filepath.Join("/proc", e.Name(), "attr", "current")); err == nil {
			return pid, context
		}
	}
	return 0, ""
}
