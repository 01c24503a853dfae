//go:build !windows

package afunix

import "syscall"

const errNoFamily = syscall.EAFNOSUPPORT
