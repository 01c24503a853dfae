package csiidentity

import (
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-registrar/node-driver-registrar/test/afunix"
)

// identity is a CSI Identity server built on the spec's generated code.
type identity struct {
	csi.UnimplementedIdentityServer
	info  *csi.GetPluginInfoResponse
	probe *csi.ProbeResponse
}

func (s *identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return s.info, nil
}

// node is a CSI Node server built on the spec's generated code, answering
// NodeGetInfo with nodeInfo, or failing it when nodeInfo is nil.
type node struct {
	csi.UnimplementedNodeServer
	nodeInfo *csi.NodeGetInfoResponse
}

func (s *node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	if s.nodeInfo == nil {
		return nil, grpcstatus.Error(codes.FailedPrecondition, "no node")
	}
	return s.nodeInfo, nil
}

func (s *identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if s.probe == nil {
		return nil, grpcstatus.Error(codes.Unavailable, "not now")
	}
	return s.probe, nil
}

// serve serves srv on a Unix socket in a temporary directory and returns a
// client of it.
func serve(t *testing.T, srv *identity, nodeSrv *node) *grpc.ClientConn {
	t.Helper()
	afunix.Require(t)
	dir, err := os.MkdirTemp("", "csiid")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "csi.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	csi.RegisterIdentityServer(s, srv)
	csi.RegisterNodeServer(s, nodeSrv)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("unix:"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestCallsADriverBuiltOnTheSpec(t *testing.T) {
	srv := &identity{info: &csi.GetPluginInfoResponse{
		Name: "hostpath.csi.k8s.io", VendorVersion: "v1.17.0", Manifest: map[string]string{"url": "https://example.com"},
	}}
	nodeSrv := &node{}
	conn := serve(t, srv, nodeSrv)
	ctx := context.Background()

	info, err := GetPluginInfo(ctx, conn)
	if err != nil || info != (PluginInfo{Name: "hostpath.csi.k8s.io", VendorVersion: "v1.17.0"}) {
		t.Errorf("GetPluginInfo = %+v, %v", info, err)
	}
	for _, tc := range []struct {
		ready *wrapperspb.BoolValue
		want  bool
	}{{nil, true}, {wrapperspb.Bool(true), true}, {wrapperspb.Bool(false), false}} {
		srv.probe = &csi.ProbeResponse{Ready: tc.ready}
		if ready, err := Probe(ctx, conn); err != nil || ready != tc.want {
			t.Errorf("Probe answering ready %v = %v, %v; want %v", tc.ready, ready, err, tc.want)
		}
	}
	srv.probe = nil
	if _, err := Probe(ctx, conn); grpcstatus.Code(err) != codes.Unavailable {
		t.Errorf("Probe of a driver that fails it = %v, want its Unavailable", err)
	}

	for _, answer := range []*csi.NodeGetInfoResponse{
		{NodeId: "node-1", MaxVolumesPerNode: 39, AccessibleTopology: &csi.Topology{Segments: map[string]string{"topology.kubernetes.io/zone": "z1", "example.com/rack": ""}}},
		{NodeId: "node-2"},
		{}, // an empty node ID: read as it came, kubelet refuses it
	} {
		nodeSrv.nodeInfo = answer
		got, err := NodeGetInfo(ctx, conn)
		if err != nil || got.NodeID != answer.NodeId || got.MaxVolumesPerNode != answer.MaxVolumesPerNode || !maps.Equal(got.Topology, answer.GetAccessibleTopology().GetSegments()) {
			t.Errorf("NodeGetInfo answering %v = %+v, %v", answer, got, err)
		}
	}
	nodeSrv.nodeInfo = nil
	if _, err := NodeGetInfo(ctx, conn); grpcstatus.Code(err) != codes.FailedPrecondition {
		t.Errorf("NodeGetInfo of a driver that fails it = %v, want its FailedPrecondition", err)
	}
}

// Whatever the spec's generated code reads, the answers are read the same.
func FuzzAnswers(f *testing.F) {
	for _, m := range []proto.Message{
		&csi.GetPluginInfoResponse{Name: "a", VendorVersion: "1", Manifest: map[string]string{"k": "v"}},
		&csi.ProbeResponse{Ready: wrapperspb.Bool(true)},
		&csi.ProbeResponse{Ready: wrapperspb.Bool(false)},
		&csi.NodeGetInfoResponse{NodeId: "n", MaxVolumesPerNode: 16, AccessibleTopology: &csi.Topology{Segments: map[string]string{"zone": "a", "": "b", "rack": ""}}},
		&csi.NodeGetInfoResponse{MaxVolumesPerNode: -1},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01, 0x0a, 0x00}) // ready twice: merged
	// Two topologies, the second replacing one key of the first.
	f.Add([]byte{0x1a, 0x0a, 0x0a, 0x08, 0x0a, 0x01, 'k', 0x12, 0x01, 'a', 0x12, 0x00, 0x1a, 0x07, 0x0a, 0x05, 0x0a, 0x01, 'k', 0x12, 0x00})
	f.Fuzz(func(t *testing.T, answer []byte) {
		var info csi.GetPluginInfoResponse
		if proto.Unmarshal(answer, &info) == nil {
			got, err := pluginInfo(answer)
			if err != nil || got.Name != info.Name || got.VendorVersion != info.VendorVersion {
				t.Errorf("GetPluginInfo's answer %x read as %+v, %v; the spec's code reads %q, %q", answer, got, err, info.Name, info.VendorVersion)
			}
		}
		var probe csi.ProbeResponse
		if proto.Unmarshal(answer, &probe) == nil {
			want := probe.Ready == nil || probe.Ready.Value
			if got, err := readiness(answer); err != nil || got != want {
				t.Errorf("Probe's answer %x read as ready %v, %v; the spec's code reads %v", answer, got, err, want)
			}
		}
		var node csi.NodeGetInfoResponse
		if proto.Unmarshal(answer, &node) == nil {
			got, err := nodeInfo(answer)
			segments := node.GetAccessibleTopology().GetSegments()
			if err != nil || got.NodeID != node.NodeId || got.MaxVolumesPerNode != node.MaxVolumesPerNode || !maps.Equal(got.Topology, segments) {
				t.Errorf("NodeGetInfo's answer %x read as %+v, %v; the spec's code reads %q, %d, %v", answer, got, err, node.NodeId, node.MaxVolumesPerNode, segments)
			}
		}
	})
}

// The metric label and the calls use the spec's names for the methods.
func TestMethodNamesAreTheSpecs(t *testing.T) {
	if GetPluginInfoMethod != csi.Identity_GetPluginInfo_FullMethodName || ProbeMethod != csi.Identity_Probe_FullMethodName || NodeGetInfoMethod != csi.Node_NodeGetInfo_FullMethodName {
		t.Errorf("methods %q, %q, %q; the spec's are %q, %q, %q", GetPluginInfoMethod, ProbeMethod, NodeGetInfoMethod,
			csi.Identity_GetPluginInfo_FullMethodName, csi.Identity_Probe_FullMethodName, csi.Node_NodeGetInfo_FullMethodName)
	}
}
