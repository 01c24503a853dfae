//go:build !windows

package removeall

import "syscall"

const errNotImplemented = syscall.ENOSYS
