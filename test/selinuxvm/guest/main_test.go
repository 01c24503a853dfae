//go:build linux

package guest

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// Files the host puts into the initramfs (hack/selinux-vm.sh).
const (
	policyFile    = "/policy.bin"
	registrarBin  = "/bin/registrar"
	mockdriverBin = "/bin/mockdriver"
	kubeletBin    = "/bin/kubelet"
)

// Markers the host looks for on the serial console.
const (
	passMarker = "SELINUXVM: PASS"
	failMarker = "SELINUXVM: FAIL"
)

var kmsg *Kmsg

// TestMain is the VM's init: it sets the kernel up, runs the scenarios,
// prints the verdict and powers off. Anywhere but PID 1 it runs the tests
// as go test does, and the scenarios skip.
func TestMain(m *testing.M) {
	if !inVM() {
		os.Exit(m.Run())
	}
	// The console may hold the firmware's escape sequences: start a line.
	fmt.Println()
	code := 1
	if err := setUp(); err != nil {
		fmt.Println("setting the VM up:", err)
	} else {
		code = m.Run()
	}
	if code == 0 {
		fmt.Println(passMarker)
	} else {
		fmt.Println(failMarker)
	}
	if err := PowerOff(); err != nil {
		fmt.Println("power off:", err)
	}
	// Returning from PID 1 panics the kernel; qemu's -no-reboot ends then.
	select {}
}

func setUp() error {
	if err := Boot(); err != nil {
		return err
	}
	var err error
	if kmsg, err = ReadKmsg(); err != nil {
		return err
	}
	lsm, err := LSMs()
	if err != nil {
		return err
	}
	fmt.Println("active LSMs:", lsm)
	if !strings.Contains(lsm, "selinux") {
		return fmt.Errorf("SELinux is not among the active LSMs %q: boot with lsm=...,selinux", lsm)
	}
	if err := LoadPolicy(policyFile); err != nil {
		return err
	}
	self, err := ProcessLabel(os.Getpid())
	if err != nil {
		return err
	}
	fmt.Println("init runs in", self)
	return SetEnforce(true)
}

// inVM: this process is the VM's /init.
func inVM() bool { return os.Getpid() == 1 }
