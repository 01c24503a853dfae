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
	hostRegistry := filepath.Join(n.root, "host", "plugins_registry")
	otherRegistry := filepath.Join(n.root, "host", "registry")
	for _, dir := range []string{hostDir, podDir, hostRegistry, otherRegistry} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// run returns the lines of --diagnose about the registry directory and
	// the kubelet registration path, with both bind-mounted as a pod's
	// hostPath volumes are.
	run := func(t *testing.T, registry, registrationPath string) (dirLine, pathLine string) {
		t.Helper()
		script := fmt.Sprintf("mount --bind %s %s && mount --bind %s %s && exec %s --diagnose --csi-address=%s --kubelet-registration-path=%s --plugin-registration-path=%s",
			hostDir, podDir, registry, n.registry, strings.Join(registrarArgv(), " "), filepath.Join(podDir, "csi.sock"), registrationPath, n.registry)
		out, _ := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", script).CombinedOutput()
		for _, line := range strings.Split(string(out), "\n") {
			switch {
			case strings.Contains(line, "registry directory"):
				dirLine = line
			case strings.Contains(line, "kubelet registration path"):
				pathLine = line
			}
		}
		if dirLine == "" || pathLine == "" {
			t.Fatalf("no line about the registry directory or the kubelet registration path in:\n%s", out)
		}
		return dirLine, pathLine
	}
	diagnose := func(t *testing.T, registrationPath string) string {
		t.Helper()
		_, line := run(t, hostRegistry, registrationPath)
		return line
	}
	t.Run("right", func(t *testing.T) {
		line := diagnose(t, filepath.Join(hostDir, "csi.sock"))
		if !strings.HasPrefix(line, "[ OK ]") || !strings.Contains(line, "the driver's socket as the host sees it") {
			t.Errorf("got %q, want OK through the mounts", line)
		}
	})
	t.Run("registry not kubelet's", func(t *testing.T) {
		dirLine, _ := run(t, otherRegistry, filepath.Join(hostDir, "csi.sock"))
		if !strings.HasPrefix(dirLine, "[WARN]") || !strings.Contains(dirLine, "not a <kubelet --root-dir>/plugins_registry") {
			t.Errorf("got %q, want a warning that kubelet does not watch it", dirLine)
		}
	})
	t.Run("registry is kubelet's", func(t *testing.T) {
		dirLine, _ := run(t, hostRegistry, filepath.Join(hostDir, "csi.sock"))
		if !strings.HasPrefix(dirLine, "[ OK ]") || !strings.Contains(dirLine, "kubelet's root dir is") {
			t.Errorf("got %q, want OK naming kubelet's root dir", dirLine)
		}
	})
	t.Run("typo", func(t *testing.T) {
		line := diagnose(t, filepath.Join(n.root, "host", "plugins", "drvtypo", "csi.sock"))
		if !strings.HasPrefix(line, "[FAIL]") || !strings.Contains(line, "must dial") || !strings.Contains(line, "drv/csi.sock") {
			t.Errorf("got %q, want a failure naming the host path of the driver's socket", line)
		}
	})
}
