//go:build unix

package registration

import (
	"sync"
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

// The instance that hands its socket over closes its listener itself: its
// server's end is no failure to report, nor a reason to publish again.
func TestHandingOverIsNoServingFailure(t *testing.T) {
	dir := shortTempDir(t)
	srv := newServer(t, dir)
	var mu sync.Mutex
	var happened []Transition
	srv.Observe(func(_ Status, ts []Transition) {
		mu.Lock()
		defer mu.Unlock()
		happened = append(happened, ts...)
	})
	older := runServer(t, srv)
	srv.DriverFound(testDriver)
	older.waitServing(t)
	notify(t, srv.SocketPathForTest(), true)
	poll.Until(t, "kubelet's registration is recorded", func() bool { return srv.Status().Ready })

	start(t, dir)
	poll.Until(t, "the older instance steps aside", func() bool { return srv.Status().State == Superseded })
	if err := older.stop(t); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	handedOver := false
	for _, tr := range happened {
		switch tr := tr.(type) {
		case ServeEnded:
			t.Errorf("the older instance reported %#v after handing its socket over", tr)
		case SteppedAside:
			handedOver = handedOver || tr.HandedOver
		}
	}
	if !handedOver {
		t.Errorf("the older instance's transitions %#v do not say it handed the socket over", happened)
	}
	if n := srv.Status().Publications[ReasonStale]; n != 0 {
		t.Errorf("the older instance published again (%d stale) after handing its socket over", n)
	}
}
