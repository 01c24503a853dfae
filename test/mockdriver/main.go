// Command mockdriver is a CSI driver for tests and the demo. It serves the
// Identity and Node services of the csi-test mock driver
// (github.com/kubernetes-csi/csi-test/v5/driver) on a Unix socket, with
// answers and faults chosen by flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/driver"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Probe's answers, chosen with --probe or --probe-file.
const (
	probeReady    = "ready"     // ready: true
	probeNotReady = "not-ready" // ready: false
	probeUnset    = "unset"     // no ready field: ready, says the CSI spec
	probeError    = "error"     // FailedPrecondition
	probeHang     = "hang"      // no answer until the caller gives up
)

var probeAnswers = []string{probeReady, probeNotReady, probeUnset, probeError, probeHang}

// probeAnswer is the first line of file when it can be read, otherwise
// flagValue.
func probeAnswer(flagValue, file string) string {
	if file == "" {
		return flagValue
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return flagValue
	}
	line, _, _ := strings.Cut(string(data), "\n")
	return strings.TrimSpace(line)
}

// answerProbe answers Probe as answer says.
func answerProbe(ctx context.Context, answer string) (*csi.ProbeResponse, error) {
	switch answer {
	case probeReady:
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
	case probeNotReady:
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil
	case probeUnset:
		return &csi.ProbeResponse{}, nil
	case probeError:
		return nil, status.Error(codes.FailedPrecondition, "mockdriver: Probe fails on request")
	case probeHang:
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	default:
		return nil, status.Errorf(codes.Internal, "mockdriver: unknown Probe answer %q in --probe-file: use one of %s", answer, strings.Join(probeAnswers, ", "))
	}
}

// answerNodeGetInfo answers NodeGetInfo with nodeID (kubelet refuses an
// empty one), an Internal error when fail, or nothing until ctx is done
// when hang.
func answerNodeGetInfo(ctx context.Context, nodeID string, fail, hang bool) (*csi.NodeGetInfoResponse, error) {
	switch {
	case hang:
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	case fail:
		return nil, status.Error(codes.Internal, "mockdriver: NodeGetInfo fails on request")
	}
	return &csi.NodeGetInfoResponse{NodeId: nodeID}, nil
}

// reporter lets gomock report unexpected calls from a plain program.
type reporter struct{}

func (reporter) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "mockdriver: "+format+"\n", args...)
}

func (reporter) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "mockdriver: "+format+"\n", args...)
	os.Exit(2)
}

func main() {
	endpoint := flag.String("endpoint", "", "Unix socket path to listen on (required)")
	name := flag.String("name", "mock.csi.example.com", "driver name returned by GetPluginInfo")
	nodeID := flag.String("node-id", "mock-node", "node ID returned by NodeGetInfo; empty: kubelet rejects the plugin")
	infoDelay := flag.Duration("plugin-info-delay", 0, "delay before answering GetPluginInfo")
	unavailable := flag.Int("unavailable-calls", 0, "answer the first N GetPluginInfo calls with Unavailable")
	probe := flag.String("probe", probeUnset, "Probe's answer: "+strings.Join(probeAnswers, ", "))
	probeFile := flag.String("probe-file", "", "file whose first line, when it exists, replaces --probe at each Probe call, so that a test can change the answer of a running driver")
	failNodeInfo := flag.Bool("fail-node-get-info", false, "answer NodeGetInfo with an Internal error, so kubelet rejects the plugin")
	hangNodeInfo := flag.Bool("hang-node-get-info", false, "answer NodeGetInfo only when the caller gives up (kubelet after 2 minutes), as a driver stuck on what it asks for the node's ID (kubernetes/kubernetes#138171)")
	failNodeInfoCalls := flag.Int("fail-node-get-info-calls", 0, "answer the first N NodeGetInfo calls with an Internal error, so kubelet rejects the plugin N times and then accepts it")
	flag.Parse()
	if *endpoint == "" {
		fmt.Fprintln(os.Stderr, "mockdriver: --endpoint is required")
		os.Exit(2)
	}
	if !slices.Contains(probeAnswers, *probe) {
		fmt.Fprintf(os.Stderr, "mockdriver: --probe=%q: use one of %s\n", *probe, strings.Join(probeAnswers, ", "))
		os.Exit(2)
	}

	ctrl := gomock.NewController(reporter{})
	identity := driver.NewMockIdentityServer(ctrl)
	node := driver.NewMockNodeServer(ctrl)

	var calls atomic.Int64
	identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).AnyTimes().DoAndReturn(
		func(ctx context.Context, _ *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
			n := calls.Add(1)
			fmt.Printf("GetPluginInfo call=%d\n", n)
			if n <= int64(*unavailable) {
				return nil, status.Error(codes.Unavailable, "mockdriver: not ready yet")
			}
			select {
			case <-time.After(*infoDelay):
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return &csi.GetPluginInfoResponse{Name: *name, VendorVersion: "v0.0.1"}, nil
		})
	identity.EXPECT().Probe(gomock.Any(), gomock.Any()).AnyTimes().DoAndReturn(
		func(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
			answer := probeAnswer(*probe, *probeFile)
			fmt.Printf("Probe answer=%s\n", answer)
			return answerProbe(ctx, answer)
		})
	identity.EXPECT().GetPluginCapabilities(gomock.Any(), gomock.Any()).AnyTimes().Return(&csi.GetPluginCapabilitiesResponse{}, nil)
	var nodeInfoCalls atomic.Int64
	node.EXPECT().NodeGetInfo(gomock.Any(), gomock.Any()).AnyTimes().DoAndReturn(
		func(ctx context.Context, _ *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
			fmt.Println("NodeGetInfo")
			fail := *failNodeInfo || nodeInfoCalls.Add(1) <= int64(*failNodeInfoCalls)
			return answerNodeGetInfo(ctx, *nodeID, fail, *hangNodeInfo)
		})
	node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).AnyTimes().Return(&csi.NodeGetCapabilitiesResponse{}, nil)

	d := driver.NewMockCSIDriver(&driver.MockCSIDriverServers{Identity: identity, Node: node})
	// Bound under a temporary name and renamed into place, so that a new
	// instance replaces an old one's socket atomically (a DaemonSet rolling
	// update with maxSurge), and removed on exit only if still its own.
	tmp := fmt.Sprintf("%s.%d", *endpoint, os.Getpid())
	l, err := net.Listen("unix", tmp)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mockdriver: %v\n", err)
		os.Exit(1)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	own, err := os.Lstat(tmp)
	if err == nil {
		err = os.Rename(tmp, *endpoint)
	}
	if err != nil {
		_ = os.Remove(tmp)
		fmt.Fprintf(os.Stderr, "mockdriver: %v\n", err)
		os.Exit(1)
	}
	if err := d.CSIDriver.Start(l); err != nil {
		fmt.Fprintf(os.Stderr, "mockdriver: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("mockdriver: serving %s as %q on %s\n", *name, *nodeID, *endpoint)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	d.Stop()
	if fi, err := os.Lstat(*endpoint); err == nil && os.SameFile(fi, own) {
		_ = os.Remove(*endpoint)
	}
	fmt.Println("mockdriver: stopped")
}
