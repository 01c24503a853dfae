//go:build unix

package sockfile

import (
	"io/fs"
	"os"
	"syscall"
)

// Lstat is the identity (device and inode) and type of the file at path.
func Lstat(path string) (ID, fs.FileMode, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return ID{}, 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ID{}, 0, &fs.PathError{Op: "lstat", Path: path, Err: syscall.EINVAL}
	}
	// The field types differ between platforms.
	return ID{Dev: uint64(st.Dev), Ino: uint64(st.Ino), Modified: fi.ModTime().UnixNano()}, fi.Mode(), nil
}
