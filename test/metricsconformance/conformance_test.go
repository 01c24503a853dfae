// Package metricsconformance compares the registrar's
// csi_sidecar_operations_seconds histogram (pkg/driverhealth) with the one
// csi-lib-utils' metrics manager, which livenessprobe uses, writes for the
// same calls: name, help text, type, label names and values, buckets and
// counts. A module of its own, so that the registrar's go.mod never
// depends on csi-lib-utils and k8s.io/component-base.
package metricsconformance

import (
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-registrar/node-driver-registrar/pkg/driverhealth"
	"github.com/csi-registrar/node-driver-registrar/pkg/healthz"
)

const driverName = "conformance.csi.example.com"

// identity answers Probe with the next of its answers.
type identity struct {
	csi.UnimplementedIdentityServer
	answers chan func(context.Context) (*csi.ProbeResponse, error)
}

func (i *identity) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return (<-i.answers)(ctx)
}

func ready(context.Context) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

func failed(context.Context) (*csi.ProbeResponse, error) {
	return nil, status.Error(codes.FailedPrecondition, "broken")
}

func hang(ctx context.Context) (*csi.ProbeResponse, error) {
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

func TestOperationsHistogramIsCSILibUtils(t *testing.T) {
	dir, err := os.MkdirTemp("", "mc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "csi.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	driver := &identity{answers: make(chan func(context.Context) (*csi.ProbeResponse, error), 8)}
	server := grpc.NewServer()
	csi.RegisterIdentityServer(server, driver)
	go server.Serve(l)
	defer server.Stop()

	// The same calls, probed by the registrar and recorded with
	// csi-lib-utils' manager as its gRPC interceptor records them: one
	// before the driver's name is known, then ready, ready, an error and a
	// call past the timeout. All take less than the first bucket, 0.1 s.
	prober := driverhealth.New(path, 50*time.Millisecond)
	defer prober.Close()
	manager := metrics.NewCSIMetricsManagerForSidecar("")
	for i, call := range []struct {
		answer func(context.Context) (*csi.ProbeResponse, error)
		err    error
	}{
		{ready, nil},
		{ready, nil},
		{ready, nil},
		{failed, status.Error(codes.FailedPrecondition, "broken")},
		{hang, status.Error(codes.DeadlineExceeded, "context deadline exceeded")},
	} {
		if i == 1 {
			prober.DriverFound(driverName)
			manager.SetDriverName(driverName)
		}
		driver.answers <- call.answer
		if err := prober.Probe(context.Background()); status.Code(err) != status.Code(call.err) {
			t.Fatalf("probe %d: %v, want code %v", i, err, status.Code(call.err))
		}
		manager.RecordMetrics(csi.Identity_Probe_FullMethodName, call.err, time.Millisecond)
	}

	gathered, err := manager.GetRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Each as it is served (the registrar's by its own writer, csi-lib-utils'
	// by Prometheus' encoder) and read by Prometheus' parser.
	var ours, theirs strings.Builder
	if err := healthz.WriteMetrics(&ours, prober.Families()); err != nil {
		t.Fatal(err)
	}
	if _, err := expfmt.MetricFamilyToText(&theirs, family(t, gathered, driverhealth.OperationsMetric)); err != nil {
		t.Fatal(err)
	}
	got, want := parse(t, ours.String()), parse(t, theirs.String())
	if got.GetHelp() != want.GetHelp() || got.GetType() != want.GetType() {
		t.Errorf("help %q, type %v; csi-lib-utils: %q, %v", got.GetHelp(), got.GetType(), want.GetHelp(), want.GetType())
	}
	if len(got.Metric) != len(want.Metric) {
		t.Fatalf("%d series, csi-lib-utils %d:\n%v\n%v", len(got.Metric), len(want.Metric), got.Metric, want.Metric)
	}
	for i, w := range want.Metric {
		g := got.Metric[i]
		if labels(g) != labels(w) {
			t.Errorf("series %d: labels %s, csi-lib-utils %s", i, labels(g), labels(w))
		}
		gh, wh := g.GetHistogram(), w.GetHistogram()
		if gh.GetSampleCount() != wh.GetSampleCount() {
			t.Errorf("series %s: count %d, csi-lib-utils %d", labels(w), gh.GetSampleCount(), wh.GetSampleCount())
		}
		if len(gh.Bucket) != len(wh.Bucket) {
			t.Fatalf("series %s: %d buckets, csi-lib-utils %d", labels(w), len(gh.Bucket), len(wh.Bucket))
		}
		for j, wb := range wh.Bucket {
			gb := gh.Bucket[j]
			if gb.GetUpperBound() != wb.GetUpperBound() || gb.GetCumulativeCount() != wb.GetCumulativeCount() {
				t.Errorf("series %s, bucket %d: le %v count %d, csi-lib-utils le %v count %d", labels(w), j,
					gb.GetUpperBound(), gb.GetCumulativeCount(), wb.GetUpperBound(), wb.GetCumulativeCount())
			}
		}
	}
}

func family(t *testing.T, families []*dto.MetricFamily, name string) *dto.MetricFamily {
	t.Helper()
	for _, f := range families {
		if f.GetName() == name {
			return f
		}
	}
	t.Fatalf("no family %s", name)
	return nil
}

// parse is the family of the operations histogram in text.
func parse(t *testing.T, text string) *dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("not in the Prometheus text format: %v\n%s", err, text)
	}
	return family(t, slices.Collect(maps.Values(families)), driverhealth.OperationsMetric)
}

func labels(m *dto.Metric) string {
	var s string
	for _, l := range m.Label {
		s += l.GetName() + "=" + l.GetValue() + ","
	}
	return s
}
