//go:build unix

package registration

import (
	"testing"

	"github.com/csi-registrar/node-driver-registrar/test/poll"
)

// An instance that takes a registered socket over is registered without a
// word from kubelet: its observers see it so (the node gate of a new pod
// in a rolling update relies on it).
func TestRegisteredOnTakingARegisteredSocketOver(t *testing.T) {
	dir := shortTempDir(t)
	startRegistered(t, dir)
	srv := newServer(t, dir)
	seen := make(chan Status, 64)
	srv.Observe(func(now Status, happened []Transition) {
		for _, t := range happened {
			if _, ok := t.(DriverRegistered); ok {
				seen <- now
			}
		}
	})
	newer := runServer(t, srv)
	srv.DriverFound(testDriver)
	newer.waitServing(t)
	if st := newer.srv.Status(); st.Publications[ReasonHandover] != 1 || st.KubeletCalls.NotifyRegistered != 0 {
		t.Fatalf("newer: publications %v, kubelet's calls %+v; want one handover, no call", st.Publications, st.KubeletCalls)
	}
	var st Status
	poll.Until(t, "the observer sees the registration", func() bool {
		select {
		case st = <-seen:
			return true
		default:
			return false
		}
	})
	if st.DriverName != testDriver || st.LastVerdict == nil || !st.LastVerdict.Registered {
		t.Errorf("observed %+v, want the driver registered with the verdict handed over", st)
	}
}
