package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

const (
	namespace       = "csi-e2e"
	driverName      = "my-driver.csi.example.com" // deploy/'s placeholder name
	expectedNodeID  = "csi-" + nodeName
	registrarImage  = "localhost/csi-node-driver-registrar:e2e-node"
	upstreamImage   = "localhost/e2e-node/upstream-registrar:1" // upstream's binary, FROM scratch
	driverImage     = "localhost/e2e-node/mockdriver:1"
	registrarName   = "node-driver-registrar"
	driverContainer = "csi-driver"
	revisionKey     = "e2e-node/revision"
	// driverSocket is deploy/'s driver socket, which every revision of the
	// test driver shares: it replaces the old socket atomically and removes
	// it on exit only if it is still its own, as deploy/README.md asks.
	driverSocket = "csi.sock"
)

// revision is what differs between the DaemonSet's templates. hostNetwork
// (there is no CNI here) puts both pods of a maxSurge update in one network
// namespace, so each revision has its own HTTP port, except check 4d's.
type revision int

// The revisions of check 4d: this registrar on one HTTP port, before and
// after a rolling update.
const (
	revSharedPort     revision = 6
	revSharedPortNext revision = 7
)

// sharesPort reports whether the revision listens on the port that check
// 4d's two revisions share.
func (r revision) sharesPort() bool { return r == revSharedPort || r == revSharedPortNext }

func (r revision) port() int32 {
	if r.sharesPort() {
		return 9820
	}
	return 9808 + int32(r)
}

// The revisions of checks 4b and 4c: a new DaemonSet of this registrar
// (check 3 deleted the first), rolled to upstream's image and back.
const (
	revOurs      revision = 3
	revUpstream  revision = 4
	revOursAgain revision = 5
)

// upstream reports whether the revision runs upstream's registrar.
func (r revision) upstream() bool {
	return r == revUpstream || r == revStorageUpstream || r == revConfirmUpstream
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

// upstreamArgs returns the registrar's arguments less the flags that only
// this registrar knows (--termination-message-path, --rejection-policy,
// klog's old flags, ...), as a manifest rolled back to upstream's image
// would have to drop them.
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

// daemonSet is deploy/daemonset.yaml adapted to this node and to rev; the
// registrar's probes, security context and resources are kept as they are.
func (s *suite) daemonSet(rev revision) (*appsv1.DaemonSet, error) {
	const file = "deploy/daemonset.yaml"
	data, err := os.ReadFile(filepath.Join(s.repo, file))
	if err != nil {
		return nil, err
	}
	ds := &appsv1.DaemonSet{}
	if err := yaml.UnmarshalStrict(data, ds); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	ds.Namespace = namespace
	metav1.SetMetaDataAnnotation(&ds.Spec.Template.ObjectMeta, revisionKey, fmt.Sprint(int(rev)))
	pod := &ds.Spec.Template.Spec
	pod.HostNetwork = true
	pod.DNSPolicy = corev1.DNSDefault
	pod.AutomountServiceAccountToken = new(bool)
	kubeletDir := s.path("kubelet")
	driverDir := filepath.Join(kubeletDir, "plugins", driverName)
	for i := range pod.Volumes {
		if hp := pod.Volumes[i].HostPath; hp == nil {
			continue
		} else if pod.Volumes[i].Name == "socket-dir" {
			hp.Path = driverDir
		} else if rest, ok := strings.CutPrefix(hp.Path, "/var/lib/kubelet"); ok {
			hp.Path = kubeletDir + rest
		}
	}
	reg, drv := container(pod, registrarName), container(pod, driverContainer)
	switch {
	case reg == nil || drv == nil:
		return nil, fmt.Errorf("%s: want containers %q and %q", file, registrarName, driverContainer)
	case !slices.Contains(reg.Args, "--csi-address=/csi/"+driverSocket):
		return nil, fmt.Errorf("%s: the registrar's arguments no longer contain --csi-address=/csi/%s; adapt test/node", file, driverSocket)
	case len(reg.Ports) != 1 || reg.Ports[0].Name != "healthz":
		return nil, fmt.Errorf("%s: the registrar container should have one port, healthz", file)
	case reg.LivenessProbe == nil || reg.ReadinessProbe == nil:
		return nil, fmt.Errorf("%s: the registrar container has lost its liveness or readiness probe", file)
	}
	for i := range pod.Containers {
		pod.Containers[i].ImagePullPolicy = corev1.PullNever
	}
	drv.Image = driverImage
	drv.Args = []string{"--endpoint=/csi/" + driverSocket, "--name=" + driverName, "--node-id=csi-$(KUBE_NODE_NAME)"}
	reg.Image = registrarImage
	if err := replaceArg(reg.Args, "--http-endpoint=:9809", fmt.Sprintf("--http-endpoint=:%d", rev.port())); err != nil {
		return nil, err
	}
	setEnv(reg, "DRIVER_REG_SOCK_PATH", filepath.Join(driverDir, driverSocket))
	reg.Ports[0].ContainerPort, reg.Ports[0].HostPort = rev.port(), rev.port()
	// Old manifests' liveness probe, here as a startup probe so the HTTP
	// liveness probe stays: kubelet runs it with a runtime exec. Without
	// --kubelet-registration-path it exits 1, in both registrars;
	// upstream's manifests pass it.
	reg.StartupProbe = &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
			Command: []string{"/csi-node-driver-registrar", "--mode=kubelet-registration-probe", "--kubelet-registration-path=" + filepath.Join(driverDir, driverSocket)},
		}},
		PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 30,
	}
	if err := s.withRevision(ds, reg, rev); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if rev == revDriverLiveness {
		return ds, withDriverLiveness(s.repo, ds)
	}
	return ds, nil
}

// withRevision adapts the registrar container reg of ds to the checks'
// revisions that differ from the others: check 4d's shared port, check
// 9's node gate, upstream's image.
func (s *suite) withRevision(ds *appsv1.DaemonSet, reg *corev1.Container, rev revision) error {
	var err error
	if rev.sharesPort() {
		if err := dropHostPort(reg, rev.port()); err != nil {
			return err
		}
	}
	if rev == revNodeGate {
		withAccount(&ds.Spec.Template.Spec, reg)
		reg.Args = append(reg.Args, "--remove-node-taint="+startupTaint, "--node-condition")
	}
	if rev.upstream() {
		reg.Image = upstreamImage
		if reg.Args, err = upstreamArgs(reg.Args); err != nil {
			return err
		}
		// Upstream serves /healthz only: 200 once a socket at the path
		// answers GetInfo for the driver. As readiness it holds the old
		// pod until upstream has bound its socket.
		if reg.ReadinessProbe.HTTPGet == nil {
			return fmt.Errorf("the registrar's readiness probe is no longer httpGet; adapt test/node")
		}
		reg.ReadinessProbe.HTTPGet.Path = "/healthz"
	}
	return nil
}

// container returns the pod's container name, or nil.
func container(pod *corev1.PodSpec, name string) *corev1.Container {
	for i := range pod.Containers {
		if pod.Containers[i].Name == name {
			return &pod.Containers[i]
		}
	}
	return nil
}

// setEnv sets the container's variable name, which it must have.
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

// dropHostPort removes the container's port declaration and points its
// HTTP probes at the port by number. With hostNetwork a declared port is a
// host port, and the scheduler does not place a pod whose host port another
// pod on the node declares: the new pod of a maxSurge update would stay
// Pending.
func dropHostPort(ctr *corev1.Container, port int32) error {
	ctr.Ports = nil
	for _, probe := range []*corev1.Probe{ctr.LivenessProbe, ctr.ReadinessProbe} {
		if probe.HTTPGet == nil {
			return fmt.Errorf("the registrar's liveness and readiness probes are no longer httpGet; adapt test/node")
		}
		probe.HTTPGet.Port = intstr.FromInt32(port)
	}
	return nil
}

// deploy creates ds or updates its template, and waits until its one pod,
// of ds's revision, is Ready and watch sees the driver in CSINode.
func (s *suite) deploy(ctx context.Context, ds *appsv1.DaemonSet, watch *csiNodeWatch) (*corev1.Pod, time.Duration, error) {
	began := time.Now()
	rev := ds.Spec.Template.Annotations[revisionKey]
	current, err := s.client.AppsV1().DaemonSets(namespace).Get(ctx, ds.Name, getOpts)
	switch {
	case apierrors.IsNotFound(err):
		if _, err := s.client.AppsV1().DaemonSets(namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
			return nil, 0, fmt.Errorf("create DaemonSet %s: %w", ds.Name, err)
		}
	case err != nil:
		return nil, 0, err
	case current.Spec.Template.Annotations[revisionKey] != rev:
		if _, err := s.setTemplate(ctx, ds.Name, ds.Spec.Template); err != nil {
			return nil, 0, fmt.Errorf("update DaemonSet %s: %w", ds.Name, err)
		}
	}
	var pod *corev1.Pod
	err = waitFor(ctx, fmt.Sprintf("one %s pod, of revision %s, Ready, %s in CSINode", ds.Name, rev, watch.driver), 4*time.Minute, 50*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		pods, err := s.podsOf(ctx, ds.Name)
		reg, _ := watch.now()
		if err != nil || len(pods) != 1 || pods[0].Annotations[revisionKey] != rev || !podReady(&pods[0]) || !reg.registered {
			return false, err
		}
		pod = &pods[0]
		return true, nil
	})
	return pod, time.Since(began), err
}

// setTemplate gives the DaemonSet name the pod template tmpl, again on a
// conflict with the DaemonSet controller's status writes.
func (s *suite) setTemplate(ctx context.Context, name string, tmpl corev1.PodTemplateSpec) (*appsv1.DaemonSet, error) {
	var updated *appsv1.DaemonSet
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := s.client.AppsV1().DaemonSets(namespace).Get(ctx, name, getOpts)
		if err != nil {
			return err
		}
		ds.Spec.Template = tmpl
		updated, err = s.client.AppsV1().DaemonSets(namespace).Update(ctx, ds, metav1.UpdateOptions{})
		return err
	})
	return updated, err
}

// own is how a check's DaemonSet differs from deploy/'s csi-node.
type own struct {
	name     string // the DaemonSet's, and its pods' app label
	driver   string // the test driver's name and socket directory
	hostpath bool   // hostpathplugin in the test driver's place (its name and directory)
	// regSocket is the registration path's file name, if not the driver's socket.
	regSocket string
	// keepProbes leaves deploy/'s probes as they are: no startup probe.
	keepProbes bool
	args       []string // the registrar's flags beyond deploy/'s
	driverArgs []string // the test driver's flags beyond the usual
	account    bool     // deploy/csinode's service account with its token
	events     bool     // deploy/events' flag and variables, with account
}

// ownDaemonSet is deploy/daemonset.yaml adapted as for the test driver
// (daemonSet), then as o says.
func (s *suite) ownDaemonSet(rev revision, o own) (*appsv1.DaemonSet, error) {
	ds, err := s.daemonSet(rev)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{"app.kubernetes.io/name": o.name}
	ds.Name, ds.Labels, ds.Spec.Template.Labels = o.name, labels, labels
	ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	pod := &ds.Spec.Template.Spec
	reg, drv := container(pod, registrarName), container(pod, driverContainer)
	socket := driverSocket
	if o.hostpath {
		o.driver, socket = hostpathDriver, hostpathSocket(rev)
		if err := s.withHostpath(pod, reg, drv, rev); err != nil {
			return nil, err
		}
	}
	socketDir := s.path("kubelet", "plugins", o.driver)
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == "socket-dir" {
			pod.Volumes[i].HostPath.Path = socketDir
		}
	}
	if o.regSocket == "" {
		o.regSocket = socket
	}
	setEnv(reg, "DRIVER_REG_SOCK_PATH", filepath.Join(socketDir, o.regSocket))
	for i, arg := range drv.Args {
		if strings.HasPrefix(arg, "--name=") {
			drv.Args[i] = "--name=" + o.driver
		}
	}
	if o.keepProbes {
		reg.StartupProbe = nil
	}
	reg.Args = append(reg.Args, o.args...)
	drv.Args = append(drv.Args, o.driverArgs...)
	if o.account || o.events {
		withAccount(pod, reg)
	}
	if o.events {
		for name, field := range map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid"} {
			reg.Env = append(reg.Env, corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: field}}})
		}
		reg.Args = append(reg.Args, "--events")
	}
	return ds, nil
}

// createOwn creates a check's own DaemonSet ds, with a watch of its
// driver in CSINode. end keeps the pods' logs (in _logs/pod-logs-<check>/),
// deletes the DaemonSet and waits until the driver has left CSINode; it
// acts once and returns what it returned then.
func (s *suite) createOwn(ctx context.Context, check string, ds *appsv1.DaemonSet, driver string) (watch *csiNodeWatch, end func() error, err error) {
	watch, stopWatch := s.startWatch(ctx, driver)
	var once sync.Once
	var endErr error
	end = func() error {
		once.Do(func() {
			defer stopWatch()
			endErr = s.endOwn(ctx, check, ds.Name, driver)
		})
		return endErr
	}
	if _, err := s.client.AppsV1().DaemonSets(namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		return watch, end, fmt.Errorf("create DaemonSet %s: %w", ds.Name, err)
	}
	return watch, end, nil
}

// endOwn keeps the logs of a check's own DaemonSet's pods (in
// _logs/pod-logs-<check>/), deletes it and waits until its driver has left
// CSINode.
func (s *suite) endOwn(ctx context.Context, check, dsName, driver string) error {
	s.savePodLogs(check, dsName)
	err := s.removeDaemonSet(ctx, dsName, driver)
	if err != nil {
		fmt.Printf("e2e-node: check %s: %v\n", check, err)
	}
	return err
}

// removeDaemonSet deletes a check's DaemonSet and waits until its pods
// are gone and CSINode no longer lists its driver, as the node was before.
func (s *suite) removeDaemonSet(ctx context.Context, dsName, driver string) error {
	background := metav1.DeletePropagationBackground
	err := s.client.AppsV1().DaemonSets(namespace).Delete(ctx, dsName, metav1.DeleteOptions{PropagationPolicy: &background})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete DaemonSet %s: %w", dsName, err)
	}
	return waitFor(ctx, dsName+"'s pods gone and "+driver+" out of CSINode", 3*time.Minute, 200*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		pods, err := s.podsOf(ctx, dsName)
		if err != nil || len(pods) > 0 {
			return false, err
		}
		node, err := s.client.StorageV1().CSINodes().Get(ctx, nodeName, getOpts)
		if apierrors.IsNotFound(err) {
			return true, nil // none lists no driver (check 13 deletes it)
		}
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(node.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driver }), nil
	})
}
