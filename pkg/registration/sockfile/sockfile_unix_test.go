//go:build unix

package sockfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A published socket keeps its hidden name beside the final one (kubelet
// stats each new name before it skips dot-files), replaces only the socket
// it is told to, and removes only its own names.
func TestPublishReplaceRemove(t *testing.T) {
	dir, err := os.MkdirTemp("", "sf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "x.csi.example.com-reg.sock")

	first, err := Publish(path, ID{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if first.Path != path || first.Hidden == "" || !IsHiddenName(path, filepath.Base(first.Hidden)) {
		t.Fatalf("published %q with hidden name %q", first.Path, first.Hidden)
	}
	if id, _, err := Lstat(first.Hidden); err != nil || id != first.File {
		t.Fatalf("the hidden name is not the socket's: %v", err)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the socket at the path: %v, mode %v; want mode 0600", err, fi.Mode().Perm())
	}

	second, err := Publish(path, first.File, nil)
	if err != nil {
		t.Fatalf("Publish over its own socket: %v", err)
	}
	defer second.Close()
	if id, _, err := Lstat(path); err != nil || id != second.File {
		t.Fatalf("the path does not hold the second socket: %v", err)
	}
	if removed, err := first.Remove(); removed || err != nil {
		t.Errorf("the first socket's Remove = %v, %v; want false: the path is not its own", removed, err)
	}
	if _, err := os.Lstat(first.Hidden); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the first socket's hidden name is left: %v", err)
	}
	if removed, err := second.Remove(); !removed || err != nil {
		t.Errorf("the second socket's Remove = %v, %v; want true", removed, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left in the directory: %v", entries)
	}

	// Something that is not a socket is never replaced.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var notSocket *NotASocketError
	if _, err := Publish(path, ID{}, nil); !errors.As(err, &notSocket) {
		t.Errorf("Publish over a regular file = %v, want a NotASocketError", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("a failed Publish left %v", entries)
	}
}

// On Windows the socket is bound at the path itself, as upstream's is:
// what it replaces is removed first, and anything else is left alone.
func TestListenAtThePathAsOnWindows(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.csi.example.com-reg.sock")
	first, err := listenAt(path, ID{})
	if err != nil {
		t.Fatal(err)
	}
	if id, _, err := Lstat(path); err != nil || id != first.File || first.Path != path || first.Hidden != "" {
		t.Fatalf("listenAt = %+v, file at the path %v (%v); want the socket there, no hidden name", first, id, err)
	}
	_ = first.Close()
	if _, err := listenAt(path, ID{}); err == nil {
		t.Fatal("listenAt replaced a socket it was not told to")
	}
	second, err := listenAt(path, first.File)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	// The file system may give the new socket the old one's inode: the
	// closed socket would refuse the connection.
	if !Answers(path, time.Second) {
		t.Error("the socket at the path does not accept connections: the one replaced is still there")
	}
	if removed, err := second.Remove(); !removed || err != nil {
		t.Fatalf("Remove = %v, %v", removed, err)
	}
	if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	var notSocket *NotASocketError
	if _, err := listenAt(path, ID{}); !errors.As(err, &notSocket) {
		t.Fatalf("listenAt over a regular file = %v, want a NotASocketError", err)
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != "keep" {
		t.Errorf("the regular file is %q, %v; want it untouched", data, err)
	}
}
