// Package report is what the e2e kubelet tells its readers: one JSON Event a
// line on its standard output for every call kubelet makes into the CSI
// registration handler, each with a snapshot of the API objects the handler
// writes. It also recognises kubelet's log line for a failed registration
// operation. It has no dependency on kubelet's code, so the tests and the
// demo can read a kubelet process without linking kubelet.
package report

import (
	"encoding/json"
	"fmt"
	"regexp"
)

// Kind says which handler call an Event reports.
type Kind string

const (
	// Ready: the plugin manager and the CSI handler are running.
	Ready Kind = "ready"
	// Validate: kubelet called ValidatePlugin.
	Validate Kind = "validate"
	// Register: kubelet called RegisterPlugin.
	Register Kind = "register"
	// Deregister: kubelet called DeRegisterPlugin.
	Deregister Kind = "deregister"
	// NodeReplaced: the e2e kubelet was told to replace its Node (a new
	// UID under the same name) and did, as node repair and the garbage
	// collector would; no kubelet code was called.
	NodeReplaced Kind = "node-replaced"
)

// NodeIDAnnotation is the Node annotation in which kubelet records each
// registered CSI driver's node ID, as a JSON object keyed by driver name.
const NodeIDAnnotation = "csi.volume.kubernetes.io/nodeid"

// Event is one handler call and what kubelet's API objects look like right
// after it returned.
type Event struct {
	Kind     Kind     `json:"kind"`
	Driver   string   `json:"driver,omitempty"`
	Endpoint string   `json:"endpoint,omitempty"`
	Versions []string `json:"versions,omitempty"`
	// Error is the handler's error text; empty if it succeeded.
	Error string `json:"error,omitempty"`
	// Version is k8s.io/kubernetes's version, in the Ready event.
	Version string `json:"version,omitempty"`
	State   State  `json:"state"`
}

// State is what the node's API objects say about CSI drivers.
type State struct {
	// Drivers are the CSINode object's spec.drivers.
	Drivers []Driver `json:"drivers"`
	// NodeIDs is the Node's csi.volume.kubernetes.io/nodeid annotation.
	NodeIDs map[string]string `json:"nodeIDs,omitempty"`
	// NodeUID is the Node's UID, CSINodeOwner the UID of the Node that
	// CSINode's owner reference names: after a Node replacement they differ
	// where kubelet wrote CSINode under the UID it read before.
	NodeUID      string `json:"nodeUID,omitempty"`
	CSINodeOwner string `json:"csiNodeOwner,omitempty"`
	// ReadError is set when the objects could not be read.
	ReadError string `json:"readError,omitempty"`
}

// Driver is one entry of CSINode spec.drivers.
type Driver struct {
	Name   string `json:"name"`
	NodeID string `json:"nodeID"`
}

// Driver returns the CSINode entry for name.
func (s State) Driver(name string) (Driver, bool) {
	for _, d := range s.Drivers {
		if d.Name == name {
			return d, true
		}
	}
	return Driver{}, false
}

// Encode renders e as one line.
func (e Event) Encode() []byte {
	line, err := json.Marshal(e)
	if err != nil {
		// Only strings, slices and maps of strings: cannot fail.
		panic(fmt.Sprintf("encoding report event: %v", err))
	}
	return append(line, '\n')
}

// Decode parses a line written by Encode.
func Decode(line []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(line, &e); err != nil {
		return Event{}, fmt.Errorf("not a kubelet report event: %w", err)
	}
	return e, nil
}

// OperationFailure is kubelet's record of a failed register or unregister
// operation for a socket. kubelet keeps no other trace of it: its
// goroutinemap logs it with klog and backs off before the next attempt.
type OperationFailure struct {
	Socket string
	// Error is the operation's error. For a registration that kubelet
	// rejected it is the reason kubelet sent with NotifyRegistrationStatus;
	// if sending that notification failed too, kubelet appends ": " and the
	// gRPC error of the notification.
	Error string
}

// goroutinemap's message, pkg/util/goroutinemap/exponentialbackoff.
var operationFailedLine = regexp.MustCompile(`Operation for "([^"]*)" failed\. No retries permitted until .* \(durationBeforeRetry [^)]*\)\. Error: (.*)$`)

// ParseOperationFailure recognises kubelet's klog line for a failed
// operation.
func ParseOperationFailure(line string) (OperationFailure, bool) {
	m := operationFailedLine.FindStringSubmatch(line)
	if m == nil {
		return OperationFailure{}, false
	}
	return OperationFailure{Socket: m[1], Error: m[2]}, true
}
