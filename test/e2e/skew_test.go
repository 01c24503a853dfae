package e2e_test

import (
	"fmt"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/test/e2e/harness"
	"github.com/csi-registrar/node-driver-registrar/test/kubelet/report"
)

// kubelet rejects the driver n times (its NodeGetInfo fails n times), then
// accepts it, and is never made to deregister it after that. A kubelet
// that tries again by itself (v1.36 and later: GetInfo on the same socket
// after its backoff) is left to do so; one that does not (v1.35 and
// earlier) is given a new socket each time its retry is overdue. The
// registrar tells them apart by what kubelet does: the test checks the
// outcome against both. The time from kubelet's first rejection to its
// acceptance is logged (docs/compatibility.md has the figures).
func TestRejectedThenAcceptedWithoutDeregistration(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d rejections", n), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fmt.Sprintf("rejected-%d.e2e.example.com", n))
			k := e.startKubelet()
			d, err := harness.StartMockDriver(bins.MockDriver, harness.MockDriverConfig{
				Endpoint: e.driverSock, Name: e.driver, NodeID: e.nodeID, FailNodeGetInfoCalls: n,
			})
			if err != nil {
				t.Fatalf("starting the mock driver: %v", err)
			}
			e.track(d, nil)
			r := e.startRegistrar("registrar")
			e.waitRegistered(k)
			// Registered on /readyz only once kubelet accepted the socket
			// the registrar serves now: a deregistration of an accepted
			// socket replaced by a new one comes before that acceptance.
			if _, err := r.WaitForReadyz(waitTimeout, 200, "registered"); err != nil {
				t.Fatal(err)
			}
			st, err := r.Status()
			if err != nil {
				t.Fatal(err)
			}

			var rejections, acceptances int
			var firstRejection, acceptance harness.ReceivedEvent
			for _, ev := range k.ReceivedEvents() {
				if ev.Driver != e.driver {
					continue
				}
				switch {
				case ev.Kind == report.Register && ev.Error != "":
					if rejections == 0 {
						firstRejection = ev
					}
					rejections++
				case ev.Kind == report.Register:
					acceptances++
					acceptance = ev
				case ev.Kind == report.Deregister && acceptances > 0:
					t.Errorf("kubelet deregistered the driver after accepting it:\n%s", k.Summary())
				}
			}
			if rejections != n || acceptances != 1 {
				t.Fatalf("kubelet rejected the driver %d times and accepted it %d times, want %d and 1:\n%s", rejections, acceptances, n, k.Summary())
			}
			// kubelet calls GetInfo once for each attempt: on the first
			// socket only when it retries by itself, on a new one each
			// time when it does not.
			retries, want := st.Publications["retry"], uint64(n)
			if kubeletRetriesByItself(t, k) {
				want = 0
			}
			if st.KubeletCalls.GetInfo != uint64(n+1) || retries != want {
				t.Errorf("kubelet %s called GetInfo %d times, the registrar published again %d times; want %d calls and %d publications again",
					k.Version(), st.KubeletCalls.GetInfo, retries, n+1, want)
			}
			if st.KubeletCalls.NotifyRegistered != 1 || st.KubeletCalls.NotifyRejected != uint64(n) {
				t.Errorf("kubelet's verdicts: %d acceptances, %d rejections; want 1 and %d", st.KubeletCalls.NotifyRegistered, st.KubeletCalls.NotifyRejected, n)
			}
			t.Logf("kubelet %s: accepted %v after its first of %d rejections; the registrar published its socket again %d times",
				k.Version(), acceptance.Received.Sub(firstRejection.Received).Round(10e6), n, retries)
		})
	}
}

// kubeletRetriesByItself says whether k's kubelet code tries a rejected
// registration again on the same socket: v1.36 and later.
func kubeletRetriesByItself(t *testing.T, k *harness.Kubelet) bool {
	t.Helper()
	return kubeletMinor(t, k) >= 36
}

// kubeletMinor is the minor of k's kubelet code: 38 for v1.38.0-beta.0.
func kubeletMinor(t *testing.T, k *harness.Kubelet) int {
	t.Helper()
	var minor int
	if _, err := fmt.Sscanf(k.Version(), "v1.%d.", &minor); err != nil {
		t.Fatalf("the e2e kubelet's version %q: %v", k.Version(), err)
	}
	return minor
}
