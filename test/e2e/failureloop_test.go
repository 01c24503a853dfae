package e2e_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/e2e/harness"
)

// The commonest mistake in a driver's manifest, a mistyped
// --kubelet-registration-path: kubelet rejects the driver at every try.
// From kubelet's first rejection on, every reader says so at every moment
// of the loop, through kubelet's tries again: /status, /readyz
// and --diagnose. kubelet's log has no error of the registrar's making
// (startKubelet checks it). Once the failure has lasted --unhealthy-after,
// /healthz fails, so that a liveness probe restarts the container.
func TestRejectionLoopStaysRejected(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rejectloop.e2e.example.com")
	k := e.startKubelet()
	e.startDriver(false)
	typo := filepath.Join(e.dir, "csi-typo.sock")
	r := e.startRegistrar("registrar", func(c *harness.RegistrarConfig) {
		c.KubeletRegistrationPath = typo
		c.ExtraArgs = append(c.ExtraArgs, "--unhealthy-after=8s")
	})
	if _, err := r.WaitForReadyz(waitTimeout, http.StatusServiceUnavailable, "rejected by kubelet"); err != nil {
		t.Fatalf("kubelet did not reject the driver: %v\n%s", err, k.Summary())
	}
	samples, diagnoses := 0, 0
	deadline := time.Now().Add(waitTimeout)
	for {
		st, err := r.Status()
		if err != nil {
			t.Fatal(err)
		}
		if st.State != "rejected" || st.Ready || !strings.Contains(st.Reason, "rejected by kubelet") || !strings.Contains(st.Reason, "csi-typo.sock") {
			t.Fatalf("sample %d of the loop: /status says %s, ready %v: %q", samples, st.State, st.Ready, st.Reason)
		}
		code, body, err := r.Readyz()
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "rejected by kubelet") {
			t.Fatalf("sample %d of the loop: /readyz = %d %q", samples, code, body)
		}
		if samples%4 == 0 {
			wantFailure(t, diagnose(t, r.Config), "kubelet's registration", "kubelet rejected the driver", "csi-typo.sock", "--kubelet-registration-path")
			diagnoses++
		}
		samples++
		// Three more tries, kubelet's by itself (v1.36 and later) or
		// each on a socket published again (before).
		if st.KubeletCalls.NotifyRejected >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubelet rejected the driver %d times in %v, want 4", st.KubeletCalls.NotifyRejected, waitTimeout)
		}
		time.Sleep(pollInterval)
	}
	t.Logf("%d samples of /status and /readyz, %d runs of --diagnose, through 3 more tries of kubelet's", samples, diagnoses)

	if err := harness.Eventually(waitTimeout, pollInterval, "/healthz to fail once the rejection has lasted 8s", func() (bool, error) {
		code, _, err := r.Get("/healthz")
		return code == http.StatusServiceUnavailable, err
	}); err != nil {
		t.Fatal(err)
	}
	_, body, _ := r.Get("/healthz")
	if !strings.Contains(body, "the registration has failed for") || !strings.Contains(body, "csi-typo.sock") {
		t.Errorf("/healthz says %q, want how long it failed and kubelet's reason", body)
	}
	// Stopped as a liveness probe's restart stops it: exit 1, kubelet's
	// reason in the termination message.
	code, err := r.Stop(exitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if code != 1 {
		t.Errorf("exit code %d after a lasting rejection, want 1", code)
	}
	if msg, _ := os.ReadFile(e.termination); !strings.Contains(string(msg), "kubelet rejected the plugin") || !strings.Contains(string(msg), "csi-typo.sock") {
		t.Errorf("termination message %q, want kubelet's reason", msg)
	}
}

// The other two lasting failures fail /healthz too once they have lasted
// --unhealthy-after, and leave their reason for kubectl describe pod.
func TestLastingFailuresFailHealthz(t *testing.T) {
	t.Parallel()
	t.Run("kubelet never calls", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "silent.e2e.example.com")
		e.startDriver(false)
		r := e.startRegistrar("registrar", func(c *harness.RegistrarConfig) { c.ExtraArgs = append(c.ExtraArgs, "--unhealthy-after=2s") })
		wantHealthzFailure(t, r, "kubelet has not called GetInfo")
		if st, err := r.Status(); err != nil || st.State != "kubelet-silent" {
			t.Errorf("/status = %+v, %v; want kubelet-silent", st, err)
		}
		wantStoppedFailing(t, e, r, "kubelet has not called GetInfo")
	})
	t.Run("the driver never answers", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "nodriver.e2e.example.com")
		r := e.startRegistrar("registrar", func(c *harness.RegistrarConfig) { c.ExtraArgs = append(c.ExtraArgs, "--unhealthy-after=2s") })
		wantHealthzFailure(t, r, "waiting for the CSI driver")
		wantStoppedFailing(t, e, r, "the CSI driver did not answer GetPluginInfo")
	})
	t.Run("a registered driver never", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "healthy.e2e.example.com")
		k := e.startKubelet()
		e.startDriver(false)
		r := e.startRegistrar("registrar", func(c *harness.RegistrarConfig) { c.ExtraArgs = append(c.ExtraArgs, "--unhealthy-after=1s") })
		e.waitRegistered(k)
		if _, err := r.WaitForReadyz(waitTimeout, http.StatusOK, "registered"); err != nil {
			t.Fatal(err)
		}
		// The registrar started failing (waiting for the driver) before it
		// registered; registered, nothing of that counts.
		st, err := r.Status()
		if err != nil || st.State != "registered" {
			t.Fatalf("/status = %+v, %v", st, err)
		}
		if !strings.Contains(st.Raw, `"state": "registered"`) || strings.Contains(st.Raw, "failingSince") {
			t.Errorf("a registered driver's /status says it fails: %s", st.Raw)
		}
		if code, _, err := r.Get("/healthz"); err != nil || code != http.StatusOK {
			t.Errorf("/healthz = %d, %v; want 200", code, err)
		}
	})
}

func wantHealthzFailure(t *testing.T, r *harness.Registrar, reason string) {
	t.Helper()
	if err := harness.Eventually(waitTimeout, pollInterval, "/healthz to fail once the failure has lasted", func() (bool, error) {
		code, _, err := r.Get("/healthz")
		return code == http.StatusServiceUnavailable, err
	}); err != nil {
		t.Fatal(err)
	}
	if _, body, _ := r.Get("/healthz"); !strings.Contains(body, "the registration has failed for") || !strings.Contains(body, reason) {
		t.Errorf("/healthz says %q, want how long it failed and %q", body, reason)
	}
}

func wantStoppedFailing(t *testing.T, e *env, r *harness.Registrar, message string) {
	t.Helper()
	code, err := r.Stop(exitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if code != 1 {
		t.Errorf("exit code %d after a lasting failure, want 1", code)
	}
	if msg, _ := os.ReadFile(e.termination); !strings.Contains(string(msg), message) {
		t.Errorf("termination message %q, want %q", msg, message)
	}
}
