// Package sockfile puts a listening Unix socket in place under its final
// name in kubelet's plugin registry directory, and takes it away, the way
// kubelet's plugin watcher needs: kubelet never sees a socket that is not
// listening yet, nor a name that is gone before it looks at it, and
// nothing is removed that the socket did not create.
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
	"strings"
	"syscall"
	"time"
)

// Socket is a listening Unix socket that remembers the file it created.
type Socket struct {
	*net.UnixListener
	// Path is the socket's final name, "" until it is placed.
	Path string
	// Hidden is a second name of the same socket, dot-prefixed so that
	// kubelet ignores it, "" when there is none; it is removed with the
	// socket.
	Hidden string
	// File is the file the socket was bound to.
	File ID
}

// Listen listens on a new hidden (dot-prefixed) sibling of path, mode 0600,
// which Place gives its final name.
func Listen(path string) (*Socket, error) {
	hidden, err := hiddenPath(path)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", hidden)
	if err != nil {
		// The hidden name is this attempt's own and means nothing to an
		// operator: the directory is what to fix.
		cause := err
		var opErr *net.OpError
		if errors.As(err, &opErr) {
			cause = opErr.Err // "bind: read-only file system"
		}
		return nil, fmt.Errorf("cannot create a socket in %s: %w", filepath.Dir(path), cause)
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
		return nil, fmt.Errorf("cannot restrict the mode of %q: %w", hidden, err)
	}
	file, _, err := Lstat(hidden)
	if err != nil {
		_ = ul.Close()
		_ = os.Remove(hidden)
		return nil, fmt.Errorf("cannot inspect %q: %w", hidden, err)
	}
	return &Socket{UnixListener: ul, Hidden: hidden, File: file}, nil
}

// ID identifies a file, as os.SameFile does, in a plain comparable value
// (Lstat): a file put at a path since has another. The zero ID is no
// file.
type ID struct{ Dev, Ino uint64 }

// Place gives the socket its final name, path, as a hard link: kubelet
// sees a newly created plugin socket.
//
// The hidden name is kept while the socket is published: kubelet's plugin
// watcher stats every created file before it checks for the leading dot,
// and logs an error when the file is already gone. So a socket at the
// path, replace (the caller's own, or a dead one), is removed first, and
// only while it is still that file, rather than renamed over: a rename
// would take the hidden name away. Where the path is taken by another
// socket meanwhile, or the file system has no hard links for sockets, the
// socket is renamed into place, which replaces a socket atomically. On
// failure the socket is closed and its hidden name removed.
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
		// There is no way to rename only over a socket; this check
		// narrows the gap.
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

// NotASocketError: something other than a socket is at Path, which a
// Socket never replaces.
type NotASocketError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotASocketError) Error() string {
	return fmt.Sprintf("%q is a %s, not a socket: the registrar only replaces sockets; remove or move it if it is not needed", e.Path, DescribeFileType(e.Mode))
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

// Remove unlinks the path when it still holds the file this socket
// created; a socket published there by another process is left alone.
// The hidden name is private to this socket and always removed.
func (s *Socket) Remove() (removed bool, err error) {
	if s.Hidden != "" {
		if _, err := RemoveIfSame(s.Hidden, s.File); err != nil {
			return false, err
		}
	}
	if s.Path == "" {
		return false, nil
	}
	return RemoveIfSame(s.Path, s.File)
}

// RemoveIfSame unlinks path while it holds file.
func RemoveIfSame(path string, file ID) (removed bool, err error) {
	id, _, err := Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if id != file {
		return false, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// IsShortage tells whether err comes from a resource of the node or the
// process that runs out for a while: file descriptors, inodes, disk quota,
// memory or socket buffers. Publishing again later may well work; exiting
// would leave the node without a registration until a restart.
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

// HiddenDriver tells whether name is a registrar's hidden name of a
// registration socket, ".<driver>.<6 hex digits>" (kubelet ignores
// dot-files), and for which driver.
func HiddenDriver(name string) (driver string, ok bool) {
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

// IsHiddenName tells whether name is a hidden name of the registration
// socket at path (HiddenDriver).
func IsHiddenName(path, name string) bool {
	driver, ok := HiddenDriver(name)
	return ok && driver == strings.TrimSuffix(filepath.Base(path), "-reg.sock")
}

// hiddenPath names a dot-prefixed sibling of path, unique to this call,
// that is no longer than path itself, so that it fits in a Unix socket
// address whenever path does.
func hiddenPath(path string) (string, error) {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	dir, base := filepath.Split(path)
	return filepath.Join(dir, "."+strings.TrimSuffix(base, "-reg.sock")+"."+hex.EncodeToString(b[:])), nil
}

// RemoveLeftovers removes hidden sockets that an earlier registrar for the
// same driver left behind when it was killed: names of the form
// .<driver>.<6 hex digits> that nobody listens on. Live ones belong to
// another running instance and stay.
func RemoveLeftovers(path string, timeout time.Duration) (removed []string) {
	dir := filepath.Dir(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		name := e.Name()
		if !IsHiddenName(path, name) || e.Type() != fs.ModeSocket {
			continue
		}
		full := filepath.Join(dir, name)
		if Answers(full, timeout) {
			continue
		}
		if os.Remove(full) == nil {
			removed = append(removed, full)
		}
	}
	return removed
}
