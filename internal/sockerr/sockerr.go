// Package sockerr recognises socket errors on each system: on Windows a busy
// address is WSAEADDRINUSE, which syscall.EADDRINUSE never matches.
package sockerr

import "errors"

// AddrInUse tells whether err wraps a bind to an address already held.
func AddrInUse(err error) bool {
	return errors.Is(err, addrInUse)
}
