package harness

import "syscall"

// sysProcAttr puts a child in its own process group, so a Ctrl-C at the
// terminal reaches only the program that started it (which stops children in
// its own order), and kills the child if that program dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
