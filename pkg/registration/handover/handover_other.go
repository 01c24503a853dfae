//go:build !unix

package handover

import (
	"errors"
	"net"
)

// Supported: without SCM_RIGHTS a newer instance replaces the socket.
const Supported = false

var errNoHandover = errors.New("sockets cannot be handed over on this platform")

func sendListener(*net.UnixConn, []byte, *net.UnixListener) error { return errNoHandover }

func receiveListener(*net.UnixConn) ([]byte, *net.UnixListener, error) {
	return nil, nil, errNoHandover
}
