package harness

import (
	"fmt"
	"net"
	"syscall"
	"time"
)

// ListenerPID connects to the Unix socket at path and returns the ID of the
// process that called listen(2) on the socket that accepted: the kernel
// records it then, and gives it to each connecting client as the peer's
// credentials (SO_PEERCRED). It tells which of two processes serves a path
// when both answer alike. A listening socket passed to another process
// (SCM_RIGHTS, the registrar's handover) keeps the first process's ID.
func ListenerPID(path string, timeout time.Duration) (int, error) {
	conn, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, fmt.Errorf("SO_PEERCRED on a connection to %s: %w", path, credErr)
	}
	return int(cred.Pid), nil
}
