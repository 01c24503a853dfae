package localnode

// deploy/daemonset.yaml on this node: adapted, created or updated until
// its pod is Ready and its driver in CSINode, and removed.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

const (
	Namespace       = "csi-e2e"
	DriverName      = "my-driver.csi.example.com" // deploy/'s placeholder name
	ExpectedNodeID  = "csi-" + NodeName
	RegistrarImage  = "localhost/csi-node-driver-registrar:e2e-node"
	UpstreamImage   = "localhost/e2e-node/upstream-registrar:1" // upstream's binary, FROM scratch
	DriverImage     = "localhost/e2e-node/mockdriver:1"
	RegistrarName   = "node-driver-registrar"
	DriverContainer = "csi-driver"
	RevisionKey     = "e2e-node/revision"
	// DriverSocket is deploy/'s driver socket, which every revision of the
	// test driver shares: it replaces the old socket atomically and removes
	// it on exit only if it is still its own, as deploy/README.md asks.
	DriverSocket = "csi.sock"

	HostpathDriver    = "hostpath.csi.k8s.io"
	HostpathImage     = "localhost/e2e-node/hostpathplugin:1" // with busybox's mount and umount
	HostpathDaemonSet = "hostpath-node"
	HostpathContainer = "hostpath"
	HostpathStateDir  = "hostpath-state" // the driver's --statedir, on the host under the scratch directory
)

var getOpts = metav1.GetOptions{}

// Template is what differs between the DaemonSet's templates. hostNetwork
// (there is no CNI for the checks) puts both pods of a maxSurge update in
// one network namespace, so each template has its own HTTP port unless it
// is meant to share one.
type Template struct {
	Revision int   // the pods' RevisionKey annotation
	Port     int32 // the registrar's HTTP port
	Upstream bool  // upstream's registrar, with its flags only
}

// upstreamFlags are the flags upstream's registrar (v2.17) accepts; it exits
// on any other.
var upstreamFlags = map[string]bool{
	"automaxprocs": true, "connection-timeout": true, "csi-address": true, "enable-pprof": true,
	"health-port": true, "http-endpoint": true, "kubelet-registration-path": true,
	"log-flush-frequency": true, "log-json-info-buffer-size": true, "log-json-split-stream": true,
	"log-text-info-buffer-size": true, "log-text-split-stream": true, "logging-format": true,
	"mode": true, "plugin-registration-path": true, "timeout": true, "v": true, "version": true, "vmodule": true,
}

// upstreamArgs drops the flags only this registrar knows, as a manifest
// rolled back to upstream's image would have to.
func upstreamArgs(args []string) ([]string, error) {
	var kept []string
	for _, arg := range args {
		if !strings.HasPrefix(arg, "-") {
			// The value of a flag written as two arguments: which flag's?
			return nil, fmt.Errorf("deploy/daemonset.yaml: the registrar's argument %q is not a flag; write flags as --name=value, or adapt test/node", arg)
		}
		name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if upstreamFlags[name] {
			kept = append(kept, arg)
		}
	}
	return kept, nil
}

// DaemonSet is deploy/daemonset.yaml adapted to this node and to t; the
// registrar's probes, security context and resources are kept.
func (c *Node) DaemonSet(t Template) (*appsv1.DaemonSet, error) {
	const file = "deploy/daemonset.yaml"
	data, err := os.ReadFile(filepath.Join(c.Repo, file))
	if err != nil {
		return nil, err
	}
	ds := &appsv1.DaemonSet{}
	if err := yaml.UnmarshalStrict(data, ds); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	ds.Namespace = Namespace
	metav1.SetMetaDataAnnotation(&ds.Spec.Template.ObjectMeta, RevisionKey, fmt.Sprint(t.Revision))
	pod := &ds.Spec.Template.Spec
	pod.HostNetwork = true
	pod.DNSPolicy = corev1.DNSDefault
	pod.AutomountServiceAccountToken = new(bool)
	kubeletDir := c.Path("kubelet")
	driverDir := filepath.Join(kubeletDir, "plugins", DriverName)
	for i := range pod.Volumes {
		if hp := pod.Volumes[i].HostPath; hp == nil {
			continue
		} else if pod.Volumes[i].Name == "socket-dir" {
			hp.Path = driverDir
		} else if rest, ok := strings.CutPrefix(hp.Path, "/var/lib/kubelet"); ok {
			hp.Path = kubeletDir + rest
		}
	}
	reg, drv := Container(pod, RegistrarName), Container(pod, DriverContainer)
	switch {
	case reg == nil || drv == nil:
		return nil, fmt.Errorf("%s: want containers %q and %q", file, RegistrarName, DriverContainer)
	case !slices.Contains(reg.Args, "--csi-address=/csi/"+DriverSocket):
		return nil, fmt.Errorf("%s: the registrar's arguments no longer contain --csi-address=/csi/%s; adapt test/node", file, DriverSocket)
	case len(reg.Ports) != 1 || reg.Ports[0].Name != "healthz":
		return nil, fmt.Errorf("%s: the registrar container should have one port, healthz", file)
	case reg.LivenessProbe == nil || reg.ReadinessProbe == nil:
		return nil, fmt.Errorf("%s: the registrar container has lost its liveness or readiness probe", file)
	}
	for i := range pod.Containers {
		pod.Containers[i].ImagePullPolicy = corev1.PullNever
	}
	drv.Image = DriverImage
	drv.Args = []string{"--endpoint=/csi/" + DriverSocket, "--name=" + DriverName, "--node-id=csi-$(KUBE_NODE_NAME)"}
	reg.Image = RegistrarImage
	if err := replaceArg(reg.Args, "--http-endpoint=:9809", fmt.Sprintf("--http-endpoint=:%d", t.Port)); err != nil {
		return nil, err
	}
	setEnv(reg, "DRIVER_REG_SOCK_PATH", filepath.Join(driverDir, DriverSocket))
	reg.Ports[0].ContainerPort, reg.Ports[0].HostPort = t.Port, t.Port
	// Old manifests' liveness probe, here as a startup probe so the HTTP
	// liveness probe stays: kubelet runs it with a runtime exec. Without
	// --kubelet-registration-path it exits 1, in both registrars;
	// upstream's manifests pass it.
	reg.StartupProbe = &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
			Command: []string{"/csi-node-driver-registrar", "--mode=kubelet-registration-probe", "--kubelet-registration-path=" + filepath.Join(driverDir, DriverSocket)},
		}},
		PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 30,
	}
	if t.Upstream {
		reg.Image = UpstreamImage
		if reg.Args, err = upstreamArgs(reg.Args); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		// Upstream serves /healthz only: 200 once a socket at the path
		// answers GetInfo for the driver. As readiness it holds the old
		// pod until upstream has bound its socket.
		if reg.ReadinessProbe.HTTPGet == nil {
			return nil, fmt.Errorf("%s: the registrar's readiness probe is no longer httpGet; adapt test/node", file)
		}
		reg.ReadinessProbe.HTTPGet.Path = "/healthz"
	}
	return ds, nil
}

func Container(pod *corev1.PodSpec, name string) *corev1.Container {
	for i := range pod.Containers {
		if pod.Containers[i].Name == name {
			return &pod.Containers[i]
		}
	}
	return nil
}

func setEnv(ctr *corev1.Container, name, value string) {
	for i := range ctr.Env {
		if ctr.Env[i].Name == name {
			ctr.Env[i].Value = value
		}
	}
}

func replaceArg(args []string, old, replacement string) error {
	i := slices.Index(args, old)
	if i < 0 {
		return fmt.Errorf("deploy/daemonset.yaml: the registrar's arguments no longer contain %q; adapt test/node", old)
	}
	args[i] = replacement
	return nil
}

// Deploy creates ds or updates its template, until its one pod, of ds's
// revision, is Ready and watch sees the driver in CSINode.
func (c *Node) Deploy(ctx context.Context, ds *appsv1.DaemonSet, watch *Watch) (*corev1.Pod, time.Duration, error) {
	began := time.Now()
	rev := ds.Spec.Template.Annotations[RevisionKey]
	current, err := c.Client.AppsV1().DaemonSets(Namespace).Get(ctx, ds.Name, getOpts)
	switch {
	case apierrors.IsNotFound(err):
		if _, err := c.Client.AppsV1().DaemonSets(Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
			return nil, 0, fmt.Errorf("create DaemonSet %s: %w", ds.Name, err)
		}
	case err != nil:
		return nil, 0, err
	case current.Spec.Template.Annotations[RevisionKey] != rev:
		if _, err := c.SetTemplate(ctx, ds.Name, ds.Spec.Template); err != nil {
			return nil, 0, fmt.Errorf("update DaemonSet %s: %w", ds.Name, err)
		}
	}
	var pod *corev1.Pod
	err = WaitFor(ctx, fmt.Sprintf("one %s pod, of revision %s, Ready, %s in CSINode", ds.Name, rev, watch.Driver), 4*time.Minute, 50*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		pods, err := c.PodsOf(ctx, ds.Name)
		reg, _ := watch.Now()
		if err != nil || len(pods) != 1 || pods[0].Annotations[RevisionKey] != rev || !PodReady(&pods[0]) || !reg.Registered {
			return false, err
		}
		pod = &pods[0]
		return true, nil
	})
	return pod, time.Since(began), err
}

// SetTemplate retries on a conflict with the DaemonSet controller's status
// writes.
func (c *Node) SetTemplate(ctx context.Context, name string, tmpl corev1.PodTemplateSpec) (*appsv1.DaemonSet, error) {
	var updated *appsv1.DaemonSet
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := c.Client.AppsV1().DaemonSets(Namespace).Get(ctx, name, getOpts)
		if err != nil {
			return err
		}
		ds.Spec.Template = tmpl
		updated, err = c.Client.AppsV1().DaemonSets(Namespace).Update(ctx, ds, metav1.UpdateOptions{})
		return err
	})
	return updated, err
}

// Own is how a DaemonSet of its own differs from deploy/'s csi-node.
type Own struct {
	Name       string   // the DaemonSet's, and its pods' app label
	Driver     string   // the test driver's name and socket directory
	Hostpath   bool     // hostpathplugin in the test driver's place (its name and directory)
	Socket     string   // the driver's socket file name, if not DriverSocket
	RegSocket  string   // the registration path's file name, if not Socket
	KeepProbes bool     // deploy/'s probes as they are: no startup probe
	Args       []string // the registrar's flags beyond deploy/'s
	DriverArgs []string // the test driver's flags beyond the usual
}

func (c *Node) OwnDaemonSet(t Template, o Own) (*appsv1.DaemonSet, error) {
	ds, err := c.DaemonSet(t)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{"app.kubernetes.io/name": o.Name}
	ds.Name, ds.Labels, ds.Spec.Template.Labels = o.Name, labels, labels
	ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	pod := &ds.Spec.Template.Spec
	reg, drv := Container(pod, RegistrarName), Container(pod, DriverContainer)
	if o.Socket == "" {
		o.Socket = DriverSocket
	}
	if o.Hostpath {
		o.Driver = HostpathDriver
		if err := c.withHostpath(pod, reg, drv, o.Socket); err != nil {
			return nil, err
		}
	}
	socketDir := c.Path("kubelet", "plugins", o.Driver)
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == "socket-dir" {
			pod.Volumes[i].HostPath.Path = socketDir
		}
	}
	if o.RegSocket == "" {
		o.RegSocket = o.Socket
	}
	setEnv(reg, "DRIVER_REG_SOCK_PATH", filepath.Join(socketDir, o.RegSocket))
	for i, arg := range drv.Args {
		if strings.HasPrefix(arg, "--name=") {
			drv.Args[i] = "--name=" + o.Driver
		}
	}
	if o.KeepProbes {
		reg.StartupProbe = nil
	}
	reg.Args = append(reg.Args, o.Args...)
	drv.Args = append(drv.Args, o.DriverArgs...)
	return ds, nil
}

// withHostpath puts hostpathplugin in the test driver's place: kubelet
// gives the driver host paths, and the checks read its state on the host.
func (c *Node) withHostpath(pod *corev1.PodSpec, reg, drv *corev1.Container, socket string) error {
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "state-dir", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: c.Path(HostpathStateDir), Type: &dirOrCreate},
	}})
	if err := replaceArg(reg.Args, "--csi-address=/csi/"+DriverSocket, "--csi-address=/csi/"+socket); err != nil {
		return err
	}
	drv.Name, drv.Image = HostpathContainer, HostpathImage
	drv.Args = []string{
		"--drivername=" + HostpathDriver,
		"--endpoint=unix:///csi/" + socket,
		"--nodeid=$(KUBE_NODE_NAME)",
		"--statedir=/csi-data-dir",
		"--v=4", // logs each gRPC call
	}
	for j := range drv.VolumeMounts {
		if rest, ok := strings.CutPrefix(drv.VolumeMounts[j].MountPath, "/var/lib/kubelet"); ok {
			drv.VolumeMounts[j].MountPath = c.Path("kubelet") + rest
		}
	}
	drv.VolumeMounts = append(drv.VolumeMounts, corev1.VolumeMount{Name: "state-dir", MountPath: "/csi-data-dir"})
	return nil
}

func HostpathCSIDriver() *storagev1.CSIDriver {
	attach, podInfo := false, true
	return &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: HostpathDriver},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       &attach,
			PodInfoOnMount:       &podInfo,
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral},
		},
	}
}

// RemoveDaemonSet deletes a DaemonSet until its pods are gone and CSINode
// no longer lists its driver.
func (c *Node) RemoveDaemonSet(ctx context.Context, dsName, driver string) error {
	background := metav1.DeletePropagationBackground
	err := c.Client.AppsV1().DaemonSets(Namespace).Delete(ctx, dsName, metav1.DeleteOptions{PropagationPolicy: &background})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete DaemonSet %s: %w", dsName, err)
	}
	return WaitFor(ctx, dsName+"'s pods gone and "+driver+" out of CSINode", 3*time.Minute, 200*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		pods, err := c.PodsOf(ctx, dsName)
		if err != nil || len(pods) > 0 {
			return false, err
		}
		node, err := c.Client.StorageV1().CSINodes().Get(ctx, NodeName, getOpts)
		if apierrors.IsNotFound(err) {
			return true, nil // none lists no driver (check 13 deletes it)
		}
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(node.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driver }), nil
	})
}

func (c *Node) PodsOf(ctx context.Context, app string) ([]corev1.Pod, error) {
	list, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + app})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
