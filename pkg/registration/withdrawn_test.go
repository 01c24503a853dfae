package registration

import (
	"testing"

	"github.com/csi-registrar/node-driver-registrar/test/poll"
)

// The last status says withdrawn when Run removed its socket on the way
// out, and only then: an instance that stepped aside for a newer one
// leaves kubelet's registration in place.
func TestWithdrawnOnlyWhenTheSocketIsRemoved(t *testing.T) {
	dir := shortTempDir(t)
	older := start(t, dir)
	newer := start(t, dir)
	poll.Until(t, "the older instance steps aside", func() bool { return older.srv.Status().State == Superseded })
	if err := older.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := older.srv.Status(); st.State != Stopped || st.Withdrawn {
		t.Errorf("the superseded instance's last status: %s, withdrawn %v; want stopped, not withdrawn", st.State, st.Withdrawn)
	}
	if err := newer.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := newer.srv.Status(); st.State != Stopped || !st.Withdrawn {
		t.Errorf("the instance that removed its socket: %s, withdrawn %v; want stopped, withdrawn", st.State, st.Withdrawn)
	}
}
