// Package csiidentity makes the calls to the CSI driver that the registrar
// needs: the Identity service's GetPluginInfo and Probe, and, for
// --diagnose, the Node service's NodeGetInfo, as kubelet calls it when it
// registers the driver. It makes them without the CSI spec's
// generated Go package, whose cost the registrar's memory budget (VmRSS
// after registration at most 0.85 of upstream's 19.3 MB) cannot hold: the
// package registers the descriptors of the whole spec, and of
// descriptor.proto for its options, when the process starts, and cannot be
// linked without doing so. Linked by the registrar through its own calls and
// through csi-lib-utils' connection (its protosanitizer reads the spec's
// options), it cost 839,680 bytes of the stripped binary and 1.6-1.8 MB of
// VmRSS after registration (17.7-18.1 MB against 16.0-16.6, medians of 20
// in 12 interleaved runs each on 2026-11-27); the package alone, imported
// blank, 450,560 bytes and 0.7-0.9 MB (16.8-17.3 MB). The requests are
// empty; the answers are read from protobuf's wire format with protowire,
// which gRPC links anyway, and FuzzAnswers checks them against the
// generated code.
package csiidentity

import (
	"context"
	"errors"
	"slices"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
)

// The methods' full names, as gRPC sends them.
const (
	GetPluginInfoMethod = "/csi.v1.Identity/GetPluginInfo"
	ProbeMethod         = "/csi.v1.Identity/Probe"
	NodeGetInfoMethod   = "/csi.v1.Node/NodeGetInfo"
)

// PluginInfo is what the driver says of itself in GetPluginInfo.
type PluginInfo struct {
	Name          string // field 1
	VendorVersion string // field 2
}

// GetPluginInfo calls the driver's GetPluginInfo.
func GetPluginInfo(ctx context.Context, conn grpc.ClientConnInterface, opts ...grpc.CallOption) (PluginInfo, error) {
	answer, err := call(ctx, conn, GetPluginInfoMethod, opts)
	if err != nil {
		return PluginInfo{}, err
	}
	return pluginInfo(answer)
}

func pluginInfo(answer []byte) (info PluginInfo, err error) {
	err = fields(answer, func(num protowire.Number, typ protowire.Type, value []byte) error {
		switch {
		case typ != protowire.BytesType:
			return nil // not a field of the spec's: skipped as unknown
		case num == 1:
			return readString(value, &info.Name, "GetPluginInfo")
		case num == 2:
			return readString(value, &info.VendorVersion, "GetPluginInfo")
		}
		return nil // the manifest, or a field of a later spec
	})
	return info, err
}

// Probe calls the driver's Probe and returns its readiness: false only when
// the answer says ready = false. The CSI spec has the caller assume that a
// plugin whose answer does not say is ready.
func Probe(ctx context.Context, conn grpc.ClientConnInterface, opts ...grpc.CallOption) (ready bool, err error) {
	answer, err := call(ctx, conn, ProbeMethod, opts)
	if err != nil {
		return false, err
	}
	return readiness(answer)
}

func readiness(answer []byte) (bool, error) {
	// ready is a google.protobuf.BoolValue, false unless its field 1 says
	// true; each occurrence is merged into the previous ones.
	said, value := false, false
	err := fields(answer, func(num protowire.Number, typ protowire.Type, wrapper []byte) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		said = true
		wrapper, n := protowire.ConsumeBytes(wrapper)
		if n < 0 {
			return parseError(n)
		}
		return fields(wrapper, func(num protowire.Number, typ protowire.Type, v []byte) error {
			if num != 1 || typ != protowire.VarintType {
				return nil
			}
			x, n := protowire.ConsumeVarint(v)
			value = x != 0
			return parseError(n)
		})
	})
	if err != nil {
		return false, err
	}
	return !said || value, nil
}

// NodeInfo is what kubelet reads of the driver's NodeGetInfo answer.
type NodeInfo struct {
	NodeID            string            // field 1
	MaxVolumesPerNode int64             // field 2; 0: not said
	Topology          map[string]string // field 3, accessible_topology's segments
}

// NodeGetInfo calls the driver's NodeGetInfo.
func NodeGetInfo(ctx context.Context, conn grpc.ClientConnInterface, opts ...grpc.CallOption) (NodeInfo, error) {
	answer, err := call(ctx, conn, NodeGetInfoMethod, opts)
	if err != nil {
		return NodeInfo{}, err
	}
	return nodeInfo(answer)
}

func nodeInfo(answer []byte) (info NodeInfo, err error) {
	err = fields(answer, func(num protowire.Number, typ protowire.Type, value []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			return readString(value, &info.NodeID, "NodeGetInfo")
		case num == 2 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(value)
			info.MaxVolumesPerNode = int64(v)
			return parseError(n)
		case num == 3 && typ == protowire.BytesType:
			// A Topology; each occurrence is merged into the previous ones.
			topology, n := protowire.ConsumeBytes(value)
			if n < 0 {
				return parseError(n)
			}
			return fields(topology, func(num protowire.Number, typ protowire.Type, entry []byte) error {
				if num != 1 || typ != protowire.BytesType {
					return nil
				}
				return readSegment(entry, &info.Topology)
			})
		}
		return nil // not a field of the spec's, or of a later spec
	})
	return info, err
}

// readSegment reads one entry of Topology's map<string, string> segments
// into *segments: a key (field 1) and a value (field 2), either absent
// when empty; a key given again replaces its value.
func readSegment(value []byte, segments *map[string]string) error {
	entry, n := protowire.ConsumeBytes(value)
	if n < 0 {
		return parseError(n)
	}
	var key, val string
	err := fields(entry, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			return readString(v, &key, "NodeGetInfo")
		case num == 2 && typ == protowire.BytesType:
			return readString(v, &val, "NodeGetInfo")
		}
		return nil
	})
	if err != nil {
		return err
	}
	if *segments == nil {
		*segments = map[string]string{}
	}
	(*segments)[key] = val
	return nil
}

// readString reads a string field's encoded value into *s; protobuf's
// strings are UTF-8.
func readString(value []byte, s *string, method string) error {
	v, n := protowire.ConsumeString(value)
	if n < 0 {
		return parseError(n)
	}
	if !utf8.ValidString(v) {
		return errors.New(method + "'s answer holds a string that is not UTF-8")
	}
	*s = v
	return nil
}

// call invokes method with an empty request and returns the answer as it
// came, in protobuf's wire format.
func call(ctx context.Context, conn grpc.ClientConnInterface, method string, opts []grpc.CallOption) ([]byte, error) {
	var request, answer []byte
	err := conn.Invoke(ctx, method, &request, &answer, append(opts, grpc.ForceCodec(wire{}))...)
	return answer, err
}

// fields calls each with the number, type and encoded value of every field of
// message, in order, and stops at the first error.
func fields(message []byte, each func(num protowire.Number, typ protowire.Type, value []byte) error) error {
	for len(message) > 0 {
		num, typ, n := protowire.ConsumeTag(message)
		if n < 0 {
			return parseError(n)
		}
		message = message[n:]
		n = protowire.ConsumeFieldValue(num, typ, message)
		if n < 0 {
			return parseError(n)
		}
		if err := each(num, typ, message[:n]); err != nil {
			return err
		}
		message = message[n:]
	}
	return nil
}

func parseError(n int) error {
	if n < 0 {
		return protowire.ParseError(n)
	}
	return nil
}

// wire is a gRPC codec of messages kept in protobuf's wire format, as
// *[]byte. Its name is proto's: the driver reads and writes protobuf.
type wire struct{}

func (wire) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }

func (wire) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = slices.Clone(data)
	return nil
}

func (wire) Name() string { return "proto" }
