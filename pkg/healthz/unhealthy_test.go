package healthz

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
	"github.com/csi-registrar/node-driver-registrar/test/afunix"
	"github.com/csi-registrar/node-driver-registrar/test/poll"
)

// runWithClock runs a real registration whose timers, and the probes'
// idea of the time, are clock's.
func runWithClock(t *testing.T, clock *testingclock.FakeClock, driver bool) *registration.Server {
	t.Helper()
	if driver {
		afunix.Require(t) // the registration socket
	}
	srv, err := registration.New(registration.Config{Endpoint: "/csi.sock", Dir: tempDir(t), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { stop() })
	if driver {
		srv.DriverFound(testDriver)
		poll.Until(t, "the registration serves its socket", func() bool {
			return srv.Status().Ready || srv.Status().State == registration.WaitingForKubelet
		})
	}
	return srv
}

func kubeletSays(t *testing.T, srv *registration.Server, registered bool, reason string) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+srv.Status().SocketPath, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := registerapi.NewRegistrationClient(conn).NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: registered, Error: reason}); err != nil {
		t.Fatal(err)
	}
}

func kubeletCallsGetInfo(t *testing.T, srv *registration.Server) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+srv.Status().SocketPath, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := registerapi.NewRegistrationClient(conn).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatal(err)
	}
}

// /healthz fails once the registration has failed for the FailureLimit, in
// each way a registration fails for good, and never for a registered
// driver.
func TestHealthzFailsOnceTheFailureLasts(t *testing.T) {
	const limit = 3 * time.Minute
	cases := []struct {
		name string
		// fail brings the registration to its failure, which starts at the
		// fake clock's time when it returns.
		fail      func(t *testing.T, clock *testingclock.FakeClock) *registration.Server
		wantState registration.State
		wantBody  string
	}{
		{"kubelet rejects the driver", func(t *testing.T, clock *testingclock.FakeClock) *registration.Server {
			srv := runWithClock(t, clock, true)
			kubeletSays(t, srv, false, "dial unix /typo/csi.sock: no such file or directory")
			poll.Until(t, "the rejection is recorded", func() bool { return srv.Status().State == registration.Rejected })
			// kubelet (1.36 and later) tries again by itself on the same
			// socket, which leaves it in place: no publication again, whose
			// replacement of the socket a probe could meet, while the clock
			// is stepped past the limit.
			kubeletCallsGetInfo(t, srv)
			poll.Until(t, "kubelet's own retry is recorded", func() bool {
				return strings.Contains(srv.Status().Reason, "kubelet tries again by itself on this socket")
			})
			return srv
		}, registration.Rejected, "rejected by kubelet: dial unix /typo/csi.sock"},
		{"kubelet never calls", func(t *testing.T, clock *testingclock.FakeClock) *registration.Server {
			srv := runWithClock(t, clock, true)
			clock.Step(10 * time.Second)
			poll.Until(t, "kubelet is silent", func() bool { return srv.Status().State == registration.KubeletSilent })
			return srv
		}, registration.KubeletSilent, "kubelet has not called GetInfo"},
		{"the driver never answers", func(t *testing.T, clock *testingclock.FakeClock) *registration.Server {
			return runWithClock(t, clock, false)
		}, registration.WaitingForDriver, "waiting for the CSI driver"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := testingclock.NewFakeClock(time.Now())
			srv := tc.fail(t, clock)
			h := New(srv, Options{FailureLimit: registration.FailureLimit{After: limit, Clock: clock}})
			if code, body := probe(t, h, "/healthz"); code != http.StatusOK {
				t.Fatalf("as the failure starts: /healthz = %d %q, want 200", code, body)
			}
			clock.Step(limit - time.Second)
			if code, body := probe(t, h, "/healthz"); code != http.StatusOK {
				t.Fatalf("a second before the limit: /healthz = %d %q, want 200", code, body)
			}
			clock.Step(time.Second)
			code, body := probe(t, h, "/healthz")
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "the registration has failed for 3m0s") || !strings.Contains(body, tc.wantBody) {
				t.Errorf("at the limit: /healthz = %d %q, want 503 with the failure's reason", code, body)
			}
			if st := srv.Status(); st.State != tc.wantState {
				t.Errorf("state = %s, want %s", st.State, tc.wantState)
			}
		})
	}
}

func TestHealthzNeverFailsARegisteredDriver(t *testing.T) {
	clock := testingclock.NewFakeClock(time.Now())
	srv := runWithClock(t, clock, true)
	kubeletSays(t, srv, false, "a first rejection")
	poll.Until(t, "the rejection is recorded", func() bool { return srv.Status().State == registration.Rejected })
	kubeletSays(t, srv, true, "")
	poll.Until(t, "registered", func() bool { return srv.Status().State == registration.Registered })
	h := New(srv, Options{FailureLimit: registration.FailureLimit{After: time.Minute, Clock: clock}})
	clock.Step(time.Hour)
	if code, body := probe(t, h, "/healthz"); code != http.StatusOK {
		t.Errorf("an hour after registering: /healthz = %d %q, want 200", code, body)
	}
	if st := srv.Status(); st.FailingSince != nil {
		t.Errorf("a registered driver fails since %v", st.FailingSince)
	}
}
