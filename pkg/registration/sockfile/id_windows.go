package sockfile

import (
	"io/fs"
	"os"
	"syscall"
)

// Lstat is the identity and type of the file at path. Windows' lstat has no
// file index: the file is asked, as os.SameFile does, but at once.
func Lstat(path string) (ID, fs.FileMode, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return ID{}, 0, err
	}
	name, err := syscall.UTF16PtrFromString(path)
	if err != nil {
		return ID{}, 0, err
	}
	h, err := syscall.CreateFile(name, 0, syscall.FILE_SHARE_READ|syscall.FILE_SHARE_WRITE|syscall.FILE_SHARE_DELETE, nil,
		syscall.OPEN_EXISTING, syscall.FILE_FLAG_BACKUP_SEMANTICS|syscall.FILE_FLAG_OPEN_REPARSE_POINT, 0)
	if err != nil {
		return ID{}, 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.CloseHandle(h)
	var d syscall.ByHandleFileInformation
	if err := syscall.GetFileInformationByHandle(h, &d); err != nil {
		return ID{}, 0, &fs.PathError{Op: "GetFileInformationByHandle", Path: path, Err: err}
	}
	return ID{Dev: uint64(d.VolumeSerialNumber), Ino: uint64(d.FileIndexHigh)<<32 | uint64(d.FileIndexLow), Modified: fi.ModTime().UnixNano()}, fi.Mode(), nil
}
