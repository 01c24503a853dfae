package deploy

import (
	"fmt"
	"testing"
)

// ptrValue prints a pointer's value, or nil.
func ptrValue[T any](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// The base gives the pods no service-account token (nothing in it talks to
// the API server) and the priority of a node's own services; every
// component and overlay keeps the priority, and only deploy/node-gate,
// deploy/csinode and deploy/events mount the token. The Windows base does the same.
func TestBaseDefaults(t *testing.T) {
	for _, dir := range []string{deployDir, overlayDir, livenessOverlayDir, nodeGateOverlayDir, csiNodeOverlayDir, nodeGateCSINodeOverlayDir, eventsOverlayDir, nodeGateCSINodeEventsOverlayDir, monitoringOverlayDir, hostNetworkOverlayDir, windowsDir} {
		t.Run(dir, func(t *testing.T) {
			spec := onlyDaemonSet(t, render(t, dir)).Spec.Template.Spec
			if spec.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName %q, want system-node-critical", spec.PriorityClassName)
			}
			wantToken := dir == nodeGateOverlayDir || dir == csiNodeOverlayDir || dir == nodeGateCSINodeOverlayDir || dir == eventsOverlayDir || dir == nodeGateCSINodeEventsOverlayDir
			if got := spec.AutomountServiceAccountToken; got == nil || *got != wantToken {
				t.Errorf("automountServiceAccountToken %s, want %v", ptrValue(got), wantToken)
			}
		})
	}
}
