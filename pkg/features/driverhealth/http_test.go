package driverhealth_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/pkg/features/driverhealth"
	"github.com/csi-registrar/node-driver-registrar/test/poll"
)

// An address another socket holds (the older pod's, with hostNetwork) is
// waited for, on every system: on Windows a busy bind fails with
// WSAEADDRINUSE, not EADDRINUSE. The retries wait on the prober's clock. No
// driver is needed: the server is probed only once it listens.
func TestServeWaitsForAnAddressInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := held.Addr().String()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	// Nothing is created there: the probe only dials it.
	clk := testingclock.NewFakeClock(time.Now())
	p := driverhealth.New(filepath.Join(os.TempDir(), "no-driver-here.sock"), probeTimeout, clk)
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx, address, time.Second) }()

	poll.Until(t, "Serve waits to try the address again, or returns", func() bool {
		return clk.HasWaiters() || len(served) > 0
	})
	if len(served) > 0 {
		t.Fatalf("Serve(%s) with the address held = %v, want it to wait for the address", address, <-served)
	}
	if !strings.Contains(logs.String(), "address is in use") {
		t.Errorf("Serve waits without saying that the address is in use; its log:\n%s", logs.String())
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	poll.Until(t, "the prober answers on "+address+" once the address is free", func() bool {
		resp, err := http.Get("http://" + address + driverhealth.Path)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusInternalServerError
	})
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve after cancel = %v, want nil", err)
	}
}
