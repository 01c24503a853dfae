package registration

// Benchmarks of the kubelet-facing socket in process. The figures of the
// whole process (start-up, reaction times, memory) come from test/bench:
// make bench.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/poll"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// serving runs a Server in a short temporary directory, without logging,
// and returns once its socket is published.
func serving(b *testing.B) *Server {
	b.Helper()
	dir, err := os.MkdirTemp("", "regb")
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(Config{Endpoint: testEndpoint, Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		<-done
		_ = os.RemoveAll(dir)
	})
	srv.DriverFound(testDriver)
	poll.Until(b, "the registration socket is published", func() bool { return servesOwn(srv) })
	return srv
}

// BenchmarkHealth is the check behind every /healthz probe: one lstat.
func BenchmarkHealth(b *testing.B) {
	srv := serving(b)
	b.ReportAllocs()
	for b.Loop() {
		if h := health(srv); !strings.HasPrefix(h, "serving ") {
			b.Fatalf("Health() = %v", h)
		}
	}
}

// BenchmarkGetInfo is kubelet's GetInfo over the registration socket, from
// one client and from 32 clients with a connection each. calls/s is the
// throughput of all clients together.
func BenchmarkGetInfo(b *testing.B) {
	srv := serving(b)
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			stubs := make([]registerapi.RegistrationClient, clients)
			for i := range stubs {
				conn, err := grpc.NewClient("unix:"+srv.Status().SocketPath, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = conn.Close() })
				stubs[i] = registerapi.NewRegistrationClient(conn)
				// Connect before the timer starts.
				if _, err := stubs[i].GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			var next atomic.Int64
			var g errgroup.Group
			for _, stub := range stubs {
				g.Go(func() error {
					for next.Add(1) <= int64(b.N) {
						if _, err := stub.GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
							return err
						}
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}

// BenchmarkRepublish deletes the registration socket and waits until a new
// one accepts connections at the path: the self-healing path, in process.
func BenchmarkRepublish(b *testing.B) {
	srv := serving(b)
	path := srv.Status().SocketPath
	watch, err := fsnotify.NewBufferedWatcher(1024)
	if err != nil {
		b.Fatal(err)
	}
	defer watch.Close()
	if err := watch.Add(filepath.Dir(path)); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := os.Remove(path); err != nil {
			b.Fatal(err)
		}
		waitAccepting(b, path, watch)
	}
}

// waitAccepting returns once a connection to path is accepted, trying after
// each event in its directory and every millisecond in case one is missed.
func waitAccepting(b *testing.B, path string, watch *fsnotify.Watcher) {
	b.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	ticker := time.NewTicker(time.Millisecond)
	defer ticker.Stop()
	for {
		if conn, err := net.Dial("unix", path); err == nil {
			_ = conn.Close()
			return
		}
		select {
		case <-watch.Events:
		case err := <-watch.Errors:
			b.Fatal(err)
		case <-ticker.C:
		case <-timeout.C:
			b.Fatalf("%s was not published again", path)
		}
	}
}
