package integration

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/test/poll"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The driver's liveness probe served by the registrar
// (--driver-health-endpoint), against the test driver whose Probe answer a
// file changes while it runs: every answer livenessprobe knows, the driver
// killed and started again, and the registration untouched throughout.
func TestDriverHealthEndpoint(t *testing.T) {
	const name = "liveness.csi.example.com"
	n := newNode(t)
	probeFile := filepath.Join(n.root, "probe")
	setProbe := func(answer string) {
		t.Helper()
		if err := os.WriteFile(probeFile, []byte(answer+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setProbe("ready")
	driverProc := n.startDriver(t, name, "--probe-file="+probeFile)
	healthAddr := freeAddress(t)
	registrar := n.startRegistrar(t, "--driver-health-endpoint="+healthAddr, "--probe-timeout=500ms")
	n.waitForSocket(t, name, registrar)
	client := kubeletClient(t, n.socketPath(name))
	if _, err := client.GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	registered := func() {
		t.Helper()
		if code, body := get(n.httpAddr, "/readyz"); code != http.StatusOK {
			t.Errorf("the registrar's /readyz: %d %q, want 200: the driver's probe must not touch the registration", code, body)
		}
		if code, body := get(n.httpAddr, "/healthz"); code != http.StatusOK {
			t.Errorf("the registrar's /healthz: %d %q, want 200", code, body)
		}
	}
	poll.UntilWithin(t, slowTimeout, "the driver health endpoint answers", func() bool {
		code, _ := get(healthAddr, "/healthz")
		return code != 0
	})

	for _, tc := range []struct {
		answer   string
		wantCode int
		wantBody string // a part of the body
	}{
		{"ready", http.StatusOK, "ok"},
		{"unset", http.StatusOK, "ok"},
		{"not-ready", http.StatusInternalServerError, "driver responded but is not ready"},
		{"error", http.StatusInternalServerError, "code = FailedPrecondition desc = mockdriver: Probe fails on request"},
		{"hang", http.StatusInternalServerError, "code = DeadlineExceeded"},
		{"ready", http.StatusOK, "ok"},
	} {
		setProbe(tc.answer)
		code, body := get(healthAddr, "/healthz")
		if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
			t.Errorf("Probe answering %s: /healthz %d %q, want %d with %q", tc.answer, code, body, tc.wantCode, tc.wantBody)
		}
		registered()
	}
	if code, _ := get(healthAddr, "/readyz"); code != http.StatusNotFound {
		t.Errorf("/readyz on the driver health endpoint: %d, want 404: it serves /healthz only", code)
	}

	// The driver is killed and leaves its socket: the probe fails, the
	// registration stays; a new driver is probed over a new connection.
	if err := driverProc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-driverProc.exited
	if code, body := get(healthAddr, "/healthz"); code != http.StatusInternalServerError {
		t.Errorf("driver killed: /healthz %d %q, want 500", code, body)
	}
	registered()
	n.startDriver(t, name, "--probe-file="+probeFile)
	poll.UntilWithin(t, slowTimeout, "the restarted driver is probed", func() bool {
		code, _ := get(healthAddr, "/healthz")
		return code == http.StatusOK
	})
	registered()

	_, metrics := get(n.httpAddr, "/metrics")
	for _, want := range []string{
		"# HELP csi_sidecar_operations_seconds [ALPHA] Container Storage Interface operation duration with gRPC error code status total",
		"# TYPE csi_sidecar_operations_seconds histogram",
		`csi_sidecar_operations_seconds_count{driver_name="` + name + `",grpc_status_code="FailedPrecondition",method_name="/csi.v1.Identity/Probe"} 1`,
		`csi_sidecar_operations_seconds_bucket{driver_name="` + name + `",grpc_status_code="DeadlineExceeded",method_name="/csi.v1.Identity/Probe",le="1"} `,
		`csi_sidecar_operations_seconds_count{driver_name="` + name + `",grpc_status_code="OK",method_name="/csi.v1.Identity/Probe"} `,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// Without --driver-health-endpoint nothing listens for it, the driver is
// never probed, and /metrics has no csi_sidecar family.
func TestNoDriverHealthEndpointByDefault(t *testing.T) {
	const name = "noliveness.csi.example.com"
	n := newNode(t)
	driverProc := n.startDriver(t, name)
	registrar := n.startRegistrar(t)
	n.waitForSocket(t, name, registrar)
	poll.UntilWithin(t, slowTimeout, "the registrar found the driver", func() bool {
		return n.status(t, n.httpAddr)["driverReachable"] == true
	})
	if _, metrics := get(n.httpAddr, "/metrics"); strings.Contains(metrics, "csi_sidecar_operations_seconds") {
		t.Error("/metrics has csi_sidecar_operations_seconds without --driver-health-endpoint")
	}
	if strings.Contains(driverProc.stdout.String(), "Probe") {
		t.Errorf("the driver was probed without --driver-health-endpoint:\n%s", driverProc.stdout.String())
	}
}

// The other way round: a registration that kubelet rejects does not fail
// the driver's liveness probe.
func TestDriverHealthIgnoresTheRegistration(t *testing.T) {
	const name = "rejected-liveness.csi.example.com"
	n := newNode(t)
	n.startDriver(t, name, "--probe=ready")
	healthAddr := freeAddress(t)
	registrar := n.startRegistrar(t, "--driver-health-endpoint="+healthAddr)
	n.waitForSocket(t, name, registrar)
	if _, err := kubeletClient(t, n.socketPath(name)).NotifyRegistrationStatus(context.Background(),
		&registerapi.RegistrationStatus{PluginRegistered: false, Error: "rejected by the test"}); err != nil {
		t.Fatal(err)
	}
	poll.UntilWithin(t, slowTimeout, "the registrar reports the rejection", func() bool {
		_, body := get(n.httpAddr, "/readyz")
		return strings.Contains(body, "rejected by kubelet")
	})
	if code, body := get(healthAddr, "/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("the driver's liveness after kubelet rejected the registration: %d %q, want 200 ok", code, body)
	}
}

// An address in use is waited for, and the registration goes on meanwhile.
func TestDriverHealthEndpointInUseIsWaitedFor(t *testing.T) {
	const name = "busy-liveness.csi.example.com"
	n := newNode(t)
	healthAddr := freeAddress(t)
	taken, err := net.Listen("tcp", healthAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	n.startDriver(t, name)
	registrar := n.startRegistrar(t, "--driver-health-endpoint="+healthAddr)
	n.waitForSocket(t, name, registrar)
	poll.UntilWithin(t, slowTimeout, "the registrar says it waits for the address, and for which flag", func() bool {
		return logLineHas(registrar.stderr.String(), "The driver health endpoint's address is in use: waiting for it", `flag="--driver-health-endpoint"`)
	})
	if _, err := kubeletClient(t, n.socketPath(name)).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo while waiting for the address: %v", err)
	}
	taken.Close()
	poll.UntilWithin(t, slowTimeout, "the driver's liveness is served", func() bool {
		code, _ := get(healthAddr, "/healthz")
		return code == http.StatusOK
	})
	if !registrar.running() {
		t.Fatal("the registrar exited")
	}
}
