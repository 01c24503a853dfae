package removeall_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/test/removeall"
)

// Where Require lets a test run, os.RemoveAll deletes a directory holding
// a file, as t.TempDir's cleanup does.
func TestRequireLetsRunWhereRemoveAllWorks(t *testing.T) {
	removeall.Require(t)
	dir, err := os.MkdirTemp("", "removeall-test")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatalf("Require let the test run, but os.RemoveAll(%s) = %v", dir, err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after os.RemoveAll, Lstat(%s) = %v, want it gone", dir, err)
	}
}
