//go:build linux

package selinuxcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Where SELinux is off the report is nil, which is what keeps /status,
// the log and --diagnose free of SELinux: the kernels of this project's CI
// have none (its proof under SELinux is make selinux-test's VM).
func TestNothingWhereSELinuxIsOff(t *testing.T) {
	if _, err := os.Stat("/sys/fs/selinux"); err == nil {
		t.Skip("this kernel has selinuxfs: SELinux may be on here")
	}
	if b, err := os.ReadFile("/proc/self/attr/current"); err == nil && isContext(strings.TrimRight(string(b), "\x00\n")) {
		t.Skipf("SELinux answers for this process here: %q", b)
	}
	dir := t.TempDir()
	if r := Inspect(Config{RegistryDir: dir, Socket: dir + "/x-reg.sock", DriverSocket: dir + "/csi.sock"}); r != nil {
		t.Errorf("Inspect = %+v, want nil where SELinux is off", r)
	}
	if On() {
		t.Error("On() = true where SELinux is off")
	}
}

func TestIsContext(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  bool
	}{
		{"system_u:system_r:container_t:s0:c123,c456", true},
		{"system_u:system_r:kubelet_t:s0", true},
		{"system_u:system_r:spc_t", true},
		{"unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023", true},
		// Not SELinux: its policy not loaded yet, AppArmor's profiles.
		{"kernel", false},
		{"unconfined", false},
		{"cri-containerd.apparmor.d (enforce)", false},
		{":ns:profile", false},
		{"", false},
		{"a::c", false},
	} {
		if got := isContext(tc.value); got != tc.want {
			t.Errorf("isContext(%q) = %v, want %v", tc.value, got, tc.want)
		}
	}
}

func TestParseDecision(t *testing.T) {
	allowed, err := parseDecision("1f 7fffffff 0 ffffffff 12 0")
	if err != nil || allowed != 0x1f {
		t.Errorf("parseDecision = %#x, %v; want 0x1f", allowed, err)
	}
	for _, bad := range []string{"", "1f 7fffffff", "zz 0 0 0 1 0", "100000000 0 0 0 1 0"} {
		if _, err := parseDecision(bad); err == nil {
			t.Errorf("parseDecision(%q) did not fail", bad)
		}
	}
}

func TestSummary(t *testing.T) {
	no, yes := false, true
	denied := &Report{
		Mode:      "enforcing",
		Registrar: "system_u:system_r:container_t:s0:c1,c2",
		Kubelet:   "system_u:system_r:kubelet_t:s0", KubeletSource: "process 812",
		Files: []File{
			{What: WhatRegistryDir, Path: "/registration", Label: "system_u:object_r:container_file_t:s0"},
			{What: WhatSocket, Path: "/registration/x-reg.sock", Error: "getxattr /registration/x-reg.sock: no label"},
		},
		KubeletCanReach: &no, RegistrarCanPublish: &yes,
		Denials: []Denial{{Who: "kubelet", Source: "system_u:system_r:kubelet_t:s0", Target: "system_u:system_r:container_t:s0:c1,c2",
			Class: "unix_stream_socket", Permissions: []string{"connectto"}, Object: "the registrar's socket"}},
	}
	for _, want := range []string{
		"SELinux enforcing: kubelet (kubelet_t) may not { connectto } the registrar's socket (unix_stream_socket system_u:system_r:container_t:s0:c1,c2)",
		"registry directory system_u:object_r:container_file_t:s0",
		"registration socket: getxattr /registration/x-reg.sock: no label",
		"kubelet is system_u:system_r:kubelet_t:s0 (process 812)",
	} {
		if got := denied.Summary(); !strings.Contains(got, want) {
			t.Errorf("Summary() = %q\nwant it to contain %q", got, want)
		}
	}
	if !denied.Problem() {
		t.Error("Problem() = false with a denial")
	}
	unchecked := &Report{Mode: "unknown", Files: denied.Files[:1], Unchecked: "selinuxfs is not mounted in this container"}
	if got := unchecked.Summary(); !strings.HasPrefix(got, "SELinux on (mode unknown); labels: registry directory") || !strings.Contains(got, "not known: selinuxfs is not mounted") || !strings.Contains(got, "ausearch -m avc -c kubelet") {
		t.Errorf("Summary() = %q", got)
	}
	if unchecked.Problem() || (*Report)(nil).Problem() {
		t.Error("Problem() = true without a denial")
	}
}

// A file's label as the kernel stores it, whatever its length, and the
// error for a file without one. Root may set security.selinux where no
// security module claims it.
func TestFileLabel(t *testing.T) {
	dir := t.TempDir()
	long := "system_u:object_r:" + strings.Repeat("a", 300) + "_t:s0"
	for _, label := range []string{"system_u:object_r:container_file_t:s0:c1,c2", long, ""} {
		path := filepath.Join(dir, fmt.Sprintf("f%d", len(label)))
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if label != "" {
			if err := unix.Lsetxattr(path, "security.selinux", []byte(label+"\x00"), 0); err != nil {
				if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
					t.Fatalf("cannot set security.selinux here (CI is set, so this fails; it needs root): %v", err)
				}
				t.Skipf("cannot set security.selinux here (it needs root): %v", err)
			}
		}
		got, err := fileLabel(path)
		switch {
		case label == "" && (err == nil || !strings.HasSuffix(err.Error(), ": no label")):
			t.Errorf("fileLabel of a file without a label = %q, %v; want the error no label", got, err)
		case label != "" && (err != nil || got != label):
			t.Errorf("fileLabel = %q, %v; want %q", got, err, label)
		}
	}
}
