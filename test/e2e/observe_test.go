package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/e2e/harness"
)

// The registrar's metrics (pkg/healthz/metrics.go) and states
// (pkg/registration/status.go), as an operator's dashboards and alerts
// name them.
const (
	metricRegistered      = "csi_node_driver_registrar_registered"
	metricState           = "csi_node_driver_registrar_state"
	metricKubeletRPCs     = "csi_node_driver_registrar_kubelet_rpcs_total"
	metricPublications    = "csi_node_driver_registrar_socket_publications_total"
	metricFailures        = "csi_node_driver_registrar_registration_failures_total"
	metricDriverReachable = "csi_node_driver_registrar_driver_reachable"

	stateWaitingForDriver  = "waiting-for-driver"
	stateWaitingForKubelet = "waiting-for-kubelet"
	stateRegistered        = "registered"
	stateRejected          = "rejected"
	stateSuperseded        = "superseded"
)

var states = []string{stateWaitingForDriver, stateWaitingForKubelet, stateRegistered, stateRejected, stateSuperseded, "stopped"}

// sample is one expected metric value: exactly value, or at least value
// for a counter whose exact count depends on kubelet's timing.
type sample struct {
	name    string
	labels  []string // name, value, name, value...
	value   float64
	atLeast bool
}

func is(value float64, name string, labels ...string) sample {
	return sample{name: name, labels: labels, value: value}
}

func atLeast(value float64, name string, labels ...string) sample {
	return sample{name: name, labels: labels, value: value, atLeast: true}
}

func (s sample) String() string {
	var labels []string
	for i := 0; i+1 < len(s.labels); i += 2 {
		labels = append(labels, fmt.Sprintf("%s=%q", s.labels[i], s.labels[i+1]))
	}
	op := "=="
	if s.atLeast {
		op = ">="
	}
	return fmt.Sprintf("%s{%s} %s %g", s.name, strings.Join(labels, ","), op, s.value)
}

// check compares the sample with a scrape and says what differs.
func (s sample) check(m harness.Metrics) error {
	got, err := m.Value(s.name, s.labels...)
	switch {
	case err != nil:
		return err
	case s.atLeast && got < s.value, !s.atLeast && got != s.value:
		return fmt.Errorf("want %v, got %g", s, got)
	}
	return nil
}

// registeredSamples expects csi_node_driver_registrar_state to be 1 for state
// and 0 for the others, csi_node_driver_registrar_registered to agree, and the
// extra samples.
func registeredSamples(state string, extra ...sample) []sample {
	out := []sample{is(boolValue(state == stateRegistered), metricRegistered)}
	for _, s := range states {
		out = append(out, is(boolValue(s == state), metricState, "state", s))
	}
	return append(out, extra...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// waitForMetrics scrapes r's /metrics until every sample matches, and fails
// the test with the differences if they do not by waitTimeout. The values
// are read from the registrar's state when scraped, so they may trail an
// event that the test saw elsewhere (kubelet's report) by a moment.
func waitForMetrics(t *testing.T, r *harness.Registrar, want ...sample) {
	t.Helper()
	var last harness.Metrics
	err := harness.Eventually(waitTimeout, pollInterval, r.Name+" metrics", func() (bool, error) {
		m, err := r.Metrics()
		if err != nil {
			return false, err
		}
		last = m
		var errs []string
		for _, s := range want {
			if err := s.check(m); err != nil {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) > 0 {
			return false, fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v\nlast scrape:\n%s", err, strings.Join(last.Lines(metricRegistered, metricState, metricKubeletRPCs,
			metricPublications, metricFailures, metricDriverReachable), "\n"))
	}
}

// waitForStatus polls r's /status until ok accepts it, and returns it.
func waitForStatus(t *testing.T, r *harness.Registrar, what string, ok func(harness.Status) bool) harness.Status {
	t.Helper()
	var last harness.Status
	err := harness.Eventually(waitTimeout, pollInterval, r.Name+" /status to show "+what, func() (bool, error) {
		st, err := r.Status()
		if err != nil {
			return false, err
		}
		last = st
		return ok(st), nil
	})
	if err != nil {
		t.Fatalf("%v\nlast /status:\n%s", err, last.Raw)
	}
	return last
}

// /readyz, /status and /metrics through a start-up in which the registrar
// comes first, then the driver, then kubelet: not ready while it waits for
// either, ready once kubelet has registered the driver. /healthz stays 200
// all along: waiting is no reason to restart.
func TestReadinessLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "readyz.e2e.example.com")
	r := e.startRegistrar("registrar")

	body, err := r.WaitForReadyz(waitTimeout, 503, "waiting for the CSI driver")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("no driver yet: /readyz 503 %q", body)
	st := waitForStatus(t, r, stateWaitingForDriver, func(st harness.Status) bool { return st.State == stateWaitingForDriver })
	if st.Ready || st.DriverReachable {
		t.Errorf("/status before the driver: ready %v, driverReachable %v; want both false\n%s", st.Ready, st.DriverReachable, st.Raw)
	}
	waitForMetrics(t, r, registeredSamples(stateWaitingForDriver,
		is(0, metricDriverReachable),
		is(0, metricPublications, "reason", "start"))...)
	if code, err := r.Healthz(); err != nil || code != 200 {
		t.Errorf("/healthz before the driver: %d, %v; want 200", code, err)
	}

	e.startDriver(false)
	body, err = r.WaitForReadyz(waitTimeout, 503, "waiting for kubelet")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("no kubelet yet: /readyz 503 %q", body)
	socketInode(t, e.regSocket())
	st = waitForStatus(t, r, stateWaitingForKubelet, func(st harness.Status) bool { return st.State == stateWaitingForKubelet })
	if st.Ready || !st.DriverReachable || st.DriverName != e.driver || st.SocketPath != e.regSocket() {
		t.Errorf("/status before kubelet: ready %v, driverReachable %v, driverName %q, socketPath %q; want false, true, %q, %q\n%s",
			st.Ready, st.DriverReachable, st.DriverName, st.SocketPath, e.driver, e.regSocket(), st.Raw)
	}
	waitForMetrics(t, r, registeredSamples(stateWaitingForKubelet,
		is(1, metricDriverReachable),
		is(1, metricPublications, "reason", "start"),
		is(0, metricKubeletRPCs, "method", "GetInfo", "result", "ok"))...)
	if code, err := r.Healthz(); err != nil || code != 200 {
		t.Errorf("/healthz before kubelet: %d, %v; want 200", code, err)
	}

	k := e.startKubelet()
	e.waitRegistered(k)
	body, err = r.WaitForReadyz(waitTimeout, 200, "registered")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("registered: /readyz 200 %q", body)
	st = waitForStatus(t, r, stateRegistered, func(st harness.Status) bool { return st.State == stateRegistered })
	if !st.Ready || st.LastVerdict == nil || !st.LastVerdict.Registered {
		t.Errorf("/status after registration: ready %v, lastKubeletVerdict %+v; want ready and registered\n%s", st.Ready, st.LastVerdict, st.Raw)
	}
	waitForMetrics(t, r, registeredSamples(stateRegistered,
		is(1, metricDriverReachable),
		is(1, metricPublications, "reason", "start"),
		atLeast(1, metricKubeletRPCs, "method", "GetInfo", "result", "ok"),
		is(1, metricKubeletRPCs, "method", "NotifyRegistrationStatus", "result", "registered"),
		is(0, metricKubeletRPCs, "method", "NotifyRegistrationStatus", "result", "rejected"),
		is(0, metricFailures))...)
	if code, err := r.Healthz(); err != nil || code != 200 {
		t.Errorf("/healthz after registration: %d, %v; want 200", code, err)
	}
}

// --diagnose, run with the running registrar's flags as an operator would
// through kubectl exec: a clean checklist on a healthy node; a [FAIL] line
// naming the problem, and exit 1, with a wrong --csi-address and once the
// registrar has stopped (no registration socket).
func TestDiagnose(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "diagnose.e2e.example.com")
	_, r := e.registered("registrar")

	healthy := diagnose(t, r.Config)
	if healthy.ExitCode != 0 {
		t.Errorf("--diagnose on a healthy node exited with %d, want 0", healthy.ExitCode)
	}
	if len(healthy.Checks()) == 0 {
		t.Errorf("--diagnose printed no checks")
	}
	for _, line := range healthy.Checks() {
		if !strings.HasPrefix(line, "[ OK ]") && !strings.HasPrefix(line, "[WARN]") {
			t.Errorf("--diagnose on a healthy node: %q, want [ OK ] or [WARN]", line)
		}
	}

	wrongAddress := r.Config
	wrongAddress.CSIAddress = filepath.Join(e.dir, "no-driver.sock")
	wantFailure(t, diagnose(t, wrongAddress), "driver socket "+wrongAddress.CSIAddress, "does not exist")

	if err := r.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantExit(t, r, 0)
	wantFailure(t, diagnose(t, r.Config), "registration socket "+e.regSocket(), "missing")
}

// diagnose runs the registrar binary with --diagnose and cfg's flags, and
// logs the checklist.
func diagnose(t *testing.T, cfg harness.RegistrarConfig) harness.Diagnosis {
	t.Helper()
	d, err := harness.Diagnose(bins.Registrar, cfg.Args(), exitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("--diagnose --csi-address=%s: exit %d\n%s", cfg.CSIAddress, d.ExitCode, d.Stdout)
	if d.Stderr != "" {
		t.Logf("--diagnose stderr:\n%s", d.Stderr)
	}
	return d
}

// wantFailure expects exit 1 and a [FAIL] line that contains every part.
func wantFailure(t *testing.T, d harness.Diagnosis, parts ...string) {
	t.Helper()
	if d.ExitCode != 1 {
		t.Errorf("--diagnose exited with %d, want 1", d.ExitCode)
	}
	for _, line := range d.Checks() {
		if !strings.HasPrefix(line, "[FAIL]") {
			continue
		}
		matches := true
		for _, p := range parts {
			matches = matches && strings.Contains(line, p)
		}
		if matches {
			return
		}
	}
	t.Errorf("no [FAIL] line contains %q", parts)
}

// readFile returns path's content, failing the test if it cannot.
func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// --diagnose reads kubelet's verdict from the running registrar: a typo in
// --kubelet-registration-path makes kubelet reject the driver, and the
// diagnosis fails with kubelet's own reason; without a kubelet watching
// the registry, it fails saying that kubelet never called.
func TestDiagnoseTellsKubeletsVerdict(t *testing.T) {
	t.Parallel()
	t.Run("wrong registration path", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "diagwrongpath.e2e.example.com")
		k := e.startKubelet()
		e.startDriver(false)
		r := e.startRegistrar("registrar", func(c *harness.RegistrarConfig) {
			c.KubeletRegistrationPath = filepath.Join(e.dir, "csi-typo.sock")
		})
		if _, err := r.WaitForReadyz(waitTimeout, 503, "rejected by kubelet"); err != nil {
			t.Fatalf("kubelet did not reject the driver: %v\n%s", err, k.Summary())
		}
		wantFailure(t, diagnose(t, r.Config), "kubelet's registration", "kubelet rejected the driver", "csi-typo.sock", "--kubelet-registration-path")
	})
	t.Run("driver killed", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "diagkilled.e2e.example.com")
		k := e.startKubelet()
		d := e.startDriver(false)
		r := e.startRegistrar("registrar")
		e.waitRegistered(k)
		// SIGKILL: the driver's socket file stays, nothing listens on it.
		d.Kill()
		if _, err := os.Lstat(e.driverSock); err != nil {
			t.Fatalf("the killed driver's socket is gone (%v): this case needs it left behind", err)
		}
		wantFailure(t, diagnose(t, r.Config), "driver GetPluginInfo", "nothing listens on the driver socket")
	})
	t.Run("kubelet never calls", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "diagnokubelet.e2e.example.com")
		e.startDriver(false)
		r := e.startRegistrar("registrar")
		// Published, and nobody watches the registry.
		if _, err := r.WaitForLine(waitTimeout, "Registration socket published"); err != nil {
			t.Fatal(err)
		}
		var d harness.Diagnosis
		err := harness.Eventually(waitTimeout, time.Second, "--diagnose to give up on kubelet", func() (bool, error) {
			d = diagnose(t, r.Config)
			return d.ExitCode == 1, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		wantFailure(t, d, "kubelet's registration", "kubelet has not called GetInfo", e.registry)
	})
}
