package main

// Checks 8a-8c: kubelet can publish a CSI inline volume only on the
// endpoint that the registrar's GetInfo announced.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/mount-utils"

	"github.com/csi-registrar/node-driver-registrar/test/node/localnode"
)

const (
	busyboxImage   = "localhost/e2e-node/busybox:1" // the volume pods' shell
	volumePodLabel = "e2e-node/volume-pod"
)

const (
	revHostpath         revision = 20
	revHostpathNext     revision = 21
	revHostpathEndpoint revision = 22
)

func hostpathSocket(rev revision) string {
	if rev == revHostpathEndpoint {
		return "csi-2.sock"
	}
	return "csi.sock"
}

func (s *suite) hostpathDaemonSetFor(rev revision) (*appsv1.DaemonSet, error) {
	return s.ownDaemonSet(rev, own{Own: localnode.Own{Name: localnode.HostpathDaemonSet, Hostpath: true, Socket: hostpathSocket(rev)}})
}

type hostpathVolume struct {
	VolID     string
	VolPath   string
	Ephemeral bool
	Published []string
}

// hostpathVolumes reads the driver's state file, rewritten on every change.
func (s *suite) hostpathVolumes() ([]hostpathVolume, error) {
	data, err := os.ReadFile(s.Path(localnode.HostpathStateDir, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var state struct{ Volumes []hostpathVolume }
	if err := json.Unmarshal(data, &state); err != nil {
		return nil, fmt.Errorf("the driver's state.json: %w", err)
	}
	return state.Volumes, nil
}

// mountPoint: this mount namespace is kubelet's.
func mountPoint(path string) (bool, error) {
	mounted, err := mount.New("").IsMountPoint(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return mounted, err
}

type volumePod struct {
	name, uid string
	target    string // where kubelet asks the driver to publish the volume
	volID     string // the driver's ID of the volume, once published
	// from the pod's creation
	tPublished, tReadBack, tRunning time.Duration
}

func (v *volumePod) String() string {
	return fmt.Sprintf("pod %s created → published (target mounted, in the driver's state) +%s → its file read back in the driver's %s/%s +%s → pod Running +%s",
		v.name, ms(v.tPublished), localnode.HostpathStateDir, v.volID, ms(v.tReadBack), ms(v.tRunning))
}

func volumePodSpec(name string) *corev1.Pod {
	script := `trap 'exit 0' TERM; echo "$POD_NAME" >/data/hello; i=0; while :; do i=$((i+1)); echo $i >/data/beat; sleep 0.2; done`
	grace := int64(2)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: localnode.Namespace, Labels: map[string]string{volumePodLabel: "true"}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  new(bool),
			TerminationGracePeriodSeconds: &grace,
			// There is no CNI: only host network pods start, on a node that
			// keeps kubelet's not-ready taint (no node lifecycle controller
			// lifts it; the DaemonSets tolerate it too).
			HostNetwork: true,
			DNSPolicy:   corev1.DNSDefault,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "writer", Image: busyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c", script},
				Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
				}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				CSI: &corev1.CSIVolumeSource{Driver: localnode.HostpathDriver},
			}}},
		},
	}
}

func (s *suite) startVolumePod(ctx context.Context, name string) (*volumePod, error) {
	began := time.Now()
	created, err := s.Client.CoreV1().Pods(localnode.Namespace).Create(ctx, volumePodSpec(name), metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %w", name, err)
	}
	v := &volumePod{name: name, uid: string(created.UID)}
	v.target = s.Path("kubelet", "pods", v.uid, "volumes", "kubernetes.io~csi", "data", "mount")
	err = localnode.WaitFor(ctx, "volume of pod "+name+" published, its file read back, pod Running", time.Minute, 20*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		if v.tPublished == 0 {
			vol, err := s.publishedAt(v.target)
			if err != nil || vol == nil {
				return false, err
			}
			if mounted, err := mountPoint(v.target); !mounted {
				return false, err
			}
			v.volID, v.tPublished = vol.VolID, time.Since(began)
		}
		if v.tReadBack == 0 {
			hello, err := os.ReadFile(s.Path(localnode.HostpathStateDir, v.volID, "hello"))
			if err != nil || strings.TrimSpace(string(hello)) != name {
				return false, err
			}
			v.tReadBack = time.Since(began)
		}
		current, err := s.Client.CoreV1().Pods(localnode.Namespace).Get(ctx, name, getOpts)
		if err != nil || current.Status.Phase != corev1.PodRunning {
			return false, err
		}
		v.tRunning = time.Since(began)
		return true, nil
	})
	if err != nil {
		return v, fmt.Errorf("%v (published +%s, read back +%s, %s; see logs/kubelet.log and the driver's log)", err, ms(v.tPublished), ms(v.tReadBack), s.whyNotRunning(ctx, name))
	}
	return v, nil
}

// whyNotRunning: kubelet's FailedMount event names, for one, a driver
// socket it could not dial.
func (s *suite) whyNotRunning(ctx context.Context, name string) string {
	current, err := s.Client.CoreV1().Pods(localnode.Namespace).Get(ctx, name, getOpts)
	if err != nil {
		return "pod: " + err.Error()
	}
	state := fmt.Sprintf("phase %q", current.Status.Phase)
	for _, c := range current.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			state += fmt.Sprintf(", %s: %s", c.Type, c.Message)
		}
	}
	events, err := s.Client.CoreV1().Events(localnode.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=FailedMount"})
	if err == nil && len(events.Items) > 0 {
		state += "; last FailedMount event: " + events.Items[len(events.Items)-1].Message
	}
	return state
}

func (s *suite) publishedAt(target string) (*hostpathVolume, error) {
	vols, err := s.hostpathVolumes()
	if err != nil {
		return nil, err
	}
	for i := range vols {
		if slices.Contains(vols[i].Published, target) {
			return &vols[i], nil
		}
	}
	return nil, nil
}

type unpublished struct {
	tUnpublished time.Duration // target no longer mounted, volume gone from the driver's state and directory
	tGone        time.Duration // pod object gone
}

// deleteVolumePod: an inline volume is deleted on unpublish, gone from the
// driver's state file and directory.
func (s *suite) deleteVolumePod(ctx context.Context, v *volumePod) (unpublished, error) {
	var u unpublished
	began := time.Now()
	if err := s.Client.CoreV1().Pods(localnode.Namespace).Delete(ctx, v.name, metav1.DeleteOptions{}); err != nil {
		return u, fmt.Errorf("delete pod %s: %w", v.name, err)
	}
	var state string
	err := localnode.WaitFor(ctx, "volume of pod "+v.name+" unpublished, pod gone", 2*time.Minute, 20*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		if u.tUnpublished == 0 {
			mounted, err := mountPoint(v.target)
			if err != nil {
				return false, err
			}
			vols, err := s.hostpathVolumes()
			if err != nil {
				return false, err
			}
			known := slices.ContainsFunc(vols, func(vol hostpathVolume) bool { return vol.VolID == v.volID })
			_, statErr := os.Stat(s.Path(localnode.HostpathStateDir, v.volID))
			state = fmt.Sprintf("target mounted %v, volume in the driver's state %v, its directory there %v", mounted, known, statErr == nil)
			if mounted || known || !errors.Is(statErr, os.ErrNotExist) {
				return false, nil
			}
			u.tUnpublished = time.Since(began)
		}
		_, err := s.Client.CoreV1().Pods(localnode.Namespace).Get(ctx, v.name, getOpts)
		if err == nil || !strings.Contains(err.Error(), "not found") {
			return false, err
		}
		u.tGone = time.Since(began)
		return true, nil
	})
	if err != nil {
		return u, fmt.Errorf("%v (%s)", err, state)
	}
	return u, nil
}

// driverCalls counts the gRPC calls the driver logs, by method.
func (s *suite) driverCalls(pod *corev1.Pod) map[string]int {
	calls := map[string]int{}
	for line := range strings.SplitSeq(s.containerLog(pod, localnode.HostpathContainer), "\n") {
		if _, method, ok := strings.Cut(line, "GRPC call: /csi.v1.Node/"); ok {
			calls[strings.TrimSpace(method)]++
		}
	}
	return calls
}

func (s *suite) checkVolume(ctx context.Context) bool {
	names := []string{
		"8a. volume through a real driver (hostpathplugin, CSI inline volume): kubelet publishes it on the endpoint the registrar announced, the pod's file is read back on the driver's side, deleting the pod unpublishes it",
		"8b. rolling update of the hostpath DaemonSet (maxSurge 1, same driver socket: the handover) with a volume pod running: its volume still served, a new volume pod mounts, the old one unmounts cleanly",
		"8c. rolling update of the hostpath DaemonSet to another driver socket (maxSurge 1) with a volume pod running: kubelet follows the new endpoint; the volume still served, a new volume pod mounts, the old one unmounts cleanly",
	}
	if s.HostpathMissing != "" {
		return s.skipAll(names, s.HostpathMissing)
	}
	watch, stopWatch := s.StartWatch(ctx, localnode.HostpathDriver)
	defer stopWatch()
	if !s.checkVolumePublished(ctx, names[0], watch) {
		return s.failAll(names[1:], "not run: check 8a failed")
	}
	running, err := s.startVolumePod(ctx, "volume-2")
	if err != nil {
		s.report(names[1], false, "%v", err)
		return s.report(names[2], false, "not run: check 8b failed")
	}
	running, ok := s.checkVolumeRollout(ctx, names[1], watch, running, revHostpathNext, true)
	if running == nil {
		return s.report(names[2], false, "not run: check 8b failed")
	}
	_, ok2 := s.checkVolumeRollout(ctx, names[2], watch, running, revHostpathEndpoint, false)
	return ok && ok2
}

func (s *suite) checkVolumePublished(ctx context.Context, name string, watch *localnode.Watch) bool {
	if _, err := s.Client.StorageV1().CSIDrivers().Create(ctx, localnode.HostpathCSIDriver(), metav1.CreateOptions{}); err != nil {
		return s.report(name, false, "create CSIDriver: %v", err)
	}
	ds, err := s.hostpathDaemonSetFor(revHostpath)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	began := time.Now()
	driverPod, tReady, err := s.Deploy(ctx, ds, watch)
	if err != nil {
		return s.report(name, false, "%v (see the registrar's and the driver's logs in logs/pod-logs)", err)
	}
	reg, _ := watch.First(began, localnode.IsRegistered)
	tRegistered := reg.At.Sub(began)
	s.Timing("8a. hostpath DaemonSet created → "+localnode.HostpathDriver+" in CSINode (registration)", tRegistered)
	serving, servingOK := s.servingRegistrar(revHostpath)

	vp, err := s.startVolumePod(ctx, "volume-1")
	if err != nil {
		return s.report(name, false, "registered +%s; %v", ms(tRegistered), err)
	}
	s.Timing("8a. volume pod created → volume published (NodePublishVolume)", vp.tPublished)
	published := s.driverCalls(driverPod)
	u, err := s.deleteVolumePod(ctx, vp)
	if err != nil {
		return s.report(name, false, "%v; then %v", vp, err)
	}
	s.Timing("8a. volume pod deleted → volume unpublished (NodeUnpublishVolume)", u.tUnpublished)
	calls := s.driverCalls(driverPod)
	ok := reg.NodeID == localnode.NodeName && servingOK &&
		published["NodePublishVolume"] >= 1 && calls["NodeUnpublishVolume"] >= 1
	return s.report(name, ok, "DaemonSet created → %s in CSINode with node ID %q +%s, pod Ready +%s, registrar %s; %v; pod deleted → target unmounted, volume %s gone from the driver's state and directory +%s → pod object gone +%s; the driver's log (pod %s) counts NodePublishVolume %d, NodeUnpublishVolume %d",
		localnode.HostpathDriver, reg.NodeID, ms(tRegistered), ms(tReady), serving, vp, vp.volID, ms(u.tUnpublished), ms(u.tGone),
		driverPod.Name, calls["NodePublishVolume"], calls["NodeUnpublishVolume"])
}

func (s *suite) beat(v *volumePod) string {
	data, _ := os.ReadFile(s.Path(localnode.HostpathStateDir, v.volID, "beat"))
	return strings.TrimSpace(string(data))
}

// checkVolumeRollout rolls the hostpath DaemonSet to next while the volume
// pod running runs. It returns the new volume pod, still running if keep.
func (s *suite) checkVolumeRollout(ctx context.Context, name string, watch *localnode.Watch, running *volumePod, next revision, keep bool) (*volumePod, bool) {
	want, err := s.hostpathDaemonSetFor(next)
	if err != nil {
		return nil, s.report(name, false, "%v", err)
	}
	r, err := s.roll(ctx, want, watch, nil)
	if err != nil {
		return nil, s.report(name, false, "%v", err)
	}
	newDriverPod, err := s.Client.CoreV1().Pods(localnode.Namespace).Get(ctx, r.newPod, getOpts)
	if err != nil {
		return nil, s.report(name, false, "%v", err)
	}
	final, _ := watch.Now()
	step := name[:3]
	s.Timing(step+" hostpath rolling update → new pod Ready", r.tNewReady)
	s.Timing(step+" hostpath rolling update → old pod gone", r.tOldGone)
	servedHow, served := s.stillServed(ctx, running)
	fresh, err := s.startVolumePod(ctx, fmt.Sprintf("volume-%d", int(next-revHostpath)+2))
	if err != nil {
		return nil, s.report(name, false, "update → new pod Ready +%s, old pod gone +%s; %s; new volume pod: %v", ms(r.tNewReady), ms(r.tOldGone), servedHow, err)
	}
	s.Timing(step+" after the update: volume pod created → volume published", fresh.tPublished)
	deleted, errDeleted := s.deleteVolumePods(ctx, step, running)
	wantUnpublish := 1
	if !keep {
		more, err := s.deleteVolumePods(ctx, step, fresh)
		deleted, errDeleted, wantUnpublish = deleted+"; "+more, errors.Join(errDeleted, err), 2
	}
	calls := s.driverCalls(newDriverPod)
	status, serving := statusOf(next.port())
	registration, registered := s.volumeRegistration(r, next, status)
	ok := registered && served && errDeleted == nil && final.Registered && final.NodeID == localnode.NodeName && status != nil && status.State == "registered" &&
		calls["NodePublishVolume"] == 1 && calls["NodeUnpublishVolume"] == wantUnpublish
	return fresh, s.report(name, ok, "pod %s's volume %s published before the update; update → new pod %s (driver socket %s) Ready +%s → old pod %s gone +%s; wanted: %s; times without %s in CSINode: %d %v; %s after: registered=%v node ID %q, new registrar %s; "+
		"%s; new %v; %s; the new driver's log counts NodePublishVolume %d (want 1), NodeUnpublishVolume %d (want %d)",
		running.name, running.volID, newDriverPod.Name, hostpathSocket(next), ms(r.tNewReady), r.oldPod, ms(r.tOldGone), registration, localnode.HostpathDriver, len(r.gaps), r.describeGaps(),
		rolloutSettle, final.Registered, final.NodeID, serving, servedHow, fresh, deleted,
		calls["NodePublishVolume"], calls["NodeUnpublishVolume"], wantUnpublish)
}

// stillServed: the new driver loaded its state from the old one's file.
func (s *suite) stillServed(ctx context.Context, running *volumePod) (string, bool) {
	stillMounted, _ := mountPoint(running.target)
	vol, _ := s.publishedAt(running.target)
	beatBefore := s.beat(running)
	var beatAfter string
	errBeat := localnode.WaitFor(ctx, "pod "+running.name+" still writing into its volume", 30*time.Second, 50*time.Millisecond, nil, func(context.Context) (bool, error) {
		beatAfter = s.beat(running)
		return beatAfter != "" && beatAfter != beatBefore, nil
	})
	return fmt.Sprintf("the running pod's volume: target still mounted %v, in the new driver's state %v, its writes still arrive (counter %s → %s: %v)",
		stillMounted, vol != nil, beatBefore, beatAfter, errBeat == nil), stillMounted && vol != nil && errBeat == nil
}

func (s *suite) deleteVolumePods(ctx context.Context, step string, pods ...*volumePod) (string, error) {
	var lines []string
	var errs error
	for _, v := range pods {
		u, err := s.deleteVolumePod(ctx, v)
		s.Timing(fmt.Sprintf("%s after the update: volume pod %s deleted → unpublished", step, v.name), u.tUnpublished)
		lines = append(lines, fmt.Sprintf("pod %s deleted → unpublished +%s, gone +%s (%v)", v.name, ms(u.tUnpublished), ms(u.tGone), err))
		errs = errors.Join(errs, err)
	}
	return strings.Join(lines, "; "), errs
}

// volumeRegistration: with the same driver socket the new registrar takes
// the registration socket over, as in check 4a; with another kubelet
// registers the driver again, as in checks 4b and 4c.
func (s *suite) volumeRegistration(r *rollout, next revision, status *registrarState) (string, bool) {
	longest := r.longestGap()
	if hostpathSocket(r.from) != hostpathSocket(next) {
		return fmt.Sprintf("another endpoint: kubelet registers the driver again, at most %d deregistration, of at most %s", maxUpstreamDeregistrations, maxUpstreamGap),
			len(r.gaps) <= maxUpstreamDeregistrations && longest <= maxUpstreamGap
	}
	return fmt.Sprintf("the new registrar takes the registration socket over (one handover publication), CSINode without the driver for no longer than %s", s.maxRolloutGap),
		status != nil && status.Publications["handover"] == 1 && longest <= s.maxRolloutGap
}
