package registration

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

// MaxSocketPathLength: Linux's sun_path holds 108 bytes with the NUL.
const MaxSocketPathLength = 107

// SocketPath is where kubelet expects the registration socket of a driver.
func SocketPath(dir, driverName string) string {
	return filepath.Join(dir, driverName+"-reg.sock")
}

// CheckDir tells whether dir can hold registration sockets.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return dirError(fmt.Errorf("registration directory %q does not exist: mount the host's kubelet plugin registry (usually /var/lib/kubelet/plugins_registry) there", dir))
	case err != nil:
		return dirError(fmt.Errorf("registration directory %q cannot be read: %w", dir, err))
	case !fi.IsDir():
		return dirError(fmt.Errorf("registration directory %q is not a directory (%s): it must be kubelet's plugin registry directory", dir, sockfile.DescribeFileType(fi.Mode())))
	}
	return nil
}

// ConfigError is a value of Config that cannot be used; Field names it.
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func dirError(err error) error { return &ConfigError{Field: "Dir", Err: err} }
