//go:build unix

package registration

import (
	"os"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/test/poll"
)

// The registration's side of --confirm-csinode over a real socket: a
// registration counts once CSINode lists the driver, and a CSINode that
// loses it while kubelet has it registered makes the registration publish
// its socket again, which kubelet (here the test) registers again.
func TestCSINodeLossPublishesTheSocketAgain(t *testing.T) {
	fake := testingclock.NewFakeClock(time.Now())
	r := start(t, shortTempDir(t), func(c *Config) { c.ConfirmCSINode, c.Clock = true, fake })
	path := r.srv.SocketPathForTest()
	notify(t, path, true)
	poll.Until(t, "kubelet's verdict is recorded", func() bool { return r.srv.Status().LastVerdict != nil })
	if st := r.srv.Status(); st.State != Unconfirmed || st.Ready {
		t.Fatalf("registered by kubelet, CSINode not read: state %s, ready %v; want unconfirmed, not ready", st.State, st.Ready)
	}
	r.srv.ReportCSINode(CSINodeReport{Listed: true})
	poll.Until(t, "CSINode confirms the registration", func() bool { st := r.srv.Status(); return st.State == Registered && st.Ready })

	before := lstat(t, path)
	r.srv.ReportCSINode(CSINodeReport{Missing: true, Reason: "CSINode node-1 does not exist"})
	poll.Until(t, "the loss is recorded", func() bool { return r.srv.Status().State == Unconfirmed })
	if st := r.srv.Status(); st.Publications[ReasonCSINodeLost] != 0 {
		t.Fatalf("published again before the grace: %v", st.Publications)
	}
	stepWhenArmed(t, fake, csinodeBackoff.Duration)
	poll.Until(t, "the socket is published again", func() bool {
		now, err := os.Lstat(path)
		return err == nil && !os.SameFile(before, now) && r.srv.Status().Publications[ReasonCSINodeLost] == 1
	})
	if st := r.srv.Status(); st.State != WaitingForKubelet {
		t.Fatalf("after publishing again: state %s, want %s", st.State, WaitingForKubelet)
	}
	notify(t, path, true)
	r.srv.ReportCSINode(CSINodeReport{Listed: true})
	poll.Until(t, "registered again and confirmed", func() bool { st := r.srv.Status(); return st.State == Registered && st.Ready })
}
