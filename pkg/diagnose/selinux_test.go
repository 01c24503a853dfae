package diagnose

import (
	"strings"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/internal/selinuxcheck"
)

// The advice follows what is denied: a file's label is relabelled, a
// connection to a domain needs another domain. (make selinux-test shows
// both on a kernel enforcing a policy.)
func TestSELinuxAdvice(t *testing.T) {
	connect := selinuxcheck.Denial{Who: "kubelet", Class: "unix_stream_socket", Permissions: []string{"connectto"}}
	list := selinuxcheck.Denial{Who: "kubelet", Class: "dir", Permissions: []string{"read", "watch"}}
	publish := selinuxcheck.Denial{Who: "registrar", Class: "dir", Permissions: []string{"write", "add_name"}}
	for _, tc := range []struct {
		name      string
		denials   []selinuxcheck.Denial
		want, not []string
	}{
		{"connectto", []selinuxcheck.Denial{connect}, []string{"Run the pod", "seLinuxOptions"}, []string{"restorecon"}},
		{"a directory's label", []selinuxcheck.Denial{list, list}, []string{"Relabel the host's kubelet directories", "restorecon"}, []string{"seLinuxOptions"}},
		{"the registrar's own", []selinuxcheck.Denial{publish}, []string{"Relabel the registry directory, or run the registrar privileged"}, []string{"seLinuxOptions"}},
		{"both", []selinuxcheck.Denial{list, connect}, []string{"restorecon", "seLinuxOptions"}, nil},
	} {
		got := selinuxAdvice(tc.denials)
		if n := strings.Count(got, "restorecon -R"); n > 1 {
			t.Errorf("%s: advice %q gives the same advice %d times", tc.name, got, n)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: advice %q does not say %q", tc.name, got, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(got, n) {
				t.Errorf("%s: advice %q says %q", tc.name, got, n)
			}
		}
	}
}
