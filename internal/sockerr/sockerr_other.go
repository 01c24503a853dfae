//go:build !windows

package sockerr

import "syscall"

const addrInUse = syscall.EADDRINUSE
