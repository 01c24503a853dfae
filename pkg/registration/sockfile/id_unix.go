//go:build unix

package sockfile

import (
	"io/fs"
	"syscall"
)

// IDOf is the identity of the file fi describes: its device and inode.
func IDOf(fi fs.FileInfo) ID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ID{}
	}
	// The field types differ between platforms.
	return ID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}
}
