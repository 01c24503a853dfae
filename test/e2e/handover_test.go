package e2e_test

import (
	"syscall"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/test/kubelet/report"
)

// A rolling update with maxSurge, with kubelet's real plugin manager: the
// new instance B takes the old instance A's listening socket over, so
// kubelet neither deregisters nor registers the driver: CSINode lists the
// driver throughout, and B is ready at once. Then A exits, and B's exit
// deregisters the driver, as any last instance's does. What each instance
// does with the socket file and its /status is pkg/registration's
// handover test's.
func TestHandoverKeepsTheRegistration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "handover.e2e.example.com")
	k, a := e.registered("registrar-A")
	registrations := k.CountEvents(e.driver, report.Register, true)
	deregistrations := k.CountEvents(e.driver, report.Deregister, false)
	// quiet fails the test if kubelet reported a deregistration or a new
	// registration, or if CSINode stopped listing the driver, within three
	// reconcile periods.
	quiet := func(when string) {
		t.Helper()
		err := k.WaitUntil(3*reconcilePeriod, "a change in kubelet's registration", func() bool {
			_, listed := k.State().Driver(e.driver)
			return !listed ||
				k.CountEvents(e.driver, report.Deregister, false) != deregistrations ||
				k.CountEvents(e.driver, report.Register, true) != registrations
		})
		if err == nil {
			t.Errorf("%s: kubelet reported %d deregistrations and %d registrations (before: %d, %d); CSINode: %+v",
				when, k.CountEvents(e.driver, report.Deregister, false), k.CountEvents(e.driver, report.Register, true),
				deregistrations, registrations, k.State())
		} else if exited, _ := k.Exited(); exited {
			t.Fatal(err)
		}
	}

	b := e.startRegistrar("registrar-B")
	if _, err := b.WaitForLine(waitTimeout, "Took the registration socket over"); err != nil {
		t.Fatalf("B did not take the socket over: %v", err)
	}
	// Ready at once: kubelet will not call B, it has nothing new to see.
	if _, err := b.WaitForReadyz(waitTimeout, 200, "registered"); err != nil {
		t.Fatal(err)
	}
	assertSuperseded(t, a)
	quiet("during the handover")

	if err := a.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantExit(t, a, 0)
	quiet("after A exited")
	if d, ok := k.State().Driver(e.driver); !ok || d.NodeID != e.nodeID {
		t.Errorf("CSINode lists %+v (listed: %v), want driver %q with node ID %q", d, ok, e.driver, e.nodeID)
	}
	if code, body, err := b.Readyz(); err != nil || code != 200 {
		t.Errorf("B's /readyz: %d %q, %v; want 200", code, body, err)
	}
	if code, err := b.Healthz(); err != nil || code != 200 {
		t.Errorf("B's /healthz: %d, %v; want 200", code, err)
	}
	assertRunning(t, b.Process)

	// B exits in turn: it removes the socket, now its own, and kubelet
	// deregisters the driver, as after any last instance's exit.
	if err := b.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantExit(t, b, 0)
	assertNoFile(t, e.regSocket())
	if err := k.WaitForNoDriver(waitTimeout, e.driver); err != nil {
		t.Error(err)
	}
}
