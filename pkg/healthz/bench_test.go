package healthz

// Benchmarks of /healthz in process: the handler alone, and over loopback
// HTTP; and of a /metrics scrape. The figures of the whole process come from test/bench: make bench.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/poll"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// benchServer runs a registration server whose socket is published and an
// HTTP server reporting on it, both without logging, and returns the HTTP
// server's handler and address.
func benchServer(b *testing.B) (*Server, string) {
	b.Helper()
	dir, err := os.MkdirTemp("", "hzb")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	srv, err := registration.New(registration.Config{Endpoint: "/csi.sock", Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	hz := New(srv, Options{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var g errgroup.Group
	g.Go(func() error { return srv.Run(ctx) })
	g.Go(func() error { return serveOne(ctx, hz, l) })
	b.Cleanup(func() {
		cancel()
		_ = g.Wait()
		_ = os.RemoveAll(dir)
	})
	srv.DriverFound(testDriver)
	poll.Until(b, "the registration socket is published", func() bool { return srv.Status().Ready || srv.Status().State == registration.WaitingForKubelet })
	return hz, l.Addr().String()
}

// BenchmarkHealthz measures /healthz on a registrar that serves its socket:
// the handler called directly, then requests over loopback HTTP on kept
// connections from 1 and from 16 concurrent clients, with the latency
// percentiles of the requests of the last run.
func BenchmarkHealthz(b *testing.B) {
	hz, addr := benchServer(b)
	b.Run("handler", func(b *testing.B) { benchHandler(b, hz, "/healthz") })
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("loopback/clients=%d", clients), func(b *testing.B) {
			transport := &http.Transport{MaxIdleConnsPerHost: clients}
			defer transport.CloseIdleConnections()
			client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
			url := "http://" + addr + "/healthz"
			latencies := make([]time.Duration, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			var next atomic.Int64
			var g errgroup.Group
			for range clients {
				g.Go(func() error {
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return nil
						}
						start := time.Now()
						resp, err := client.Get(url)
						if err != nil {
							return err
						}
						_, err = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
						latencies[i] = time.Since(start)
						if err != nil {
							return err
						}
						if resp.StatusCode != http.StatusOK {
							return fmt.Errorf("GET /healthz = %d", resp.StatusCode)
						}
					}
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			slices.Sort(latencies)
			b.ReportMetric(float64(latencies[(len(latencies)-1)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(latencies[(len(latencies)-1)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

// BenchmarkMetrics measures a /metrics scrape of a registrar that serves
// its socket, by the handler called directly: the registrar's families, the
// process_* families read from /proc and the go_* ones from the runtime.
func BenchmarkMetrics(b *testing.B) {
	hz, _ := benchServer(b)
	benchHandler(b, hz, "/metrics")
}

// benchHandler calls the handler of path directly, b.N times.
func benchHandler(b *testing.B, hz *Server, path string) {
	request := httptest.NewRequest(http.MethodGet, path, nil)
	b.ReportAllocs()
	for b.Loop() {
		recorder := httptest.NewRecorder()
		hz.mux.ServeHTTP(recorder, request)
		if recorder.Code != http.StatusOK {
			b.Fatalf("GET %s = %d %s", path, recorder.Code, recorder.Body)
		}
	}
}
