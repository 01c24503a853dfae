package healthz

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/afunix"
	"github.com/csi-registrar/node-driver-registrar/test/poll"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

const testDriver = "test.csi.example.com"

// startRegistration runs a real registration server in a short temp dir
// and waits until its socket is published.
func startRegistration(t *testing.T, dir string) (*registration.Server, func() error) {
	t.Helper()
	afunix.Require(t)
	srv, err := registration.New(registration.Config{Endpoint: "/csi.sock", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	srv.DriverFound(testDriver)
	stop := sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() { stop() })
	poll.Until(t, "the registration serves its socket", func() bool {
		return srv.Status().Ready || srv.Status().State == registration.WaitingForKubelet
	})
	return srv, stop
}

func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hz")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// notRunning is a registration that has not started: waiting for the
// driver, as every registrar is when its HTTP server first answers.
func notRunning(t *testing.T) *registration.Server {
	t.Helper()
	srv, err := registration.New(registration.Config{Endpoint: "/csi.sock", Dir: tempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func probe(t *testing.T, h *Server, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestHealthz(t *testing.T) {
	cases := []struct {
		name     string
		setup    func(t *testing.T) *registration.Server
		wantCode int
		wantBody string
	}{
		{"waiting for the driver", func(t *testing.T) *registration.Server { return notRunning(t) }, http.StatusOK, "waiting for the CSI driver"},
		{"serving", func(t *testing.T) *registration.Server {
			srv, _ := startRegistration(t, tempDir(t))
			return srv
		}, http.StatusOK, "serving"},
		{"superseded by a newer instance", func(t *testing.T) *registration.Server {
			dir := tempDir(t)
			older, _ := startRegistration(t, dir)
			startRegistration(t, dir)
			// /healthz answers from the older one's look at the newer socket.
			poll.Until(t, "the older instance steps aside", func() bool { return older.Status().State == registration.Superseded })
			return older
		}, http.StatusOK, "another instance"},
		{"not a socket", func(t *testing.T) *registration.Server {
			srv, _ := startRegistration(t, tempDir(t))
			path := srv.Status().SocketPath
			os.WriteFile(path+".tmp", nil, 0o600)
			os.Rename(path+".tmp", path)
			return srv
		}, http.StatusInternalServerError, "not a socket"},
		{"server stopped", func(t *testing.T) *registration.Server {
			srv, stop := startRegistration(t, tempDir(t))
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			return srv
		}, http.StatusInternalServerError, "stopped"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hz := New(tc.setup(t), Options{})
			code, body := probe(t, hz, "/healthz")
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Errorf("GET /healthz = %d %q, want %d with %q", code, body, tc.wantCode, tc.wantBody)
			}
		})
	}
}

func TestPprofOnlyWhenEnabled(t *testing.T) {
	if code, _ := probe(t, New(notRunning(t), Options{}), "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("pprof disabled: GET /debug/pprof/ = %d, want 404", code)
	}
	if code, body := probe(t, New(notRunning(t), Options{EnablePprof: true}), "/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("pprof enabled: GET /debug/pprof/ = %d, want 200 with the profile index", code)
	}
}

// runLoopback runs the HTTP server on a loopback port and returns its
// address and a function that stops it and returns Serve's result. It is
// stopped when the test ends, if not before.
func runLoopback(t *testing.T) (string, func() error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveOne(ctx, New(notRunning(t), Options{}), l) }()
	stop := sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Serve() = %v, want nil after cancel", err)
		}
	})
	return l.Addr().String(), stop
}

// serveOne serves s on l alone until ctx is done.
func serveOne(ctx context.Context, s *Server, l net.Listener) error {
	listeners := make(chan net.Listener, 1)
	listeners <- l
	return s.Serve(ctx, listeners, func(net.Listener) {}, time.Second)
}

func TestServeServesUntilCancelled(t *testing.T) {
	addr, stop := runLoopback(t)
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz = %d %q", resp.StatusCode, body)
	}

	if err := stop(); err != nil {
		t.Errorf("Serve() = %v, want nil after cancel", err)
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Error("the server still answers after Run returned")
	}
}
