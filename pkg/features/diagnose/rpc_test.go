package diagnose

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/afunix"
	"github.com/csi-registrar/node-driver-registrar/test/poll"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// runRegistrar runs a registration server for driver name in a new
// directory, with cfg's other settings, and waits until its socket is
// published.
func runRegistrar(t *testing.T, name string, cfg registration.Config) (*registration.Server, string) {
	t.Helper()
	afunix.Require(t)
	dir, err := os.MkdirTemp("", "diag")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg.Endpoint, cfg.Dir = "/var/lib/kubelet/plugins/x/csi.sock", dir
	srv, err := registration.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	srv.DriverFound(name)
	poll.Until(t, "the registration socket is published", func() bool { return srv.Status().Ready || srv.Status().State == registration.WaitingForKubelet })
	return srv, registration.SocketPath(dir, name)
}

// The diagnosis asks the running registrar's socket for GetInfo: the
// registrar must not count that as a call of kubelet's.
func TestRegistrationInfoIsNotCountedAsKubelets(t *testing.T) {
	srv, path := runRegistrar(t, "diag.csi.example.com", registration.Config{})
	if at := registration.Look(context.Background(), path, 5*time.Second); at.Kind() != registration.AtLive || at.Driver != "diag.csi.example.com" {
		t.Fatalf("Look = %+v, want the registrar answering for diag.csi.example.com", at)
	}
	// Then a call as kubelet makes it, without the registrar's user agent.
	// A call reaches the registrar's loop before its reply goes out: once
	// this one is counted, the diagnosis's would have been too.
	getInfoAsKubelet(t, srv, path)
	if n := srv.Status().KubeletCalls.GetInfo; n != 1 {
		t.Errorf("GetInfo calls counted after the diagnosis's and one of kubelet's = %d, want 1", n)
	}
}

// The diagnosis reads kubelet's verdict from the running registrar, and
// fails with kubelet's own reason after a rejection.
func TestKubeletVerdictFromTheRunningRegistrar(t *testing.T) {
	srv, path := runRegistrar(t, "verdict.csi.example.com", registration.Config{Clock: testingclock.NewFakeClock(time.Now())})
	ctx := context.Background()
	d := &diagnosis{cfg: Config{RegistrationDir: filepath.Dir(path), Timeout: 5 * time.Second}, clock: clock.RealClock{}, socketPath: path, socketAnswered: true}

	// Just published, kubelet has not called: a warning, not yet a failure.
	if c := d.checkKubeletVerdict(ctx); c.Outcome != Warn || !strings.Contains(c.Detail, "has not called yet") {
		t.Errorf("before kubelet's calls: %v %q, want a warning", c.Outcome, c.Detail)
	}

	const reason = `RegisterPlugin error -- dial unix /var/lib/kubelet/plugins/x/csi.sock: connect: no such file or directory`
	notify(t, path, false, reason)
	poll.Until(t, "the rejection is recorded", func() bool { return srv.Status().State == registration.Rejected })
	c := d.checkKubeletVerdict(ctx)
	if c.Outcome != Fail || !strings.Contains(c.Detail, reason) || !strings.Contains(c.Detail, "--kubelet-registration-path") {
		t.Errorf("after a rejection: %v %q, want a failure with kubelet's reason and what to check", c.Outcome, c.Detail)
	}
}

// kubelet called GetInfo and hangs in the driver's NodeGetInfo, which the
// diagnosis found failing: the verdict names it as the likely cause.
func TestKubeletVerdictBlamesAFailedNodeGetInfo(t *testing.T) {
	srv, path := runRegistrar(t, "hang.csi.example.com", registration.Config{})
	getInfoAsKubelet(t, srv, path)
	d := &diagnosis{cfg: Config{RegistrationDir: filepath.Dir(path), Timeout: 5 * time.Second}, clock: clock.RealClock{}, socketPath: path, socketAnswered: true, nodeInfoFailed: true}
	c := d.checkKubeletVerdict(context.Background())
	if c.Outcome != Fail || !strings.Contains(c.Detail, "has sent no verdict") || !strings.Contains(c.Detail, "NodeGetInfo") || !strings.Contains(c.Detail, "the likely cause") {
		t.Errorf("kubelet called GetInfo, NodeGetInfo failed: %v %q, want a failure naming NodeGetInfo as the likely cause", c.Outcome, c.Detail)
	}
}

// getInfoAsKubelet calls GetInfo on the registration socket at path as
// kubelet does, without the registrar's user agent, and waits until srv
// counts it.
func getInfoAsKubelet(t *testing.T, srv *registration.Server, path string) {
	t.Helper()
	conn, err := grpc.NewClient("unix:"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := registerapi.NewRegistrationClient(conn).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "kubelet's call is counted", func() bool { return srv.Status().KubeletCalls.GetInfo >= 1 })
}

func notify(t *testing.T, path string, registered bool, reason string) {
	t.Helper()
	conn, err := unixgrpc.NewClient(path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := registerapi.NewRegistrationClient(conn).NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: registered, Error: reason}); err != nil {
		t.Fatal(err)
	}
}

func TestJudgeRegistration(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) *time.Time { t := now.Add(-ago); return &t }
	tests := []struct {
		name           string
		st             registration.Status
		nodeInfoFailed bool
		want           Outcome
		detail         string
	}{
		{"registered", registration.Status{State: registration.Registered, LastVerdict: &registration.Verdict{Registered: true, Time: *at(time.Minute)}}, false, OK, "registered the driver through this socket 1m0s ago"},
		{"rejected", registration.Status{State: registration.Rejected, Attempts: 3, LastVerdict: &registration.Verdict{Reason: "boom", Time: *at(time.Second)}}, false, Fail, `kubelet rejected the driver 1s ago (3 times in a row): "boom"`},
		{"rejected once", registration.Status{State: registration.Rejected, Attempts: 1, LastVerdict: &registration.Verdict{Reason: "boom", Time: *at(time.Second)}}, false, Fail, `kubelet rejected the driver 1s ago (once): "boom"`},
		{"kubelet silent", registration.Status{State: registration.KubeletSilent, LastPublished: at(time.Minute)}, false, Fail, "kubelet has not called GetInfo on the socket published 1m0s ago"},
		{"just published", registration.Status{State: registration.WaitingForKubelet, LastPublished: at(time.Second)}, false, Warn, "run --diagnose again"},
		{"never called", registration.Status{State: registration.WaitingForKubelet, LastPublished: at(time.Minute)}, false, Fail, "kubelet has not called GetInfo on the socket published 1m0s ago: kubelet does not watch /registration"},
		{"called, no verdict", registration.Status{State: registration.WaitingForKubelet, LastPublished: at(time.Minute), LastGetInfo: at(50 * time.Second)}, false, Fail, "called GetInfo 50s ago but has sent no verdict"},
		{"called, no verdict, NodeGetInfo failed", registration.Status{State: registration.WaitingForKubelet, LastPublished: at(time.Minute), LastGetInfo: at(50 * time.Second)}, true, Fail, "called GetInfo 50s ago but has sent no verdict: its CSI handler waits for the driver's NodeGetInfo, or gave up on it, which failed here too (above): the likely cause"},
		{"never called, NodeGetInfo failed", registration.Status{State: registration.WaitingForKubelet, LastPublished: at(time.Minute)}, true, Fail, "kubelet has not called GetInfo on the socket published 1m0s ago: kubelet does not watch"},
		{"an older GetInfo", registration.Status{State: registration.WaitingForKubelet, LastPublished: at(time.Minute), LastGetInfo: at(2 * time.Minute)}, false, Fail, "has not called GetInfo"},
		{"superseded", registration.Status{State: registration.Superseded, Reason: "superseded: another instance"}, false, OK, "another instance"},
		{"stopped", registration.Status{State: registration.Stopped, Reason: "stopped"}, false, Fail, `reports "stopped"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := judgeRegistration(Check{Name: "kubelet's registration"}, &tc.st, now, "/registration", tc.nodeInfoFailed)
			if c.Outcome != tc.want || !strings.Contains(c.Detail, tc.detail) {
				t.Errorf("got %v %q, want %v with %q", c.Outcome, c.Detail, tc.want, tc.detail)
			}
		})
	}
}
