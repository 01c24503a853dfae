// Package driver finds the CSI driver through its Unix socket, asks its name
// (GetPluginInfo) and follows its restarts.
//
// csi-lib-utils' connection.Connect is not used: it retries on gRPC's backoff
// until its timeout, where the follower must see a refusal at once and time
// its next attempt by the socket's file system events. Its rpc.GetDriverName
// fails an empty name with its own text, where ValidateName states the rule.
package driver

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
)

// Address is where the CSI driver listens: always a Unix domain socket.
type Address struct {
	Path string
}

// uriScheme matches a URI scheme of two or more characters, so that a Windows
// drive letter ("C:\csi\csi.sock") is read as a path, not as a scheme.
var uriScheme = regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9+.-]+):`)

// ParseAddress reads a --csi-address value. As upstream, everything after
// "unix://" is the path, so that Windows' "unix://C:\\csi\\csi.sock" works.
// Network addresses are refused: kubelet reaches drivers only through Unix
// sockets. A bare "host:port", which upstream dials over TCP, is refused too.
func ParseAddress(addr string) (Address, error) {
	if addr == "" {
		return Address{}, errors.New("the CSI driver address is empty: give the path of the driver's Unix socket, for example /csi/csi.sock")
	}
	path, isUnix := strings.CutPrefix(addr, "unix://")
	if !isUnix {
		path, isUnix = strings.CutPrefix(addr, "unix:")
	}
	if !isUnix && looksLikeHostPort(addr) {
		return Address{}, unsupportedAddress(addr, "is a network address (host:port)")
	}
	if m := uriScheme.FindStringSubmatch(addr); !isUnix && m != nil {
		return Address{}, unsupportedAddress(addr, fmt.Sprintf("has the scheme %q", m[1]))
	}
	if path == "" {
		return Address{}, fmt.Errorf("the CSI driver address %q has no socket path: give the path of the driver's Unix socket, for example unix:///csi/csi.sock", addr)
	}
	return Address{Path: path}, nil
}

func unsupportedAddress(addr, what string) error {
	return fmt.Errorf("the CSI driver address %q %s, which is not supported: the registrar reaches the CSI driver only through "+
		"its Unix domain socket, the one kubelet dials; mount the driver's socket directory "+
		"in this container and give the socket's path, for example /csi/csi.sock or unix:///csi/csi.sock",
		addr, what)
}

// looksLikeHostPort reports whether addr, given without a scheme, reads as
// host:port ("127.0.0.1:10000", "[::1]:10000") rather than as a file name.
func looksLikeHostPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || strings.ContainsAny(addr, `/\`) {
		return false
	}
	_, err = strconv.ParseUint(port, 10, 16)
	return err == nil
}
