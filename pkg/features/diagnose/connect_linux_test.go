package diagnose

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A live driver socket that the registrar's user may not connect to is a
// permission problem, not a dead driver. The kernel's own EACCES, as root
// too: root connects to any socket through CAP_DAC_OVERRIDE, so the checks
// run on a thread without it (capabilities are per thread in Linux), as a
// registrar that runs as root without capabilities, as deploy/ runs it.
func TestDriverSocketPermissionDenied(t *testing.T) {
	e := healthyEnv(t)
	if err := os.Chmod(e.driverSocket, 0); err != nil {
		t.Fatal(err)
	}
	checks := make(chan []Check, 1)
	failed := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, and its
		// capabilities with it.
		runtime.LockOSThread()
		if err := dropThreadCapabilities(unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH); err != nil {
			failed <- err
			return
		}
		checks <- Run(context.Background(), e.cfg)
	}()
	var c Check
	select {
	case err := <-failed:
		t.Fatalf("dropping CAP_DAC_OVERRIDE from a thread: %v", err)
	case all := <-checks:
		c = all[checkDriverInfo]
	}
	if c.Outcome != Fail {
		t.Fatalf("%s: %s %s, want a failure", c.Name, c.Outcome, c.Detail)
	}
	for _, want := range []string{"permission denied", "write permission", "SELinux"} {
		if !strings.Contains(c.Detail, want) {
			t.Errorf("detail %q lacks %q", c.Detail, want)
		}
	}
	if strings.Contains(c.Detail, "nothing listens") {
		t.Errorf("detail %q blames the driver, which listens", c.Detail)
	}
}

// dropThreadCapabilities removes caps from the calling thread's effective
// set (they stay permitted).
func dropThreadCapabilities(caps ...int) error {
	header := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&header, &data[0]); err != nil {
		return err
	}
	for _, c := range caps {
		data[c/32].Effective &^= 1 << (uint(c) % 32)
	}
	return unix.Capset(&header, &data[0])
}
