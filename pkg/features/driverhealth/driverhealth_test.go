package driverhealth_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/pkg/driver"
	"github.com/csi-registrar/node-driver-registrar/pkg/features/driverhealth"
	"github.com/csi-registrar/node-driver-registrar/test/afunix"
)

// testTimeout bounds every wait of a test; the probe timeout of the tests
// is shorter, so that a hang is seen quickly.
const (
	testTimeout  = 30 * time.Second
	probeTimeout = 300 * time.Millisecond
)

// answer is what the test driver's Probe returns for one call.
type answer func(ctx context.Context) (*csi.ProbeResponse, error)

// testDriver is a CSI Identity service on a real gRPC server on a Unix
// socket, whose Probe answers what the test says, and which counts the
// connections it accepted.
type testDriver struct {
	csi.UnimplementedIdentityServer
	server      *grpc.Server
	connections atomic.Int64
	calls       atomic.Int64
	answer      answer
}

func (d *testDriver) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	d.calls.Add(1)
	return d.answer(ctx)
}

func newTestDriver(t testing.TB, a answer) *testDriver {
	t.Helper()
	d := &testDriver{server: grpc.NewServer(), answer: a}
	csi.RegisterIdentityServer(d.server, d)
	return d
}

// countingListener counts the connections accepted.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

var hidden atomic.Int64

// serve starts the driver on a socket bound under a hidden name and
// renamed to path, as test/mockdriver does, so that it replaces a socket
// there at one instant. The socket file stays when the driver stops.
func (d *testDriver) serve(t testing.TB, path string) {
	t.Helper()
	afunix.Require(t)
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".d%d", hidden.Add(1)))
	l, err := net.Listen("unix", tmp)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.server.Serve(countingListener{l, &d.connections})
	}()
	t.Cleanup(func() {
		d.server.Stop()
		<-done
	})
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func ready(v bool) answer {
	return func(context.Context) (*csi.ProbeResponse, error) {
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(v)}, nil
	}
}

func unset(context.Context) (*csi.ProbeResponse, error) { return &csi.ProbeResponse{}, nil }

func socketPath(t testing.TB) string {
	// Unix socket paths are limited to 107 bytes: t.TempDir() can be long.
	dir, err := os.MkdirTemp("", "dh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, "csi.sock")
}

// probeServer serves the Prober's handler over real HTTP.
func probeServer(t *testing.T, p *driverhealth.Prober) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = p.Close() })
	return srv
}

// probed starts a driver answering a, and a Prober of it served over HTTP
// that has probed it once, successfully.
func probed(t *testing.T, a answer) (path string, d *testDriver, p *driverhealth.Prober, url string) {
	t.Helper()
	path = socketPath(t)
	d = newTestDriver(t, a)
	d.serve(t, path)
	p = driverhealth.New(path, probeTimeout, clock.RealClock{})
	url = probeServer(t, p).URL
	if code, body := get(t, url); code != http.StatusOK {
		t.Fatalf("driver there: %d %q, want 200", code, body)
	}
	return path, d, p, url
}

// get probes as kubelet does and returns the status code and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+driverhealth.Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestAnswersAsLivenessprobe(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answer   answer
		wantCode int
		wantBody string
		wantGRPC string // the grpc_status_code label
	}{
		{"ready", ready(true), http.StatusOK, "ok", "OK"},
		{"not ready", ready(false), http.StatusInternalServerError, "driver responded but is not ready", "OK"},
		{"ready unset", unset, http.StatusOK, "ok", "OK"},
		{"error", func(context.Context) (*csi.ProbeResponse, error) {
			return nil, status.Error(codes.FailedPrecondition, "disk array offline")
		}, http.StatusInternalServerError, "rpc error: code = FailedPrecondition desc = disk array offline", "FailedPrecondition"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := socketPath(t)
			d := newTestDriver(t, tc.answer)
			d.serve(t, path)
			p := driverhealth.New(path, probeTimeout, clock.RealClock{})
			p.DriverChanged(driver.Event{Name: "mock.csi.example.com", Reachable: true})
			srv := probeServer(t, p)
			code, body := get(t, srv.URL)
			if code != tc.wantCode || body != tc.wantBody {
				t.Errorf("GET %s: %d %q, want %d %q", driverhealth.Path, code, body, tc.wantCode, tc.wantBody)
			}
			// Another path is not the probe: 404, and no call to the driver.
			resp, err := http.Get(srv.URL + "/livez")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("GET /livez: %d, want 404", resp.StatusCode)
			}
			if got := d.calls.Load(); got != 1 {
				t.Errorf("the driver's Probe was called %d times, want 1", got)
			}
			want := fmt.Sprintf(`csi_sidecar_operations_seconds_count{driver_name="mock.csi.example.com",grpc_status_code=%q,method_name="/csi.v1.Identity/Probe"} 1`, tc.wantGRPC)
			if text := metricsText(t, p); !strings.Contains(text, want) {
				t.Errorf("metrics lack %s:\n%s", want, text)
			}
		})
	}
}

func TestAnswersWithinTheTimeoutWhenTheDriverHangs(t *testing.T) {
	path := socketPath(t)
	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{}, 1)
	d := newTestDriver(t, func(ctx context.Context) (*csi.ProbeResponse, error) {
		entered <- struct{}{}
		// Hangs until the test is over, whatever the caller's deadline.
		<-release
		return &csi.ProbeResponse{}, nil
	})
	d.serve(t, path)
	p := driverhealth.New(path, probeTimeout, clock.RealClock{})
	srv := probeServer(t, p)

	code, body := get(t, srv.URL)
	// The driver is still hanging: the answer did not wait for it.
	select {
	case <-entered:
	default:
		t.Fatal("the driver's Probe was not called")
	}
	if code != http.StatusInternalServerError || !strings.Contains(body, "code = DeadlineExceeded") {
		t.Errorf("GET %s with a hanging driver: %d %q, want 500 with DeadlineExceeded", driverhealth.Path, code, body)
	}
	if text := metricsText(t, p); !strings.Contains(text, `csi_sidecar_operations_seconds_count{driver_name="unknown-driver",grpc_status_code="DeadlineExceeded",method_name="/csi.v1.Identity/Probe"} 1`) {
		t.Errorf("metrics lack the timed-out call:\n%s", text)
	}
}

func TestFollowsTheDriverGoneAndBack(t *testing.T) {
	path, first, p, url := probed(t, ready(true))

	// The driver exits and its socket goes.
	first.server.Stop()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	p.DriverChanged(driver.Event{})
	if code, body := get(t, url); code != http.StatusInternalServerError {
		t.Fatalf("driver gone: %d %q, want 500", code, body)
	}

	// It comes back: the probe reaches it without waiting for a backoff,
	// even before the registrar's watch reports it.
	second := newTestDriver(t, ready(true))
	second.serve(t, path)
	if code, body := get(t, url); code != http.StatusOK {
		t.Fatalf("driver back: %d %q, want 200", code, body)
	}
	if n := second.calls.Load(); n != 1 {
		t.Errorf("the new driver got %d calls, want 1", n)
	}
}

func TestDialsAgainWhenTheSocketIsReplaced(t *testing.T) {
	path, old, p, url := probed(t, ready(true))

	// A new driver takes the socket over while the old one still runs, and
	// is not ready: the kept connection still reaches the old one until
	// the registrar's watch reports the new socket.
	replacement := newTestDriver(t, ready(false))
	replacement.serve(t, path)
	p.DriverChanged(driver.Event{Name: "mock.csi.example.com", Reachable: true})
	code, body := get(t, url)
	if code != http.StatusInternalServerError || body != "driver responded but is not ready" {
		t.Errorf("after the socket was replaced: %d %q, want the new driver's not ready", code, body)
	}
	if n := replacement.calls.Load(); n != 1 {
		t.Errorf("the new driver got %d calls, want 1", n)
	}
	if n := old.calls.Load(); n != 1 {
		t.Errorf("the old driver got %d calls, want 1 (before the replacement)", n)
	}
}

func TestConcurrentProbesShareOneConnection(t *testing.T) {
	path := socketPath(t)
	d := newTestDriver(t, ready(true))
	d.serve(t, path)
	// What is shared is the point here, not how fast: under -race on a
	// loaded machine 16 callers at once can take longer than probeTimeout.
	p := driverhealth.New(path, testTimeout, clock.RealClock{})
	srv := probeServer(t, p)

	const clients, each = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, clients*each)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				resp, err := http.Get(srv.URL + driverhealth.Path)
				if err != nil {
					errs <- err
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || string(body) != "ok" {
					errs <- fmt.Errorf("%d %q", resp.StatusCode, body)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := d.calls.Load(); n != clients*each {
		t.Errorf("the driver's Probe was called %d times, want %d", n, clients*each)
	}
	if n := d.connections.Load(); n != 1 {
		t.Errorf("the driver accepted %d connections, want 1 kept for every probe", n)
	}
	if text := metricsText(t, p); !strings.Contains(text, fmt.Sprintf(`grpc_status_code="OK",method_name="/csi.v1.Identity/Probe"} %d`, clients*each)) {
		t.Errorf("metrics do not count %d calls:\n%s", clients*each, text)
	}
}

func TestProbeHonoursTheCallersContext(t *testing.T) {
	path := socketPath(t)
	d := newTestDriver(t, func(ctx context.Context) (*csi.ProbeResponse, error) {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	})
	d.serve(t, path)
	p := driverhealth.New(path, time.Hour, clock.RealClock{})
	t.Cleanup(func() { _ = p.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.Probe(ctx) }()
	// Cancelled once the driver has the call: kubelet gave up.
	deadline := time.After(testTimeout)
	for d.calls.Load() == 0 {
		select {
		case <-deadline:
			t.Fatal("the driver's Probe was not called")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-errc:
		if status.Code(err) != codes.Canceled {
			t.Errorf("Probe: %v, want Canceled", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Probe did not return once its context was cancelled")
	}
}

func TestNoMetricsBeforeTheFirstProbe(t *testing.T) {
	p := driverhealth.New("/nonexistent/csi.sock", probeTimeout, clock.RealClock{})
	if text := metricsText(t, p); text != "" {
		t.Errorf("metrics before any probe:\n%s", text)
	}
	if err := p.Probe(context.Background()); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("Probe of a missing socket: %v, want DeadlineExceeded", err)
	}
}
