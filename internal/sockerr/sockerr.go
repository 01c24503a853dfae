// Package sockerr recognises the socket errors the registrar acts on, by
// their number on each system: syscall's Errno.Is maps Unix numbers only,
// so errors.Is(err, syscall.EADDRINUSE) never holds on Windows, where a
// busy address is Winsock's WSAEADDRINUSE (10048).
package sockerr

import "errors"

// AddrInUse tells whether err, or an error it wraps, is a bind to an
// address that another socket holds.
func AddrInUse(err error) bool {
	return errors.Is(err, addrInUse)
}
