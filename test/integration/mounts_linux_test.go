package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// --diagnose checks --kubelet-registration-path against the host path of
// the driver's socket directory, as /proc/self/mountinfo tells it: here a
// bind mount in a mount namespace of its own, as a hostPath volume is.
func TestDiagnoseChecksTheRegistrationPathThroughTheMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to bind-mount a directory in a mount namespace of its own")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	n := newNode(t)
	hostDir := filepath.Join(n.root, "host", "plugins", "drv")
	podDir := filepath.Join(n.root, "pod")
	for _, dir := range []string{hostDir, podDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	diagnose := func(t *testing.T, registrationPath string) string {
		t.Helper()
		script := fmt.Sprintf("mount --bind %s %s && exec %s --diagnose --csi-address=%s --kubelet-registration-path=%s --plugin-registration-path=%s",
			hostDir, podDir, registrarBin, filepath.Join(podDir, "csi.sock"), registrationPath, n.registry)
		out, _ := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", script).CombinedOutput()
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "kubelet registration path") {
				return line
			}
		}
		t.Fatalf("no line about the kubelet registration path in:\n%s", out)
		return ""
	}
	t.Run("right", func(t *testing.T) {
		line := diagnose(t, filepath.Join(hostDir, "csi.sock"))
		if !strings.HasPrefix(line, "[ OK ]") || !strings.Contains(line, "the driver's socket as the host sees it") {
			t.Errorf("got %q, want OK through the mounts", line)
		}
	})
	t.Run("typo", func(t *testing.T) {
		line := diagnose(t, filepath.Join(n.root, "host", "plugins", "drvtypo", "csi.sock"))
		if !strings.HasPrefix(line, "[FAIL]") || !strings.Contains(line, "must dial") || !strings.Contains(line, "drv/csi.sock") {
			t.Errorf("got %q, want a failure naming the host path of the driver's socket", line)
		}
	})
}
