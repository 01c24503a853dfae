package driverhealth_test

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/features/driverhealth"
)

// BenchmarkProbe is one Identity.Probe of the test driver over a real Unix
// socket: over the Prober's kept connection, and, for comparison, over a
// connection dialled for the probe and closed after it, as livenessprobe
// probes.
func BenchmarkProbe(b *testing.B) {
	path := socketPath(b)
	newTestDriver(b, ready(true)).serve(b, path)
	ctx := context.Background()
	b.Run("kept connection", func(b *testing.B) {
		p := driverhealth.New(path, probeTimeout, clock.RealClock{})
		defer p.Close()
		b.ReportAllocs()
		for b.Loop() {
			if err := p.Probe(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new connection per probe", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			conn, err := unixgrpc.NewClient(path)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{}, grpc.WaitForReady(true)); err != nil {
				b.Fatal(err)
			}
			_ = conn.Close()
		}
	})
}
