package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// Each recipe of deploy/recipes, on a manifest of its chart's node
// DaemonSet: the registrar is this one, is probed for liveness at /healthz
// and for readiness at /readyz, on Linux serves HTTP where Prometheus can
// reach it and the PodMonitor scrapes it. The chart's other containers are
// left as they were. A Windows DaemonSet (testdata/recipes/<chart>-windows)
// is the same chart's recipe applied to the chart's HostProcess DaemonSet:
// its registrar runs the Windows image and is probed on localhost, unscraped.
func TestRecipes(t *testing.T) {
	for _, chart := range []struct {
		name        string
		hostNetwork bool
		windows     bool
	}{
		{"aws-ebs-csi-driver", false, false},
		{"csi-driver-nfs", true, false},
		{"azuredisk-csi-driver", true, false},
		{"azuredisk-csi-driver-windows", true, true},
		{"azurefile-csi-driver", true, false},
		{"csi-driver-smb", true, false},
		{"csi-driver-smb-windows", true, true},
	} {
		t.Run(chart.name, func(t *testing.T) {
			dir := filepath.Join(recipesDir, chart.name)
			objs := render(t, dir)
			ds := onlyDaemonSet(t, objs)
			for _, err := range CheckNodePlugin(ds) {
				t.Errorf("DaemonSet %s: %v", ds.Name, err)
			}
			pm := only[*monitoringv1.PodMonitor](t, objs)
			if !chart.windows {
				for _, err := range CheckPodMonitor(ds, pm) {
					t.Error(err)
				}
			}
			only[*monitoringv1.PrometheusRule](t, objs)

			if ds.Spec.Template.Spec.HostNetwork != chart.hostNetwork {
				t.Errorf("hostNetwork %v, the chart's is %v", ds.Spec.Template.Spec.HostNetwork, chart.hostNetwork)
			}
			reg := registrarContainer(t, ds)
			image := "registry.example.com/csi-node-driver-registrar:"
			if chart.windows {
				image = "registry.example.com/csi-node-driver-registrar-windows:"
			}
			if !strings.HasPrefix(reg.Image, image) {
				t.Errorf("the registrar runs %q, not this registrar's image %s...", reg.Image, image)
			}
			if reg.ReadinessProbe == nil || reg.ReadinessProbe.HTTPGet == nil || reg.ReadinessProbe.HTTPGet.Path != "/readyz" {
				t.Errorf("the registrar's readiness probe %+v: want an HTTP GET of /readyz", reg.ReadinessProbe)
			}
			if reg.LivenessProbe == nil || reg.LivenessProbe.HTTPGet == nil || reg.LivenessProbe.HTTPGet.Path != "/healthz" {
				t.Errorf("the registrar's liveness probe %+v: want an HTTP GET of /healthz", reg.LivenessProbe)
			}
			flags, err := registrarFlags(reg)
			if err != nil {
				t.Fatal(err)
			}
			if chart.windows {
				if flags[httpEndpointFlag] == "" {
					t.Errorf("the registrar has no --%s for its probes", httpEndpointFlag)
				}
			} else {
				checkScrapable(t, reg, flags, chart.hostNetwork)
			}

			// The chart's own containers are untouched.
			data, err := os.ReadFile(filepath.Join(dir, "node.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			obj, err := DecodeStrict(data)
			if err != nil {
				t.Fatal(err)
			}
			chartDS, ok := obj.(*appsv1.DaemonSet)
			if !ok {
				t.Fatalf("%s/node.yaml holds a %T, not a DaemonSet", dir, obj)
			}
			for _, c := range chartDS.Spec.Template.Spec.Containers {
				if c.Name == RegistrarContainer {
					continue
				}
				got := findContainer(&ds.Spec.Template.Spec, c.Name)
				if got == nil || got.Image != c.Image || !slices.Equal(got.Args, c.Args) {
					t.Errorf("the recipe changed the chart's container %q", c.Name)
				}
			}
		})
	}
}

// checkScrapable: a Linux registrar listens where Prometheus can reach it,
// and its probes call that address; on the node's network it gets POD_IP.
func checkScrapable(t *testing.T, reg *corev1.Container, flags map[string]string, hostNetwork bool) {
	t.Helper()
	if host := strings.Split(flags[httpEndpointFlag], ":")[0]; host == "localhost" || host == "127.0.0.1" {
		t.Errorf("--http-endpoint=%s: Prometheus cannot scrape the loopback address", flags[httpEndpointFlag])
	}
	for _, p := range probes(reg) {
		if p.probe.HTTPGet != nil && p.probe.HTTPGet.Host != "" {
			t.Errorf("the registrar's %s probe calls host %q, where it does not listen", p.kind, p.probe.HTTPGet.Host)
		}
	}
	if hostNetwork && !slices.ContainsFunc(reg.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
	}) {
		t.Errorf("the registrar has no POD_IP from status.podIP for --http-endpoint=%s", flags[httpEndpointFlag])
	}
}
