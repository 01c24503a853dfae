package diagnose

import (
	"os"

	"github.com/csi-registrar/node-driver-registrar/internal/selinuxcheck"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// 9. What SELinux says of the files kubelet must reach; no check where
// SELinux is off.
func (d *diagnosis) checkSELinux() (Check, bool) {
	cfg := selinuxcheck.Config{RegistryDir: d.cfg.RegistrationDir, DialTimeout: d.cfg.Timeout}
	if d.addressParsed {
		cfg.DriverSocket = d.address.Path
	}
	if d.driverName != "" && d.dirExists {
		path := registration.SocketPath(d.cfg.RegistrationDir, d.driverName)
		if _, err := os.Lstat(path); err == nil {
			cfg.Socket = path
		}
	}
	report := selinuxcheck.Inspect(cfg)
	if report == nil {
		return Check{}, false
	}
	c := Check{Name: "SELinux"}
	switch {
	case !report.Problem():
		return ok(c, report.Summary()), true
	case report.Mode == "permissive":
		return warn(c, report.Summary()), true
	}
	return fail(c, report.Summary()+". Relabel the files (the host's /var/lib/kubelet as container-selinux labels it: container_file_t), or run the driver's pods with seLinuxOptions of a domain kubelet may reach (spc_t for a privileged container)"), true
}
