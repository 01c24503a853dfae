package registration

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/internal/poll"
	"github.com/csi-registrar/node-driver-registrar/internal/selinuxcheck"
)

// What SELinux says of the socket is asked after each publication and
// again when kubelet stays silent; /status shows the latest answer, and a
// denial becomes a cause in the reason. (make selinux-test shows the
// answers themselves on a kernel enforcing a policy.)
func TestStatusShowsWhatSELinuxSays(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	denial := selinuxcheck.Denial{Who: "kubelet", Source: "system_u:system_r:kubelet_t:s0", Target: "system_u:system_r:nokubelet_t:s0",
		Class: "unix_stream_socket", Permissions: []string{"connectto"}, Object: "the registrar's socket"}
	inspect := func(socket string) *selinuxcheck.Report {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, socket)
		return &selinuxcheck.Report{Mode: "enforcing", Files: []selinuxcheck.File{{What: selinuxcheck.WhatSocket, Path: socket, Label: "system_u:object_r:container_file_t:s0"}}, Denials: []selinuxcheck.Denial{denial}}
	}
	r := start(t, shortTempDir(t), func(c *Config) {
		c.InspectSELinux = inspect
		c.KubeletSilence = 50 * time.Millisecond
	})
	path := r.srv.SocketPathForTest()
	poll.Until(t, "the status says kubelet did not call, with SELinux's answer", func() bool {
		st := r.srv.Status()
		return st.KubeletSilent && st.SELinux != nil
	})
	st := r.srv.Status()
	if !strings.Contains(st.Reason, "SELinux does not let it") || !strings.Contains(st.Reason, "kubelet (kubelet_t) may not { connectto }") {
		t.Errorf("Reason = %q, want SELinux's denial as a cause", st.Reason)
	}
	if st.SELinux.Files[0].Path != path {
		t.Errorf("SELinux report about %q, want the socket %q", st.SELinux.Files[0].Path, path)
	}
	poll.Until(t, "SELinux asked after the publication and after the silence", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(asked) >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	for _, socket := range asked {
		if socket != path {
			t.Errorf("SELinux asked about %q, want the published socket %q", socket, path)
		}
	}
}

// Where SELinux is on but the policy cannot be asked, the reason names it
// as a possible cause all the same.
func TestStatusWhenSELinuxCannotTell(t *testing.T) {
	r := start(t, shortTempDir(t), func(c *Config) {
		c.InspectSELinux = func(string) *selinuxcheck.Report {
			return &selinuxcheck.Report{Mode: "unknown", Unchecked: "selinuxfs is not mounted in this container"}
		}
		c.KubeletSilence = 20 * time.Millisecond
	})
	poll.Until(t, "the status says kubelet did not call, with SELinux's report", func() bool {
		st := r.srv.Status()
		return st.KubeletSilent && st.SELinux != nil
	})
	if st := r.srv.Status(); !strings.Contains(st.Reason, "or SELinux does not let it, which this registrar cannot tell") {
		t.Errorf("Reason = %q, want SELinux named as a possible cause", st.Reason)
	}
}

// Where SELinux is off the hook answers nil, and nothing of it shows.
func TestStatusWithoutSELinux(t *testing.T) {
	asked := make(chan struct{}, 4)
	r := start(t, shortTempDir(t), func(c *Config) {
		c.InspectSELinux = func(string) *selinuxcheck.Report { asked <- struct{}{}; return nil }
		c.KubeletSilence = 20 * time.Millisecond
	})
	poll.Until(t, "the status says kubelet did not call", func() bool { return r.srv.Status().KubeletSilent })
	<-asked
	if st := r.srv.Status(); st.SELinux != nil || strings.Contains(st.Reason, "SELinux") {
		t.Errorf("Status = %+v, want nothing of SELinux", st)
	}
}
