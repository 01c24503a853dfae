package main

import (
	"context"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/internal/afunix"
	"github.com/csi-registrar/node-driver-registrar/internal/poll"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// startRegistration runs a real registration in dir, set up by setup
// before it runs, until the test ends; clock may be nil. It returns once
// the registration serves the socket at its path.
func startRegistration(t *testing.T, dir string, clock *testingclock.FakeClock, setup func(*registration.Server)) *registration.Server {
	t.Helper()
	afunix.Require(t)
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
