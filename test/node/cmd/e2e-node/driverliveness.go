package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/csi-registrar/node-driver-registrar/test/node/localnode"
)

// check 7's revision: deploy/ with its driver-liveness component
const revDriverLiveness revision = 8

const (
	driverHealthPort = 9900 // beyond the ports of revisions (9808 + revision), which the volume checks number up to the twenties
	// the test driver's --probe-file, which the check writes on the host
	probeFile = "probe"
)

// withDriverLiveness adapts a DaemonSet as the component
// deploy/driver-liveness/ does, its probe on the port by number (see
// dropHostPort).
func withDriverLiveness(repo string, ds *appsv1.DaemonSet) error {
	file := filepath.Join(repo, "deploy", "driver-liveness", "driver-liveness-probe.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	patch := &appsv1.DaemonSet{}
	if err := yaml.UnmarshalStrict(data, patch); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var probe *corev1.Probe
	for _, c := range patch.Spec.Template.Spec.Containers {
		if c.Name == localnode.DriverContainer {
			probe = c.LivenessProbe.DeepCopy()
		}
	}
	if probe == nil || probe.HTTPGet == nil {
		return fmt.Errorf("%s: no httpGet liveness probe for container %q; adapt test/node", file, localnode.DriverContainer)
	}
	probe.HTTPGet.Port = intstr.FromInt32(driverHealthPort)
	for i := range ds.Spec.Template.Spec.Containers {
		ctr := &ds.Spec.Template.Spec.Containers[i]
		switch ctr.Name {
		case localnode.RegistrarName:
			ctr.Args = append(ctr.Args, fmt.Sprintf("--driver-health-endpoint=:%d", driverHealthPort))
		case localnode.DriverContainer:
			ctr.Args = append(ctr.Args, "--probe-file=/csi/"+probeFile)
			ctr.LivenessProbe = probe
		}
	}
	return nil
}

func (s *suite) checkDriverLiveness(ctx context.Context) bool {
	const name = "7. driver liveness served by the registrar, no livenessprobe container: a not-ready driver is restarted by kubelet, registered throughout"
	answer := s.Path("kubelet", "plugins", localnode.DriverName, probeFile)
	setAnswer := func(a string) error { return os.WriteFile(answer, []byte(a+"\n"), 0o644) }
	if err := setAnswer("ready"); err != nil {
		return s.report(name, false, "%v", err)
	}
	r, err := s.rollUpdate(ctx, revDriverLiveness)
	if err != nil {
		return s.report(name, false, "rolling update to the driver-liveness revision: %v", err)
	}
	pod, err := s.Client.CoreV1().Pods(localnode.Namespace).Get(ctx, s.podName, getOpts)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	var images []string
	for _, c := range pod.Spec.Containers {
		images = append(images, c.Name+"="+c.Image)
	}
	if len(pod.Spec.Containers) != 2 || strings.Contains(strings.Join(images, " "), "livenessprobe") || containerStatus(pod, localnode.DriverContainer) == nil {
		return s.report(name, false, "pod %s runs %v: want the driver and the registrar only", s.podName, images)
	}
	counts, err := waitProbes(ctx, "kubelet's liveness probe of the driver passed", localnode.DriverContainer, s.podName, func(counts map[string]float64) bool {
		return counts["Liveness/successful"] >= 1
	})
	if err != nil {
		return s.report(name, false, "%v; counts %v", err, counts)
	}
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", revDriverLiveness.port())
	probesOK := metricLine(metricsURL, `csi_sidecar_operations_seconds_count{driver_name="`+localnode.DriverName+`",grpc_status_code="OK",method_name="/csi.v1.Identity/Probe"}`)

	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	polled := pollNotReady(pollCtx, revDriverLiveness.port())
	d, err := s.restartNotReadyDriver(ctx, pod, setAnswer)
	stopPolling()
	notReady := <-polled
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	restarts, err := s.restarted(ctx, pod)
	registrarCounts, errCounts := probeCounts(localnode.RegistrarName)
	if err = errors.Join(err, errCounts); err != nil {
		return s.report(name, false, "%v", err)
	}
	sameRegistrar := !slices.ContainsFunc(restarts, func(r string) bool { return strings.HasPrefix(r, localnode.RegistrarName+":") })
	deregistrations := describeGaps(gaps(s.watch, r.began, d.end), r.began)
	registered, _ := s.watch.Now()
	ok := d.failed >= 1 && strings.Contains(d.lastBody, "driver responded but is not ready") &&
		sameRegistrar && len(deregistrations) == 0 && registered.Registered && len(notReady) == 0 &&
		registrarCounts[s.podName]["Liveness/failed"] == 0 && !strings.HasSuffix(probesOK, "missing")
	return s.report(name, ok, "%v; pod %s: %v; before: kubelet's driver liveness %v ok, registrar metric %s; %s; registrar: same container %v (restarted or replaced: %v), its liveness failures %v, /readyz not 200: %d %v; CSINode deregistrations from the rollout on: %d %v, registered at the end %v",
		r, s.podName, images, counts["Liveness/successful"], probesOK, d, sameRegistrar, restarts,
		registrarCounts[s.podName]["Liveness/failed"], len(notReady), notReady, len(deregistrations), deregistrations, registered.Registered)
}

type driverRestart struct {
	began, end    time.Time
	lastBody      string  // the driver health endpoint's last answer while not ready
	failed        float64 // kubelet's failed liveness probes of the driver
	tRestarted    time.Duration
	before, after int32 // the driver's restartCount
}

func (d *driverRestart) String() string {
	return fmt.Sprintf("driver turned not-ready at +0s, its /healthz answered %q, kubelet counted %v failed liveness probes and restarted it at +%s (restartCount %d -> %d), ready again and its liveness probe passing at +%s",
		d.lastBody, d.failed, ms(d.tRestarted), d.before, d.after, ms(d.end.Sub(d.began)))
}

func (s *suite) restartNotReadyDriver(ctx context.Context, pod *corev1.Pod, setAnswer func(string) error) (*driverRestart, error) {
	d := &driverRestart{began: time.Now(), before: containerStatus(pod, localnode.DriverContainer).RestartCount}
	if err := setAnswer("not-ready"); err != nil {
		return nil, err
	}
	driverHealthz := fmt.Sprintf("http://127.0.0.1:%d/healthz", driverHealthPort)
	_, err := s.waitPod(ctx, pod.Name, "kubelet restarted the not-ready driver", 3*time.Minute, func(p *corev1.Pod) bool {
		if _, body := get(driverHealthz); body != "" {
			d.lastBody = body
		}
		st := containerStatus(p, localnode.DriverContainer)
		d.tRestarted = time.Since(d.began)
		return st != nil && st.RestartCount > d.before
	})
	if err != nil {
		return nil, fmt.Errorf("%v; the driver health endpoint last answered %q", err, d.lastBody)
	}
	failedCounts, _ := probeCounts(localnode.DriverContainer)
	d.failed = failedCounts[pod.Name]["Liveness/failed"]
	if err := setAnswer("ready"); err != nil {
		return nil, err
	}
	_, err = s.waitPod(ctx, pod.Name, "the restarted driver's liveness probe passes", 3*time.Minute, func(p *corev1.Pod) bool {
		st := containerStatus(p, localnode.DriverContainer)
		all, _ := probeCounts(localnode.DriverContainer)
		code, _ := get(driverHealthz)
		if st != nil {
			d.after = st.RestartCount
		}
		return st != nil && st.State.Running != nil && code == http.StatusOK &&
			all[pod.Name]["Liveness/successful"] > failedCounts[pod.Name]["Liveness/successful"]
	})
	d.end = time.Now()
	return d, err
}

func pollNotReady(ctx context.Context, port int32) <-chan []string {
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
	began := time.Now()
	return sample(ctx, 100*time.Millisecond, []string(nil), func(notReady *[]string) {
		code, body := get(readyz)
		if code == 0 && ctx.Err() == nil {
			// A loaded host may miss the client's timeout once while
			// kubelet's probes pass: only two in a row fail the check.
			code, body = get(readyz)
		}
		if code != http.StatusOK {
			*notReady = append(*notReady, fmt.Sprintf("+%s %d %q", ms(time.Since(began)), code, body))
		}
	})
}
