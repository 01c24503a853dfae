package sockfile

import (
	"io/fs"
	"syscall"
)

// IDOf is the identity of the file fi describes. An lstat on Windows
// gives no file index, so the creation time stands in for the inode: a
// socket put at a path since has another (100 ns resolution).
func IDOf(fi fs.FileInfo) ID {
	attrs, ok := fi.Sys().(*syscall.Win32FileAttributeData)
	if !ok {
		return ID{}
	}
	return ID{Ino: uint64(attrs.CreationTime.HighDateTime)<<32 | uint64(attrs.CreationTime.LowDateTime)}
}
