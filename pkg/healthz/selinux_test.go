package healthz

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/internal/poll"
	"github.com/csi-registrar/node-driver-registrar/internal/selinuxcheck"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// /status shows what SELinux says of the socket, and where kubelet stays
// silent a denial becomes a cause in the reason; where the policy cannot
// be asked SELinux is named as a possible cause; where SELinux is off
// nothing of it shows.
func TestStatusShowsWhatSELinuxSays(t *testing.T) {
	denial := selinuxcheck.Denial{Who: "kubelet", Source: "system_u:system_r:kubelet_t:s0", Target: "system_u:system_r:nokubelet_t:s0",
		Class: "unix_stream_socket", Permissions: []string{"connectto"}, Object: "the registrar's socket"}
	cases := []struct {
		name      string
		report    *selinuxcheck.Report
		want      []string
		wantNoSEL bool
	}{
		{"a denial", &selinuxcheck.Report{Mode: "enforcing", Denials: []selinuxcheck.Denial{denial}},
			[]string{"SELinux does not let it", "kubelet (kubelet_t) may not { connectto }"}, false},
		{"the policy cannot be asked", &selinuxcheck.Report{Mode: "unknown", Unchecked: "selinuxfs is not mounted in this container"},
			[]string{"or SELinux does not let it, which this registrar cannot tell"}, false},
		{"SELinux off", nil, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := testingclock.NewFakeClock(time.Now())
			srv := runWithClock(t, clock, true)
			clock.Step(10 * time.Second)
			poll.Until(t, "kubelet is silent", func() bool { return srv.Status().State == registration.KubeletSilent })
			h := New(srv, Options{SELinux: func() *selinuxcheck.Report { return tc.report }})
			_, body := probe(t, h, "/status")
			var doc struct {
				State   string               `json:"state"`
				Reason  string               `json:"reason"`
				Silent  bool                 `json:"kubeletSilent"`
				SELinux *selinuxcheck.Report `json:"selinux"`
			}
			if err := json.Unmarshal([]byte(body), &doc); err != nil {
				t.Fatal(err)
			}
			if doc.State != "kubelet-silent" || !doc.Silent {
				t.Errorf("state %q, kubeletSilent %v; want kubelet-silent", doc.State, doc.Silent)
			}
			for _, w := range tc.want {
				if !strings.Contains(doc.Reason, w) {
					t.Errorf("reason %q does not say %q", doc.Reason, w)
				}
			}
			if tc.wantNoSEL && (doc.SELinux != nil || strings.Contains(doc.Reason, "SELinux")) {
				t.Errorf("/status = %s, want nothing of SELinux", body)
			}
			if !tc.wantNoSEL && doc.SELinux == nil {
				t.Errorf("/status has no selinux: %s", body)
			}
		})
	}
}
