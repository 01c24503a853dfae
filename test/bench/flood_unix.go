//go:build unix

package main

import (
	"fmt"
	"syscall"
)

// ensureOpenFiles raises the soft limit of open files to the hard one when
// it is below n. Go does so itself at start on Linux; this says clearly
// when the hard limit is too low.
func ensureOpenFiles(n int) error {
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		return err
	}
	if limit.Cur >= uint64(n) {
		return nil
	}
	if limit.Max < uint64(n) {
		return fmt.Errorf("the flood needs %d open files, and the hard limit is %d: raise it (ulimit -Hn) or use smaller -flood-*-conns", n, limit.Max)
	}
	limit.Cur = limit.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit)
}
