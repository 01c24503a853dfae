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
		return fmt.Errorf("registration directory %q does not exist: mount the host's kubelet plugin registry (usually /var/lib/kubelet/plugins_registry) there, or point --plugin-registration-path at it", dir)
	case err != nil:
		return fmt.Errorf("registration directory %q cannot be read: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("registration directory %q is not a directory (%s): point --plugin-registration-path at kubelet's plugin registry directory", dir, describeMode(fi.Mode()))
	}
	return nil
}

// checkSocketPath refuses a path that cannot be bound or that holds
// something the registrar must not replace. It reports whether a socket
// is already there.
func checkSocketPath(path string) (socketExists bool, err error) {
	if len(path) > MaxSocketPathLength {
		return false, fmt.Errorf("registration socket path %q is %d bytes long, more than the %d a Unix socket allows: use a shorter --plugin-registration-path", path, len(path), MaxSocketPathLength)
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
		return false, fmt.Errorf("%q is a %s, not a socket: the registrar only replaces sockets; remove or move it if it is not needed", path, describeMode(fi.Mode()))
	}
}

func describeMode(m fs.FileMode) string {
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

// publishedSocket is a listening socket that was moved into place under
// its final name. It remembers the file it created, so that it never
// removes a socket another instance published at the same path.
type publishedSocket struct {
	net.Listener
	path string
	own  fs.FileInfo
}

// publish listens at path without kubelet ever seeing a socket that is
// not ready: it binds under a dot-prefixed name in the same directory,
// which kubelet's plugin watcher ignores, restricts its mode, and renames
// it over path. The rename replaces whatever socket is there atomically,
// and kubelet sees it as a newly created plugin socket.
func publish(path string) (*publishedSocket, error) {
	tmp, err := tempSocketPath(path)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %q: %w", tmp, err)
	}
	ul := l.(*net.UnixListener)
	// The file is renamed and later removed only if still ours; the
	// listener must not unlink a name on Close.
	ul.SetUnlinkOnClose(false)
	fail := func(err error) (*publishedSocket, error) {
		_ = l.Close()
		_ = os.Remove(tmp)
		return nil, err
	}
	// Owner only: kubelet runs as root. Setting the umask instead would
	// change it for every goroutine of the process.
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fail(fmt.Errorf("cannot restrict the mode of %q: %w", tmp, err))
	}
	// Identify the file before it becomes visible: once renamed, another
	// instance may replace it at any moment.
	own, err := os.Lstat(tmp)
	if err != nil {
		return fail(fmt.Errorf("cannot inspect %q: %w", tmp, err))
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(fmt.Errorf("cannot move the registration socket into place at %q: %w", path, err))
	}
	return &publishedSocket{Listener: l, path: path, own: own}, nil
}

// tempSocketPath names a hidden sibling of path that is no longer than
// path itself, so that it fits in a Unix socket address whenever path does.
func tempSocketPath(path string) (string, error) {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	dir, base := filepath.Split(path)
	base = strings.TrimSuffix(base, "-reg.sock")
	return filepath.Join(dir, "."+base+"."+hex.EncodeToString(b[:])), nil
}

// isOurs tells whether fi is the file this socket created.
func (s *publishedSocket) isOurs(fi fs.FileInfo) bool {
	return os.SameFile(fi, s.own)
}

// removeIfOurs unlinks the path when it still holds the file this socket
// created; a socket published there by a newer instance is left alone.
func (s *publishedSocket) removeIfOurs() (removed bool, err error) {
	fi, err := os.Lstat(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !s.isOurs(fi) {
		return false, nil
	}
	if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}
