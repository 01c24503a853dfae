package main

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/csi-registrar/node-driver-registrar/internal/selinuxcheck"
)

// explainDenial adds what SELinux says of the registry directory to an
// error the kernel gave for want of permission: its label may be why.
func explainDenial(err error, registryDir string) error {
	if !errors.Is(err, fs.ErrPermission) {
		return err
	}
	if report := selinuxcheck.Inspect(selinuxcheck.Config{RegistryDir: registryDir}); report != nil {
		return fmt.Errorf("%w; %s", err, report.Summary())
	}
	return err
}
