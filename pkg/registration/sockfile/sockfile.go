// Package sockfile puts a listening socket in kubelet's plugin registry and
// takes it away: kubelet never sees a socket not listening yet, nor a name
// gone before it looks, and nothing is removed that the socket did not create.
package sockfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Socket is a listening Unix socket that remembers the file it created.
type Socket struct {
	*net.UnixListener
	// Path is "" until the socket is placed.
	Path string
	// Hidden is a dot-prefixed second name, which kubelet ignores.
	Hidden string
	File   ID
}

// Listen listens on a new hidden sibling of path, mode 0600.
func Listen(path string) (*Socket, error) {
	hidden, err := hiddenPath(path)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", hidden)
	if err != nil {
		// The hidden name means nothing to an operator; the directory does.
		cause := err
		if opErr, ok := errors.AsType[*net.OpError](err); ok {
			cause = opErr.Err // "bind: read-only file system"
		}
		return nil, fmt.Errorf("cannot create a socket in %s: %w", filepath.Dir(path), cause)
	}
	// Not the umask, which is the whole process's; kubelet runs as root.
	if err := os.Chmod(hidden, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("cannot restrict the mode of %q: %w", hidden, err)
	}
	return own(l, &Socket{Hidden: hidden}, hidden)
}

// own completes s with l and the socket file that l created at name, kept
// when l closes. On failure it closes l, which removes the file.
func own(l net.Listener, s *Socket, name string) (*Socket, error) {
	s.UnixListener = l.(*net.UnixListener)
	file, _, err := Lstat(name)
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("cannot inspect %q: %w", name, err)
	}
	// Names are removed only while still ours, never by Close.
	s.SetUnlinkOnClose(false)
	s.File = file
	return s, nil
}

// Publish puts a listening socket at path, replacing there the socket
// replace (zero: none): spare when given, or a new one. On Windows, where
// no socket file is linked, renamed or has its mode changed, as upstream's
// registrar does: what is there is removed and a socket bound at path.
func Publish(path string, replace ID, spare *Socket) (*Socket, error) {
	if runtime.GOOS == "windows" {
		return listenAt(path, replace)
	}
	sock, err := spare, error(nil)
	if sock == nil {
		sock, err = Listen(path)
	}
	if err == nil {
		err = sock.Place(path, replace)
	}
	return sock, err
}

func listenAt(path string, replace ID) (*Socket, error) {
	if replace != (ID{}) {
		if _, err := RemoveIfSame(path, replace); err != nil {
			return nil, fmt.Errorf("cannot remove the socket at %q: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode().Type() != fs.ModeSocket {
			return nil, &NotASocketError{Path: path, Mode: fi.Mode()}
		}
		return nil, fmt.Errorf("cannot listen at %s: %w", path, err)
	}
	return own(l, &Socket{Path: path}, path)
}

// ID identifies a file as os.SameFile does, and by its modification time,
// which tells a new file from a removed one whose inode it reuses; zero is
// no file.
type ID struct {
	Dev, Ino uint64
	Modified int64 // in nanoseconds since the Unix epoch
}

// Place hard-links the socket to path. The hidden name stays, since
// kubelet's watcher stats every created file (dot or not) and logs an error
// for one gone; so replace is removed first, while it is still that file,
// rather than renamed over. Without hard links, or when the path was taken
// meanwhile, the socket is renamed into place. On failure it is closed.
func (s *Socket) Place(path string, replace ID) error {
	fail := func(err error) error {
		_ = s.Close()
		_, _ = RemoveIfSame(s.Hidden, s.File)
		return err
	}
	err := os.Link(s.Hidden, path)
	if errors.Is(err, fs.ErrExist) && replace != (ID{}) {
		if _, err := RemoveIfSame(path, replace); err != nil {
			return fail(fmt.Errorf("cannot remove the socket at %q: %w", path, err))
		}
		err = os.Link(s.Hidden, path)
	}
	if err != nil {
		// No rename replaces only a socket; this narrows the gap.
		if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != fs.ModeSocket {
			return fail(&NotASocketError{Path: path, Mode: fi.Mode()})
		}
		if err := os.Rename(s.Hidden, path); err != nil {
			return fail(fmt.Errorf("cannot move the registration socket into place at %q: %w", path, err))
		}
		s.Hidden = ""
	}
	s.Path = path
	return nil
}

// NotASocketError: something a Socket never replaces is at Path.
type NotASocketError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotASocketError) Error() string {
	return fmt.Sprintf("%q is a %s, not a socket: the registrar only replaces sockets; remove or move it if it is not needed", e.Path, DescribeFileType(e.Mode))
}

// fileTypes names the types of file an operator may find at a path.
var fileTypes = map[fs.FileMode]string{
	0:                                 "regular file",
	fs.ModeDir:                        "directory",
	fs.ModeSymlink:                    "symbolic link",
	fs.ModeNamedPipe:                  "named pipe",
	fs.ModeDevice:                     "device",
	fs.ModeDevice | fs.ModeCharDevice: "device",
	fs.ModeSocket:                     "socket",
}

// DescribeFileType names the type of a file for an operator.
func DescribeFileType(m fs.FileMode) string {
	if name, ok := fileTypes[m.Type()]; ok {
		return name
	}
	return "special file"
}

// Remove unlinks the path while it holds this socket's file, and the
// hidden name, which is this socket's alone. A name the socket does not
// have ("") is never there.
func (s *Socket) Remove() (removed bool, err error) {
	if _, err := RemoveIfSame(s.Hidden, s.File); err != nil {
		return false, err
	}
	return RemoveIfSame(s.Path, s.File)
}

// RemoveIfSame unlinks path while it holds file.
func RemoveIfSame(path string, file ID) (removed bool, err error) {
	switch id, _, err := Lstat(path); {
	case errors.Is(err, fs.ErrNotExist), err == nil && id != file:
		return false, nil // nothing there, or another file
	case err != nil:
		return false, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// IsShortage: a resource that runs out for a while, so that publishing
// again later may work, where exiting would leave the node unregistered.
func IsShortage(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOSPC, syscall.EDQUOT, syscall.ENOMEM, syscall.ENOBUFS} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// Answers tells a live socket from one left behind by a dead process.
func Answers(path string, timeout time.Duration) bool {
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// IsHiddenName tells whether name is a hidden name of the socket at path,
// ".<driver>.<6 hex digits>".
func IsHiddenName(path, name string) bool {
	driver := strings.TrimSuffix(filepath.Base(path), "-reg.sock")
	suffix, ok := strings.CutPrefix(name, "."+driver+".")
	return ok && driver != "" && len(suffix) == 6 && strings.Trim(suffix, "0123456789abcdef") == ""
}

// hiddenPath is no longer than path, so that it fits a socket address too.
func hiddenPath(path string) (string, error) {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	dir, base := filepath.Split(path)
	return filepath.Join(dir, "."+strings.TrimSuffix(base, "-reg.sock")+"."+hex.EncodeToString(b[:])), nil
}

// RemoveLeftovers removes the driver's hidden sockets that nobody listens
// on, left by a registrar that was killed.
func RemoveLeftovers(path string, timeout time.Duration) (removed []string) {
	dir := filepath.Dir(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		if !IsHiddenName(path, e.Name()) || e.Type() != fs.ModeSocket {
			continue
		}
		// One that answers is a live registrar's.
		full := filepath.Join(dir, e.Name())
		if !Answers(full, timeout) && os.Remove(full) == nil {
			removed = append(removed, full)
		}
	}
	return removed
}
