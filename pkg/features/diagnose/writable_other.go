//go:build !linux

package diagnose

import (
	"fmt"
	"os"
	"path/filepath"
)

// checkWritable tells whether this process may create files in dir by
// creating a dot-file there, and removing it at once.
func checkWritable(dir string) (detail string, err error) {
	f, err := os.CreateTemp(dir, ".diagnose-*")
	if err != nil {
		return "", err
	}
	name := f.Name()
	_ = f.Close()
	if err := os.Remove(name); err != nil {
		return "", fmt.Errorf("the test file %s could not be removed (delete it): %w", filepath.Base(name), err)
	}
	return "created and removed a test dot-file", nil
}
