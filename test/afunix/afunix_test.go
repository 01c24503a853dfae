package afunix_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/test/afunix"
)

// Where Require lets a test run, a Unix socket can be listened on and
// dialled.
func TestRequireLetsRunWhereAFUnixWorks(t *testing.T) {
	afunix.Require(t)
	dir, err := os.MkdirTemp("", "afunix-test")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "s")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("Require let the test run, but net.Listen(unix, %s) = %v", path, err)
	}
	defer l.Close()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("net.Dial(unix, %s) = %v", path, err)
	}
	c.Close()
}
