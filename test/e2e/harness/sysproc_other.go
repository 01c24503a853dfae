//go:build !linux

package harness

import "syscall"

// sysProcAttr puts a child in its own process group, so a Ctrl-C at the
// terminal reaches only the program that started it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
