package diagnose

import (
	"os"
	"slices"
	"strings"

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
	case report.Problem() && report.Mode == "permissive":
		return warn(c, report.Summary()+". "+selinuxAdvice(report.Denials)), true
	case report.Problem():
		return fail(c, report.Summary()+". "+selinuxAdvice(report.Denials)), true
	case d.registryDenied && report.RegistrarCanPublish == nil:
		return fail(c, report.Summary()+". This container may not create files in the registry directory, and with SELinux on its label is the likely cause: "+relabelAdvice), true
	}
	return ok(c, report.Summary()), true
}

// relabelAdvice is what to do when a file's label denies access.
const relabelAdvice = "relabel the host's kubelet directories as container-selinux labels /var/lib/kubelet (container_file_t: restorecon -R /var/lib/kubelet; for a root dir elsewhere, semanage fcontext -a -e /var/lib/kubelet <root-dir> first)"

// selinuxAdvice says what to do about the denials, by what they deny: a
// label on a file, or a connection to a process's domain.
func selinuxAdvice(denials []selinuxcheck.Denial) string {
	var advice []string
	add := func(a string) {
		if !slices.Contains(advice, a) {
			advice = append(advice, a)
		}
	}
	for _, d := range denials {
		switch {
		case d.Class == "unix_stream_socket":
			add("run the pod whose socket kubelet may not connect to in a domain kubelet may reach (seLinuxOptions type container_t, or spc_t for a privileged container)")
		case d.Who == "registrar":
			add("relabel the registry directory, or run the registrar privileged (spc_t): this container may not create its socket there")
		default:
			add(relabelAdvice)
		}
	}
	s := strings.Join(advice, "; ")
	return strings.ToUpper(s[:1]) + s[1:]
}
