// Package driver finds the CSI driver and learns its name: it waits for the
// driver's Unix socket to appear, asks the driver's Identity service for its
// name (GetPluginInfo) and checks that name against the CSI specification.
package driver

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
)

// Address is where the CSI driver listens: always a Unix domain socket,
// because the registrar and the driver share the socket through a volume of
// their pod.
type Address struct {
	// Path is the socket's file system path as given. A relative path is
	// relative to the working directory.
	Path string
}

// String returns the address in the "unix://" form used by --csi-address.
func (a Address) String() string {
	return "unix://" + a.Path
}

// uriScheme matches a URI scheme of two or more characters, so that a Windows
// drive letter ("C:\csi\csi.sock") is read as a path, not as a scheme.
var uriScheme = regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9+.-]+):`)

// ParseAddress reads a --csi-address value: "unix:///abs/path", "unix:path",
// or a bare path, which means the same as "unix://path".
//
// Like upstream, everything after "unix://" is the path, so Windows manifests'
// "unix://C:\\csi\\csi.sock" works. Other schemes and host:port addresses are
// rejected: upstream only reached them by accident through gRPC's default
// resolver, and kubelet itself can only use a driver on a Unix socket.
func ParseAddress(addr string) (Address, error) {
	if addr == "" {
		return Address{}, errors.New("the CSI driver address is empty: give the path of the driver's Unix socket, for example /csi/csi.sock")
	}
	var path string
	switch {
	case strings.HasPrefix(addr, "unix://"):
		path = strings.TrimPrefix(addr, "unix://")
	case strings.HasPrefix(addr, "unix:"):
		path = strings.TrimPrefix(addr, "unix:")
	default:
		if m := uriScheme.FindStringSubmatch(addr); m != nil {
			return Address{}, unsupportedAddress(addr, fmt.Sprintf("the scheme %q is not supported", m[1]))
		}
		if looksLikeHostPort(addr) {
			return Address{}, unsupportedAddress(addr, "it looks like a network address")
		}
		path = addr
	}
	if path == "" {
		return Address{}, fmt.Errorf("the CSI driver address %q has no socket path: give the path of the driver's Unix socket, for example unix:///csi/csi.sock", addr)
	}
	return Address{Path: path}, nil
}

func unsupportedAddress(addr, reason string) error {
	return fmt.Errorf("the CSI driver address %q is not supported: %s; only Unix domain sockets are supported "+
		"(\"unix:///path\" or a path), because the registrar reaches the driver through a socket in a volume shared by the pod",
		addr, reason)
}

// looksLikeHostPort reports whether addr, given without a scheme, reads as
// host:port ("127.0.0.1:10000", "[::1]:10000") rather than as a file name.
func looksLikeHostPort(addr string) bool {
	if strings.ContainsAny(addr, `/\`) {
		return false
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	_, err = strconv.ParseUint(port, 10, 16)
	return err == nil
}
