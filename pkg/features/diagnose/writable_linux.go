package diagnose

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// checkWritable tells whether this process may create files in dir, as the
// registrar does, without creating a name there: an unnamed file
// (O_TMPFILE) goes through the same checks (mode bits, a read-only mount,
// SELinux's write on the directory) and leaves no trace. A name that came
// and went at once would make kubelet's plugin watcher log an error: it
// stats every file created in the directory, dot-files too. Where the file
// system has no unnamed files, access(2) answers instead.
func checkWritable(dir string) (detail string, err error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err == nil {
		_ = unix.Close(fd)
		return "created an unnamed test file", nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
		return "", &os.PathError{Op: "open", Path: dir, Err: err}
	}
	if err := unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS); err != nil {
		return "", &os.PathError{Op: "access", Path: dir, Err: err}
	}
	return "access(2) allows writing", nil
}
