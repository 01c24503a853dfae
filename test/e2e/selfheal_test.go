package e2e_test

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/e2e/harness"
	"github.com/csi-registrar/node-driver-registrar/test/kubelet/report"
)

const (
	// reconcilePeriod is how often kubelet's plugin manager acts on the
	// sockets it has seen come and go.
	reconcilePeriod = time.Second
	// reRegistrationBound is how soon after its socket was deleted the
	// driver must be registered again. A socket re-created at the same
	// path takes kubelet two reconcile passes: the first deregisters the
	// old socket, and its registration attempt in the same pass is refused
	// while that deregistration runs (goroutinemap, one operation per
	// path); the second registers the new socket. That is up to 2 s after
	// the socket reappears, nearly all of it here since the test deletes
	// the socket just after a pass; 1 s more absorbs a loaded machine.
	reRegistrationBound = 2*reconcilePeriod + time.Second
)

// The registration socket is deleted under a running registrar (upstream
// never re-creates it, #57 #60): the same process publishes it again at
// once and kubelet registers the driver again.
func TestSocketDeletedRepublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "deleted.e2e.example.com")
	k, r := e.registered("registrar")
	registrations := k.CountEvents(e.driver, report.Register, true)
	deregistrations := k.CountEvents(e.driver, report.Deregister, false)

	deleted := time.Now()
	if err := os.Remove(e.regSocket()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.WaitForLine(waitTimeout, `reason="deleted"`); err != nil {
		t.Fatalf("the registrar did not publish its socket again: %v", err)
	}
	republished := time.Since(deleted)
	if republished > reconcilePeriod {
		t.Errorf("the registrar published its socket again %v after it was deleted, want it at once (well within kubelet's reconcile period, %v)", republished, reconcilePeriod)
	}
	if _, err := k.WaitForEvents(waitTimeout, e.driver, report.Register, true, registrations+1); err != nil {
		t.Fatalf("kubelet did not register the driver again: %v", err)
	}
	registered := time.Since(deleted)
	t.Logf("socket deleted; published again after %v; kubelet registered the driver again after %v",
		republished.Round(time.Millisecond), registered.Round(time.Millisecond))
	if registered > reRegistrationBound {
		t.Errorf("kubelet registered the driver again %v after the socket was deleted, want within %v", registered, reRegistrationBound)
	}

	assertRunning(t, r.Process)
	if n := k.CountEvents(e.driver, report.Deregister, false); n <= deregistrations {
		t.Errorf("kubelet reported no deregistration of the deleted socket")
	}
	assertRegistryHolds(t, e.registry, e.driver)
	e.waitRegistered(k)
	// /readyz 200 also says that the socket at the path is the one the
	// registrar published last.
	if _, err := r.WaitForReadyz(waitTimeout, 200, "registered"); err != nil {
		t.Fatal(err)
	}
	waitForMetrics(t, r, registeredSamples(stateRegistered,
		is(1, metricPublications, "reason", "start"),
		is(1, metricPublications, "reason", "deleted"),
		is(2, metricKubeletRPCs, "method", "NotifyRegistrationStatus", "result", "registered"),
		is(1, metricDriverReachable))...)
	if err := r.WaitForHealthz(waitTimeout, 200); err != nil {
		t.Error(err)
	}
}

// A rolling update in which the new instance goes away first (its pod is
// deleted, or it crashes) while the old one still runs: the old one, which
// had stepped aside, publishes its socket again and kubelet registers the
// driver again, so that the node is not left without a registration.
func TestSupersededRepublishesWhenNewerExits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "vacated.e2e.example.com")
	k, a := e.registered("registrar-A")
	b := e.startRegistrar("registrar-B")
	if _, err := b.WaitForLine(waitTimeout, "Took the registration socket over"); err != nil {
		t.Fatalf("B did not take A's socket over: %v", err)
	}
	assertSuperseded(t, a)

	registrations := k.CountEvents(e.driver, report.Register, true)
	if err := b.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantExit(t, b, 0)
	if _, err := k.WaitForEvents(waitTimeout, e.driver, report.Register, true, registrations+1); err != nil {
		t.Fatalf("kubelet did not register the driver again after B exited: %v", err)
	}
	e.waitRegistered(k)
	assertRunning(t, a.Process)
	// A's readiness includes the check that the socket at the path is the
	// one A published. (Comparing inodes with B's would not do: B's socket
	// is gone, and its inode number may be reused.)
	assertRegistryHolds(t, e.registry, e.driver)
	if _, err := a.WaitForReadyz(waitTimeout, 200, "registered"); err != nil {
		t.Fatal(err)
	}
	waitForMetrics(t, a, registeredSamples(stateRegistered,
		is(1, metricPublications, "reason", "start"),
		is(1, metricPublications, "reason", "vacated"),
		is(2, metricKubeletRPCs, "method", "NotifyRegistrationStatus", "result", "registered"))...)
	if err := a.WaitForHealthz(waitTimeout, 200); err != nil {
		t.Error(err)
	}
}

// The CSI driver restarts under another name on the same socket: the
// registrar, without restarting, registers the new name and withdraws the
// old one. While the driver is down the registration stays (kubelet needs
// the driver only when it calls it) and the metrics say the driver is
// unreachable.
func TestDriverRenamed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "renamed-old.e2e.example.com")
	const newName = "renamed-new.e2e.example.com"
	newSocket := harness.RegistrationSocket(e.registry, newName)
	k := e.startKubelet()
	d := e.startDriver(false)
	r := e.startRegistrar("registrar")
	e.waitRegistered(k)
	if _, err := r.WaitForReadyz(waitTimeout, 200, "registered"); err != nil {
		t.Fatal(err)
	}

	e.stop(d)
	st := waitForStatus(t, r, "the driver unreachable", func(st harness.Status) bool { return !st.DriverReachable })
	if st.State != stateRegistered || st.DriverName != e.driver {
		t.Errorf("/status while the driver is down: state %q, driver %q; want %q, %q (the registration stays)\n%s",
			st.State, st.DriverName, stateRegistered, e.driver, st.Raw)
	}
	waitForMetrics(t, r, registeredSamples(stateRegistered, is(0, metricDriverReachable))...)
	socketInode(t, e.regSocket())

	e.startNamedDriver(newName, false)
	if _, err := k.WaitForDriver(waitTimeout, newName); err != nil {
		t.Fatal(err)
	}
	if err := k.WaitForNoDriver(waitTimeout, e.driver); err != nil {
		t.Fatal(err)
	}
	err := k.WaitUntil(waitTimeout, "the Node annotation to name only the new driver", func() bool {
		ids := k.State().NodeIDs
		_, old := ids[e.driver]
		return ids[newName] == e.nodeID && !old
	})
	if err != nil {
		t.Error(err)
	}
	assertNoFile(t, e.regSocket())
	socketInode(t, newSocket)
	assertRegistryHolds(t, e.registry, newName)
	assertRunning(t, r.Process)
	if _, err := r.WaitForReadyz(waitTimeout, 200, "registered"); err != nil {
		t.Fatal(err)
	}
	st = waitForStatus(t, r, "the new name", func(st harness.Status) bool { return st.DriverName == newName })
	if st.SocketPath != newSocket {
		t.Errorf("/status socketPath %q, want %q", st.SocketPath, newSocket)
	}
	waitForMetrics(t, r, registeredSamples(stateRegistered,
		is(1, metricDriverReachable),
		is(1, metricPublications, "reason", "start"),
		is(1, metricPublications, "reason", "renamed"),
		is(2, metricKubeletRPCs, "method", "NotifyRegistrationStatus", "result", "registered"))...)
	if err := r.WaitForHealthz(waitTimeout, 200); err != nil {
		t.Error(err)
	}
}

// kubelet rejects the driver, then accepts it, and the registrar (default
// policy: retry) gets it registered without restarting. kubelet v1.37
// retries a failed RegisterPlugin by itself, so "rejects, then accepts" is
// a driver whose NodeGetInfo fails, then works: the driver restarts without
// the fault on the same socket, under the same name. In the second case
// kubelet restarts too while the driver is being fixed, and it is the fresh
// kubelet, with no backoff from the earlier failures, that accepts.
func TestRejectedThenAccepted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		driver       string
		freshKubelet bool
	}{
		{name: "driver recovers", driver: "recovers.e2e.example.com"},
		{name: "fresh kubelet", driver: "fresh-kubelet.e2e.example.com", freshKubelet: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tc.driver)
			k := e.startKubelet()
			d := e.startDriver(true)
			r := e.startRegistrar("registrar")

			rejected, err := k.WaitForEvents(waitTimeout, e.driver, report.Register, false, 1)
			if err != nil {
				t.Fatal(err)
			}
			if rejected.Error == "" {
				t.Fatalf("kubelet's CSI handler accepted the driver; the mock driver was to fail NodeGetInfo")
			}
			reason := "RegisterPlugin error -- plugin registration failed with err: " + rejected.Error
			body, err := r.WaitForReadyz(waitTimeout, 503, "rejected by kubelet: "+reason)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("rejected: /readyz 503 %q", body)
			// The message is written by an observer of the rejection,
			// after /readyz has it: wait for it rather than read once.
			var msg string
			err = harness.Eventually(waitTimeout, 10*time.Millisecond, "the termination message to hold kubelet's reason", func() (bool, error) {
				msg = readFile(t, e.termination)
				return strings.Contains(msg, reason), nil
			})
			if err != nil {
				t.Errorf("termination message is %q, want it to contain kubelet's reason %q: %v", msg, reason, err)
			}
			waitForMetrics(t, r, atLeast(1, metricFailures), is(0, metricRegistered),
				atLeast(1, metricKubeletRPCs, "method", "NotifyRegistrationStatus", "result", "rejected"))
			// Alive: a liveness probe must not restart a registrar that
			// is waiting for kubelet to change its mind.
			if code, err := r.Healthz(); err != nil || code != 200 {
				t.Errorf("/healthz after the rejection: %d, %v; want 200", code, err)
			}
			assertRunning(t, r.Process)

			if tc.freshKubelet {
				if code, err := k.Stop(exitTimeout); err != nil || code != 0 {
					t.Fatalf("stopping the kubelet: exit %d, %v", code, err)
				}
			}
			e.stop(d)
			e.startDriver(false)
			if tc.freshKubelet {
				k = e.startKubelet()
				first, err := k.WaitForEvents(waitTimeout, e.driver, report.Register, false, 1)
				if err != nil {
					t.Fatal(err)
				}
				if first.Error != "" {
					t.Errorf("the fresh kubelet rejected the driver: %s", first.Error)
				}
			}
			e.waitRegistered(k)
			if _, err := r.WaitForReadyz(waitTimeout, 200, "registered"); err != nil {
				t.Fatal(err)
			}
			assertRunning(t, r.Process)
			waitForMetrics(t, r, registeredSamples(stateRegistered,
				atLeast(1, metricFailures),
				atLeast(1, metricKubeletRPCs, "method", "NotifyRegistrationStatus", "result", "rejected"),
				atLeast(1, metricKubeletRPCs, "method", "NotifyRegistrationStatus", "result", "registered"),
				is(1, metricDriverReachable))...)
			if m, err := r.Metrics(); err == nil {
				t.Logf("after kubelet accepted the driver:\n%s", strings.Join(m.Lines(metricFailures, metricPublications, metricKubeletRPCs), "\n"))
			}
		})
	}
}
