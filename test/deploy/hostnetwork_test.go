package deploy

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The host-network component puts the pods on the node's network with the
// registrar on localhost, probed there, and keeps the surge of the update.
func TestHostNetworkComponent(t *testing.T) {
	ds := onlyDaemonSet(t, render(t, hostNetworkOverlayDir))
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v, dnsPolicy %q: want true, %s", spec.HostNetwork, spec.DNSPolicy, corev1.DNSClusterFirstWithHostNet)
	}
	reg := registrarContainer(t, ds)
	if !slices.Contains(reg.Args, "--http-endpoint=localhost:19809") {
		t.Errorf("the registrar's args %q: want --http-endpoint=localhost:19809", reg.Args)
	}
	for kind, probe := range map[string]*corev1.Probe{"liveness": reg.LivenessProbe, "readiness": reg.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Host != "localhost" || probe.HTTPGet.Port.IntValue() != 19809 {
			t.Errorf("the registrar's %s probe %+v: want an HTTP GET of localhost:19809", kind, probe)
		}
	}
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 1 {
		t.Errorf("the rolling update %+v: want maxSurge 1 kept", ds.Spec.UpdateStrategy)
	}
}
