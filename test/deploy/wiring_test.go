package deploy

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func container(t *testing.T, ds *appsv1.DaemonSet, name string) *corev1.Container {
	t.Helper()
	for i := range ds.Spec.Template.Spec.Containers {
		if c := &ds.Spec.Template.Spec.Containers[i]; c.Name == name {
			return c
		}
	}
	t.Fatalf("DaemonSet %s has no container %q", ds.Name, name)
	return nil
}

func volume(t *testing.T, ds *appsv1.DaemonSet, name string) *corev1.Volume {
	t.Helper()
	for i := range ds.Spec.Template.Spec.Volumes {
		if v := &ds.Spec.Template.Spec.Volumes[i]; v.Name == name {
			return v
		}
	}
	t.Fatalf("DaemonSet %s has no volume %q", ds.Name, name)
	return nil
}

func mount(t *testing.T, c *corev1.Container, volumeName string) *corev1.VolumeMount {
	t.Helper()
	for i := range c.VolumeMounts {
		if m := &c.VolumeMounts[i]; m.Name == volumeName {
			return m
		}
	}
	t.Fatalf("container %q does not mount %q", c.Name, volumeName)
	return nil
}

// setFlag replaces the registrar's --name=... argument, or adds it.
func setFlag(c *corev1.Container, name, value string) {
	for i, a := range c.Args {
		if strings.HasPrefix(a, "--"+name+"=") {
			c.Args[i] = "--" + name + "=" + value
			return
		}
	}
	c.Args = append(c.Args, "--"+name+"="+value)
}

func setEnv(c *corev1.Container, name, value string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i].Value = value
		}
	}
}

// mistake is a change to a DaemonSet that CheckNodePlugin reports with an
// error containing want.
type mistake struct {
	name   string
	mutate func(t *testing.T, ds *appsv1.DaemonSet)
	want   string
}

// checkFindsMistakes checks that base has no wiring error, and that each
// mistake, made to a copy of it, is reported.
func checkFindsMistakes(t *testing.T, base *appsv1.DaemonSet, mistakes []mistake) {
	t.Helper()
	if errs := CheckNodePlugin(base); len(errs) != 0 {
		t.Fatalf("DaemonSet %s has wiring errors: %v", base.Name, errs)
	}
	for _, tc := range mistakes {
		t.Run(tc.name, func(t *testing.T) {
			ds := base.DeepCopy()
			tc.mutate(t, ds)
			errs := CheckNodePlugin(ds)
			for _, err := range errs {
				if strings.Contains(err.Error(), tc.want) {
					return
				}
			}
			t.Errorf("no error contains %q; got %v", tc.want, errs)
		})
	}
}

// Each mistake an operator can make in the manifest is reported: the checks
// that pass on deploy/ are able to fail.
func TestCheckNodePluginFindsMistakes(t *testing.T) {
	base := onlyDaemonSet(t, render(t, deployDir))
	checkFindsMistakes(t, base, []mistake{{
		name: "mount of a volume that does not exist",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			mount(t, container(t, ds, RegistrarContainer), "registration-dir").Name = "registraton-dir"
		},
		want: `mounts volume "registraton-dir", which the pod does not define`,
	}, {
		name: "volume defined twice",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			spec := &ds.Spec.Template.Spec
			spec.Volumes = append(spec.Volumes, *volume(t, ds, "socket-dir"))
		},
		want: `volume "socket-dir" is defined twice`,
	}, {
		name: "probe on a port name that does not exist",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			container(t, ds, RegistrarContainer).LivenessProbe.HTTPGet.Port = intstr.FromString("health")
		},
		want: `port "health" is not a named port`,
	}, {
		name: "socket directory renamed without the registration path",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			volume(t, ds, "socket-dir").HostPath.Path = "/var/lib/kubelet/plugins/other.csi.example.com"
		},
		want: "kubelet would dial the wrong socket",
	}, {
		name: "registration path renamed without the socket directory",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			setEnv(container(t, ds, RegistrarContainer), "DRIVER_REG_SOCK_PATH", "/var/lib/kubelet/plugins/other.csi.example.com/csi.sock")
		},
		want: "kubelet would dial the wrong socket",
	}, {
		name: "registration path names another socket",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			setFlag(container(t, ds, RegistrarContainer), "csi-address", "/csi/driver.sock")
		},
		want: "kubelet would dial the wrong socket",
	}, {
		name: "registration path from an undefined variable",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			container(t, ds, RegistrarContainer).Env[0].Name = "DRIVER_REG_SOCKET_PATH"
		},
		want: "refers to a variable",
	}, {
		name: "no registration path",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			c := container(t, ds, RegistrarContainer)
			var args []string
			for _, a := range c.Args {
				if !strings.HasPrefix(a, "--kubelet-registration-path") {
					args = append(args, a)
				}
			}
			c.Args = args
		},
		want: "--kubelet-registration-path is not set",
	}, {
		name: "driver address outside the mounts",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			setFlag(container(t, ds, RegistrarContainer), "csi-address", "unix:///run/csi/socket")
		},
		want: "is under none of the registrar's volume mounts",
	}, {
		name: "socket directory not shared with the driver",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			mount(t, container(t, ds, "csi-driver"), "socket-dir").Name = "dev-dir"
		},
		want: `no other container mounts volume "socket-dir"`,
	}, {
		name: "socket directory outside kubelet's plugins directory",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			volume(t, ds, "socket-dir").HostPath.Path = "/run/my-driver"
			setEnv(container(t, ds, RegistrarContainer), "DRIVER_REG_SOCK_PATH", "/run/my-driver/csi.sock")
		},
		want: "the convention is /var/lib/kubelet/plugins/<driver name>",
	}, {
		name: "registration directory is not kubelet's plugin registry",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			volume(t, ds, "registration-dir").HostPath.Path = "/var/lib/kubelet/plugins"
		},
		want: "is not the host's /var/lib/kubelet/plugins_registry",
	}, {
		name: "registration directory mounted elsewhere than the flag says",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			mount(t, container(t, ds, RegistrarContainer), "registration-dir").MountPath = "/plugins_registry"
		},
		want: `--plugin-registration-path "/registration" is under none`,
	}, {
		name: "registration directory read-only",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			mount(t, container(t, ds, RegistrarContainer), "registration-dir").ReadOnly = true
		},
		want: "mounted read-only",
	}, {
		name: "command that is not in the image",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			container(t, ds, RegistrarContainer).Command = []string{"/usr/bin/csi-node-driver-registrar"}
		},
		want: "its image holds only /csi-node-driver-registrar",
	}, {
		name: "exec probe that is not in the image",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			c := container(t, ds, RegistrarContainer)
			c.LivenessProbe.HTTPGet = nil
			c.LivenessProbe.Exec = &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "true"}}
		},
		want: "its image holds only /csi-node-driver-registrar",
	}, {
		name: "HTTP endpoint on an undeclared port",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			setFlag(container(t, ds, RegistrarContainer), "http-endpoint", ":9808")
		},
		want: "listens on port 9808 (--http-endpoint), which is not among its container ports",
	}, {
		name: "probes without an HTTP endpoint",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			setFlag(container(t, ds, RegistrarContainer), "http-endpoint", "")
		},
		want: "--http-endpoint is not set: nothing listens there",
	}, {
		name: "readiness on the liveness path",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			container(t, ds, RegistrarContainer).ReadinessProbe.HTTPGet.Path = "/healthz"
		},
		want: "the registrar serves /readyz for it",
	}, {
		name: "no registrar container",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			container(t, ds, RegistrarContainer).Name = "registrar"
		},
		want: `no container named "node-driver-registrar"`,
	}, {
		name: "selector that does not match the pods",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			ds.Spec.Template.Labels = map[string]string{"app": "other"}
		},
		want: "does not match its pod template's labels",
	}, {
		name: "surge with host network",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.HostNetwork = true
		},
		want: "need the same host ports",
	}, {
		name: "update that cannot proceed",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			zero := intstr.FromInt32(0)
			ds.Spec.UpdateStrategy.RollingUpdate.MaxSurge = &zero
		},
		want: "maxSurge and maxUnavailable both 0",
	}, {
		name: "request above the limit",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			container(t, ds, RegistrarContainer).Resources.Requests[corev1.ResourceMemory] = resource.MustParse("1Gi")
		},
		want: "more than its limit",
	}})
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    map[string]string
		wantErr bool
	}{
		{args: []string{"--csi-address=/csi/csi.sock", "-v=5"}, want: map[string]string{"csi-address": "/csi/csi.sock", "v": "5"}},
		{args: []string{"--csi-address", "/csi/csi.sock", "--enable-pprof", "--timeout", "2s"}, want: map[string]string{"csi-address": "/csi/csi.sock", "enable-pprof": "true", "timeout": "2s"}},
		{args: []string{"--v=2", "stray", "--csi-address=/x"}, want: map[string]string{"v": "2"}},
		{args: []string{"--v=2", "--", "--csi-address=/x"}, want: map[string]string{"v": "2"}},
		{args: []string{"--csi-address"}, wantErr: true},
		{args: []string{"---v=1"}, wantErr: true},
		{args: []string{"--v=1", "--v=2"}, wantErr: true},
	} {
		got, err := parseFlags(tc.args)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseFlags(%q): error %v, want an error: %v", tc.args, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseFlags(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestExpand(t *testing.T) {
	env := []corev1.EnvVar{
		{Name: "DIR", Value: "/var/lib/kubelet/plugins/d"},
		{Name: "SOCK", Value: "$(DIR)/csi.sock"},
		{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
	}
	for in, want := range map[string]string{
		"--path=$(SOCK)":  "--path=/var/lib/kubelet/plugins/d/csi.sock",
		"--node=$(NODE)":  "--node=$(NODE)",
		"--x=$(MISSING)":  "--x=$(MISSING)",
		"--x=$$(DIR)":     "--x=$(DIR)",
		"--x=$(DIR":       "--x=$(DIR",
		"--price=5$":      "--price=5$",
		"--x=$DIR/$(DIR)": "--x=$DIR//var/lib/kubelet/plugins/d",
	} {
		if got := expandAll([]string{in}, env)[0]; got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

// The Windows base's HostProcess wiring is checked as such, and each
// mistake in it is reported.
func TestCheckNodePluginFindsHostProcessMistakes(t *testing.T) {
	base := onlyDaemonSet(t, render(t, windowsDir))
	if !isHostProcess(&base.Spec.Template.Spec) {
		t.Fatalf("%s is not a HostProcess pod: its checks would be Linux's", windowsDir)
	}
	const other = `C:\var\lib\kubelet\plugins\other.csi.example.com\csi.sock`
	checkFindsMistakes(t, base, []mistake{{
		name: "the image's entrypoint",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			container(t, ds, RegistrarContainer).Command = nil
		},
		want: "in a HostProcess pod it must be [csi-node-driver-registrar.exe]",
	}, {
		name: "a Linux path",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			setFlag(container(t, ds, RegistrarContainer), "csi-address", "/csi/csi.sock")
		},
		want: "not an absolute Windows path",
	}, {
		name: "registration path renamed without the socket",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			setFlag(container(t, ds, RegistrarContainer), "kubelet-registration-path", other)
		},
		want: "kubelet would dial the wrong socket",
	}, {
		name: "socket renamed without the driver's",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			setEnv(container(t, ds, RegistrarContainer), "DRIVER_REG_SOCK_PATH", other)
		},
		want: "the driver would not listen where the registrar looks",
	}, {
		name: "socket outside kubelet's plugins directory",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			setEnv(container(t, ds, RegistrarContainer), "DRIVER_REG_SOCK_PATH", `C:\csi\csi.sock`)
			setEnv(container(t, ds, "csi-driver"), "CSI_SOCKET", `C:\csi\csi.sock`)
		},
		want: `the convention is C:\var\lib\kubelet\plugins\<driver name>\csi.sock`,
	}, {
		name: "the default registry, a container's path",
		mutate: func(t *testing.T, ds *appsv1.DaemonSet) {
			reg := container(t, ds, RegistrarContainer)
			reg.Args = slices.DeleteFunc(reg.Args, func(a string) bool { return strings.HasPrefix(a, "--plugin-registration-path=") })
		},
		want: "kubelet would never see the registration socket",
	}})
}
