package driver

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"google.golang.org/grpc/status"
)

// connectAdvice says, for each error of connect(2) on a Unix socket that
// tells something of its own about the driver's socket, what to do.
var connectAdvice = map[syscall.Errno]func(path string) string{
	syscall.EACCES: permissionAdvice,
	syscall.EPERM:  permissionAdvice,
	syscall.ECONNREFUSED: func(string) string {
		return "nothing listens on the driver socket: the driver is not running or is restarting (its container's logs, kubectl describe pod), or the file is a socket an earlier driver left behind"
	},
	syscall.ENOENT: func(path string) string {
		return "the driver's socket is not there: the driver has not created it yet or removed it, or this container does not mount the driver's socket directory at " + filepath.Dir(path)
	},
	syscall.ENOTDIR: func(string) string {
		return "a part of the path is not a directory: check --csi-address and the volume mounts"
	},
	syscall.EAGAIN: func(string) string {
		return "the driver's socket takes no more connections (its listen queue is full): the driver does not accept them; check its logs"
	},
}

func permissionAdvice(string) string {
	return "the registrar may not connect to the driver's socket, which says nothing of the driver: the socket needs write permission for the registrar's user or group (root without CAP_DAC_OVERRIDE, as deploy/ runs it, is held to the file's mode too: run both containers as root, or give the socket's group to the registrar), and where SELinux or AppArmor is on, their policy must let this container connect to it (--diagnose has a line for SELinux)"
}

// connectErrno is the errno of a failed connect in err that connectAdvice
// knows, 0 for another error; from its text where a gRPC status kept only that.
func connectErrno(err error) syscall.Errno {
	if errno, ok := errors.AsType[syscall.Errno](err); ok {
		if connectAdvice[errno] == nil {
			return 0
		}
		return errno
	}
	message := status.Convert(err).Message()
	for errno := range connectAdvice {
		if strings.Contains(message, "connect: "+errno.Error()) {
			return errno
		}
	}
	return 0
}

// ConnectAdvice says what to do when connecting to the driver's socket at
// path failed with err; "" when err is not a connect error it knows.
func ConnectAdvice(err error, path string) string {
	if errno := connectErrno(err); errno != 0 {
		return connectAdvice[errno](path)
	}
	return ""
}

// Unreachable says, for an operator, why an attempt to ask the driver failed.
func Unreachable(path string, err error) string {
	if errno := connectErrno(err); errno != 0 {
		return fmt.Sprintf("cannot connect to %s (%v): %s", path, errno, connectAdvice[errno](path))
	}
	st := status.Convert(err)
	return fmt.Sprintf("GetPluginInfo on %s failed: %s: %s", path, st.Code(), st.Message())
}
