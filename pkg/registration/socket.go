package registration

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// MaxSocketPathLength is the longest path a Unix socket can be bound to:
// sun_path holds 108 bytes on Linux, one of them the terminating NUL.
const MaxSocketPathLength = 107

// SocketPath is where kubelet expects the registration socket of a driver.
func SocketPath(dir, driverName string) string {
	return filepath.Join(dir, driverName+"-reg.sock")
}

// CheckDir tells whether dir can hold registration sockets.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return dirError(fmt.Errorf("registration directory %q does not exist: mount the host's kubelet plugin registry (usually /var/lib/kubelet/plugins_registry) there", dir))
	case err != nil:
		return dirError(fmt.Errorf("registration directory %q cannot be read: %w", dir, err))
	case !fi.IsDir():
		return dirError(fmt.Errorf("registration directory %q is not a directory (%s): it must be kubelet's plugin registry directory", dir, DescribeFileType(fi.Mode())))
	}
	return nil
}

// ConfigError is a value of Config that cannot be used; Field names it.
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func dirError(err error) error { return &ConfigError{Field: "Dir", Err: err} }

// checkSocketPath refuses a path that cannot be bound or that holds
// something the registrar must not replace. It reports whether a socket
// is already there.
func checkSocketPath(path string) (socketExists bool, err error) {
	if len(path) > MaxSocketPathLength {
		return false, dirError(fmt.Errorf("registration socket path %q is %d bytes long, more than the %d a Unix socket allows: use a shorter registration directory", path, len(path), MaxSocketPathLength))
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("cannot inspect %q: %w", path, err)
	case fi.Mode().Type() == fs.ModeSocket:
		return true, nil
	default:
		return false, fmt.Errorf("%q is a %s, not a socket: the registrar only replaces sockets; remove or move it if it is not needed", path, DescribeFileType(fi.Mode()))
	}
}

// DescribeFileType names the type of a file for an operator: "regular
// file", "directory", "symbolic link", ...
func DescribeFileType(m fs.FileMode) string {
	switch m.Type() {
	case 0:
		return "regular file"
	case fs.ModeDir:
		return "directory"
	case fs.ModeSymlink:
		return "symbolic link"
	case fs.ModeNamedPipe:
		return "named pipe"
	case fs.ModeDevice, fs.ModeDevice | fs.ModeCharDevice:
		return "device"
	case fs.ModeSocket:
		return "socket"
	default:
		return "special file"
	}
}

// socketAnswers tells a live socket from one left behind by a dead process.
func socketAnswers(path string, timeout time.Duration) bool {
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// publishedSocket is a listening socket that was put in place under its
// final name. It remembers the file it created, so that it never removes a
// socket another instance published at the same path.
type publishedSocket struct {
	net.Listener
	path string
	// hidden is a second name of the same socket, dot-prefixed so that
	// kubelet ignores it; it is removed with the socket.
	hidden string
	own    fs.FileInfo
}

// publishSocket listens at path without kubelet ever seeing a socket that
// is not ready, nor a name that is gone before kubelet looks at it: it
// binds under a hidden (dot-prefixed) name in the same directory,
// restricts the mode, and gives the socket its final name as a hard link.
// Kubelet sees a newly created plugin socket.
//
// The hidden name is kept while the socket is published: kubelet's plugin
// watcher stats every created file before it checks for the leading dot,
// and logs an error when the file is already gone. So a socket at the
// path, replace (this instance's own, or a dead one), is removed first,
// and only while it is still that file, rather than renamed over: a rename
// would take the hidden name away. Where the path is taken by another
// socket meanwhile, or the file system has no hard links for sockets, the
// socket is renamed into place, which replaces a socket atomically.
func publishSocket(path string, replace fs.FileInfo) (*publishedSocket, error) {
	l, hidden, own, err := listenHidden(path)
	if err != nil {
		return nil, err
	}
	return placeSocket(l, hidden, own, path, replace)
}

// placeSocket gives the socket l, listening on hidden (the file own), its
// final name path (see publishSocket); on failure l is closed and hidden
// removed.
func placeSocket(l net.Listener, hidden string, own fs.FileInfo, path string, replace fs.FileInfo) (*publishedSocket, error) {
	fail := func(err error) (*publishedSocket, error) {
		_ = l.Close()
		_, _ = removeIfSame(hidden, own)
		return nil, err
	}
	sock := &publishedSocket{Listener: l, path: path, hidden: hidden, own: own}
	err := os.Link(hidden, path)
	if errors.Is(err, fs.ErrExist) && replace != nil {
		if _, err := removeIfSame(path, replace); err != nil {
			return fail(fmt.Errorf("cannot remove the socket at %q: %w", path, err))
		}
		err = os.Link(hidden, path)
	}
	if err != nil {
		// There is no way to rename only over a socket; this check
		// narrows the gap.
		if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != fs.ModeSocket {
			return fail(fmt.Errorf("%q is a %s, not a socket: the registrar only replaces sockets; remove or move it if it is not needed", path, DescribeFileType(fi.Mode())))
		}
		if err := os.Rename(hidden, path); err != nil {
			return fail(fmt.Errorf("cannot move the registration socket into place at %q: %w", path, err))
		}
		sock.hidden = ""
	}
	return sock, nil
}

// isShortage tells whether err comes from a resource of the node or the
// process that runs out for a while: file descriptors, inodes, disk quota,
// memory or socket buffers. Publishing again later may well work; exiting
// would leave the node without a registration until a restart.
func isShortage(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOSPC, syscall.EDQUOT, syscall.ENOMEM, syscall.ENOBUFS} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// listenHidden listens on a new hidden (dot-prefixed) sibling of path,
// mode 0600, and returns it with the name and the file it created.
func listenHidden(path string) (*net.UnixListener, string, fs.FileInfo, error) {
	hidden, err := hiddenSocketPath(path)
	if err != nil {
		return nil, "", nil, err
	}
	l, err := net.Listen("unix", hidden)
	if err != nil {
		return nil, "", nil, fmt.Errorf("cannot listen on %q: %w", hidden, err)
	}
	ul := l.(*net.UnixListener)
	// The names are removed only while they are still ours; the listener
	// must not unlink anything on Close.
	ul.SetUnlinkOnClose(false)
	// Owner only: kubelet runs as root. Setting the umask instead would
	// change it for every goroutine of the process.
	if err := os.Chmod(hidden, 0o600); err != nil {
		_ = ul.Close()
		_ = os.Remove(hidden)
		return nil, "", nil, fmt.Errorf("cannot restrict the mode of %q: %w", hidden, err)
	}
	own, err := os.Lstat(hidden)
	if err != nil {
		_ = ul.Close()
		_ = os.Remove(hidden)
		return nil, "", nil, fmt.Errorf("cannot inspect %q: %w", hidden, err)
	}
	return ul, hidden, own, nil
}

// HiddenSocketDriver tells whether name is a registrar's hidden name of a
// registration socket, ".<driver>.<6 hex digits>" (kubelet ignores
// dot-files), and for which driver.
func HiddenSocketDriver(name string) (driver string, ok bool) {
	rest, ok := strings.CutPrefix(name, ".")
	if !ok || len(rest) < 8 || rest[len(rest)-7] != '.' {
		return "", false
	}
	suffix := rest[len(rest)-6:]
	if strings.Trim(suffix, "0123456789abcdef") != "" {
		return "", false
	}
	return rest[:len(rest)-7], true
}

// isHiddenName tells whether name is a hidden name of the registration
// socket at path (HiddenSocketDriver).
func isHiddenName(path, name string) bool {
	driver, ok := HiddenSocketDriver(name)
	return ok && driver == strings.TrimSuffix(filepath.Base(path), "-reg.sock")
}

// hiddenSocketPath names a dot-prefixed sibling of path, unique to this
// call, that is no longer than path itself, so that it fits in a Unix
// socket address whenever path does.
func hiddenSocketPath(path string) (string, error) {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	dir, base := filepath.Split(path)
	return filepath.Join(dir, "."+strings.TrimSuffix(base, "-reg.sock")+"."+hex.EncodeToString(b[:])), nil
}

// removeIfOurs unlinks the path when it still holds the file this socket
// created; a socket published there by a newer instance is left alone. The
// hidden name is private to this socket and always removed.
func (s *publishedSocket) removeIfOurs() (removed bool, err error) {
	if s.hidden != "" {
		if _, err := removeIfSame(s.hidden, s.own); err != nil {
			return false, err
		}
	}
	return removeIfSame(s.path, s.own)
}

// removeIfSame unlinks path while it holds the file own.
func removeIfSame(path string, own fs.FileInfo) (removed bool, err error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !os.SameFile(fi, own) {
		return false, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// removeLeftovers removes hidden sockets that an earlier registrar for the
// same driver left behind when it was killed: names of the form
// .<driver>.<6 hex digits> that nobody listens on. Live ones belong to
// another running instance and stay.
func removeLeftovers(path string, timeout time.Duration) (removed []string) {
	dir := filepath.Dir(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		name := e.Name()
		if !isHiddenName(path, name) || e.Type() != fs.ModeSocket {
			continue
		}
		full := filepath.Join(dir, name)
		if socketAnswers(full, timeout) {
			continue
		}
		if os.Remove(full) == nil {
			removed = append(removed, full)
		}
	}
	return removed
}
