//go:build !linux

package harness

import (
	"errors"
	"time"
)

// ListenerPID needs SO_PEERCRED, which only Linux has.
func ListenerPID(path string, timeout time.Duration) (int, error) {
	return 0, errors.New("telling which process listens on a Unix socket needs Linux (SO_PEERCRED)")
}
