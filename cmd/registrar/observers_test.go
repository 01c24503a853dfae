package main

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/internal/afunix"
	"github.com/csi-registrar/node-driver-registrar/internal/poll"
	"github.com/csi-registrar/node-driver-registrar/internal/selinuxcheck"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// runRegistration runs a real registration in a short temp dir with
// observe among its observers, its timers on clock, until the test ends.
func runRegistration(t *testing.T, clock *testingclock.FakeClock, observe registration.Observer) *registration.Server {
	t.Helper()
	afunix.Require(t)
	dir, err := os.MkdirTemp("", "obs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	srv := startRegistration(t, dir, clock, func(srv *registration.Server) { srv.Observe(observe) })
	poll.Until(t, "the socket is published", func() bool { return srv.Status().State == registration.WaitingForKubelet })
	return srv
}

// startRegistration runs a real registration in dir, set up by setup
// before it runs, until the test ends; clock may be nil. It returns once
// the registration serves the socket at its path.
func startRegistration(t *testing.T, dir string, clock *testingclock.FakeClock, setup func(*registration.Server)) *registration.Server {
	t.Helper()
	cfg := registration.Config{Endpoint: "/csi.sock", Dir: dir, KubeletSilence: 10 * time.Second}
	if clock != nil {
		cfg.Clock = clock
	}
	srv, err := registration.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	setup(srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	srv.DriverFound("test.csi.example.com")
	poll.Until(t, "the registration serves its socket", func() bool {
		return srv.Health(context.Background()).Found == registration.FoundOurs
	})
	return srv
}

// What SELinux says of the socket is asked after each publication and
// again when kubelet stays silent, about the published socket; the latest
// answer is kept for /status. (make selinux-test shows the answers
// themselves on a kernel enforcing a policy.)
func TestSELinuxIsAskedAfterPublicationAndSilence(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	denial := selinuxcheck.Denial{Who: "kubelet", Source: "system_u:system_r:kubelet_t:s0", Target: "system_u:system_r:nokubelet_t:s0",
		Class: "unix_stream_socket", Permissions: []string{"connectto"}, Object: "the registrar's socket"}
	watch := &selinuxWatch{logger: klog.Background(), inspect: func(socket string) *selinuxcheck.Report {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, socket)
		return &selinuxcheck.Report{Mode: "enforcing", Files: []selinuxcheck.File{{What: selinuxcheck.WhatSocket, Path: socket}}, Denials: []selinuxcheck.Denial{denial}}
	}}
	clock := testingclock.NewFakeClock(time.Now())
	srv := runRegistration(t, clock, watch.observe)
	path := srv.Status().SocketPath
	poll.Until(t, "SELinux asked after the publication", func() bool { return watch.report() != nil })
	clock.Step(10 * time.Second)
	poll.Until(t, "SELinux asked again after the silence", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(asked) == 2
	})
	watch.inflight.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, socket := range asked {
		if socket != path {
			t.Errorf("SELinux asked about %q, want the published socket %q", socket, path)
		}
	}
	if r := watch.report(); r.Files[0].Path != path || !r.Problem() {
		t.Errorf("latest report %+v, want the denial about %s", r, path)
	}
}

// Where SELinux is off, Inspect answers nil, and nothing of it is kept.
func TestSELinuxOff(t *testing.T) {
	asked := make(chan struct{}, 4)
	watch := &selinuxWatch{logger: klog.Background(), inspect: func(string) *selinuxcheck.Report { asked <- struct{}{}; return nil }}
	runRegistration(t, testingclock.NewFakeClock(time.Now()), watch.observe)
	<-asked
	watch.inflight.Wait()
	if r := watch.report(); r != nil {
		t.Errorf("report = %+v where SELinux is off", r)
	}
}
