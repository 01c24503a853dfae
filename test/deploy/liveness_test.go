package deploy

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// deploy/ with its driver-liveness component: two containers, the
// registrar serving the driver's liveness on 9808, the driver's liveness
// probe calling it; everything else as in the base.
func TestDriverLivenessOverlay(t *testing.T) {
	base := onlyDaemonSet(t, render(t, deployDir))
	ds := onlyDaemonSet(t, render(t, livenessOverlayDir))
	if n := len(ds.Spec.Template.Spec.Containers); n != 2 {
		t.Errorf("%d containers, want 2: the driver and the registrar", n)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if strings.Contains(c.Image, "livenessprobe") {
			t.Errorf("container %q runs %s: the registrar replaces it", c.Name, c.Image)
		}
	}
	reg := container(t, ds, RegistrarContainer)
	wantArgs := append(slices.Clone(container(t, base, RegistrarContainer).Args), "--driver-health-endpoint=:9808")
	if !slices.Equal(reg.Args, wantArgs) {
		t.Errorf("the registrar's arguments %q, want the base's plus --driver-health-endpoint=:9808: %q", reg.Args, wantArgs)
	}
	driver := container(t, ds, "csi-driver")
	probe := driver.LivenessProbe
	if probe == nil || probe.HTTPGet == nil {
		t.Fatal("the driver container has no HTTP liveness probe")
	}
	if port, err := probePort(driver, probe); err != nil || port != 9808 || probe.HTTPGet.Path != "/healthz" {
		t.Errorf("the driver's liveness probe calls port %d (%v) path %q, want 9808 /healthz", port, err, probe.HTTPGet.Path)
	}
	if base.Spec.Template.Spec.Containers[1].LivenessProbe != nil {
		t.Error("the base already has a liveness probe on the driver: the component shows nothing")
	}
}

// The driver-liveness wiring mistakes are reported.
func TestCheckDriverLivenessFindsMistakes(t *testing.T) {
	overlay := onlyDaemonSet(t, render(t, livenessOverlayDir))
	checkFindsMistakes(t, overlay, []mistake{{
		name: "the driver's probe on another port",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			container(t, ds, "csi-driver").LivenessProbe.HTTPGet.Port = intstr.FromInt32(9807)
		},
		want: "no other container's liveness probe calls it",
	}, {
		name: "no liveness probe on the driver",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			container(t, ds, "csi-driver").LivenessProbe = nil
		},
		want: "kubelet would never restart the driver",
	}, {
		name: "the driver's probe on another path",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			container(t, ds, "csi-driver").LivenessProbe.HTTPGet.Path = "/livez"
		},
		want: `calls "/livez" on --driver-health-endpoint's port 9808`,
	}, {
		name: "not host:port",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			setFlag(container(t, ds, RegistrarContainer), "driver-health-endpoint", "9808")
		},
		want: `--driver-health-endpoint "9808" is not host:port`,
	}})
}
