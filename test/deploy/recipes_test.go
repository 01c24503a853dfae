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
// DaemonSet: the registrar is this one, is probed for readiness at /readyz,
// serves HTTP where Prometheus can reach it, and the PodMonitor scrapes it.
// The chart's other containers are left as they were.
func TestRecipes(t *testing.T) {
	for _, chart := range []struct {
		name        string
		hostNetwork bool
	}{
		{"aws-ebs-csi-driver", false},
		{"csi-driver-nfs", true},
		{"azuredisk-csi-driver", true},
	} {
		t.Run(chart.name, func(t *testing.T) {
			dir := filepath.Join(recipesDir, chart.name)
			objs := render(t, dir)
			ds := onlyDaemonSet(t, objs)
			for _, err := range CheckNodePlugin(ds) {
				t.Errorf("DaemonSet %s: %v", ds.Name, err)
			}
			for _, err := range CheckPodMonitor(ds, only[*monitoringv1.PodMonitor](t, objs)) {
				t.Error(err)
			}
			only[*monitoringv1.PrometheusRule](t, objs)

			if ds.Spec.Template.Spec.HostNetwork != chart.hostNetwork {
				t.Errorf("hostNetwork %v, the chart's is %v", ds.Spec.Template.Spec.HostNetwork, chart.hostNetwork)
			}
			reg := registrarContainer(t, ds)
			if !strings.HasPrefix(reg.Image, "registry.example.com/csi-node-driver-registrar:") {
				t.Errorf("the registrar runs %q, not this registrar's image", reg.Image)
			}
			if reg.ReadinessProbe == nil || reg.ReadinessProbe.HTTPGet == nil || reg.ReadinessProbe.HTTPGet.Path != "/readyz" {
				t.Errorf("the registrar's readiness probe %+v: want an HTTP GET of /readyz", reg.ReadinessProbe)
			}
			flags, err := registrarFlags(reg)
			if err != nil {
				t.Fatal(err)
			}
			if host := strings.Split(flags[httpEndpointFlag], ":")[0]; host == "localhost" || host == "127.0.0.1" {
				t.Errorf("--http-endpoint=%s: Prometheus cannot scrape the loopback address", flags[httpEndpointFlag])
			}
			for _, p := range probes(reg) {
				if p.probe.HTTPGet != nil && p.probe.HTTPGet.Host != "" {
					t.Errorf("the registrar's %s probe calls host %q, where it does not listen", p.kind, p.probe.HTTPGet.Host)
				}
			}
			if chart.hostNetwork && !slices.ContainsFunc(reg.Env, func(e corev1.EnvVar) bool {
				return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
			}) {
				t.Errorf("the registrar has no POD_IP from status.podIP for --http-endpoint=%s", flags[httpEndpointFlag])
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
