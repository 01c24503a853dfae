package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The revision of check 7: deploy/ with its driver-liveness component, two
// containers and no livenessprobe sidecar. The registrar answers the
// driver container's liveness probe on driverHealthPort.
const revDriverLiveness revision = 8

// Where the registrar of revDriverLiveness serves the driver's liveness,
// and the test driver's Probe answer.
const (
	driverHealthPort = 9900 // beyond the ports of revisions (9808 + revision), which the volume checks number up to the twenties
	// probeFile is the test driver's --probe-file, in the socket
	// directory: the check changes the driver's Probe answer through it
	// on the host.
	probeFile = "probe"
)

// withDriverLiveness adapts a revision's DaemonSet as the component
// deploy/driver-liveness/ does: --driver-health-endpoint on the
// registrar, and on the driver container the component's liveness probe,
// on the port by number (with hostNetwork a declared port is a host port,
// which would keep the new pod of a maxSurge update Pending). The test
// driver reads its Probe answer from probeFile.
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
		if c.Name == driverContainer {
			probe = c.LivenessProbe.DeepCopy()
		}
	}
	if probe == nil || probe.HTTPGet == nil {
		return fmt.Errorf("%s: no httpGet liveness probe for container %q; adapt test/node", file, driverContainer)
	}
	probe.HTTPGet.Port = intstr.FromInt32(driverHealthPort)
	for i := range ds.Spec.Template.Spec.Containers {
		ctr := &ds.Spec.Template.Spec.Containers[i]
		switch ctr.Name {
		case registrarName:
			ctr.Args = append(ctr.Args, fmt.Sprintf("--driver-health-endpoint=:%d", driverHealthPort))
		case driverContainer:
			ctr.Args = append(ctr.Args, "--probe-file=/csi/"+probeFile)
			ctr.LivenessProbe = probe
		}
	}
	return nil
}

// checkDriverLiveness rolls the DaemonSet to the two-container shape
// (check 7): kubelet's liveness probe of the driver container reaches the
// registrar's --driver-health-endpoint, which calls the driver's Probe; a
// driver turned not ready is restarted by kubelet, the registrar is not,
// and the driver stays registered throughout.
func (s *suite) checkDriverLiveness(ctx context.Context) bool {
	const name = "7. driver liveness served by the registrar, no livenessprobe container: a not-ready driver is restarted by kubelet, registered throughout"
	answer := s.path("kubelet", "plugins", driverName, probeFile)
	setAnswer := func(a string) error { return os.WriteFile(answer, []byte(a+"\n"), 0o644) }
	if err := setAnswer("ready"); err != nil {
		return s.report(name, false, "%v", err)
	}
	r, err := s.rollUpdate(ctx, revDriverLiveness)
	if err != nil {
		return s.report(name, false, "rolling update to the driver-liveness revision: %v", err)
	}
	pod, err := s.client.CoreV1().Pods(namespace).Get(ctx, s.podName, getOpts)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	var images []string
	for _, c := range pod.Spec.Containers {
		images = append(images, c.Name+"="+c.Image)
	}
	if len(pod.Spec.Containers) != 2 || strings.Contains(strings.Join(images, " "), "livenessprobe") {
		return s.report(name, false, "pod %s runs %v: want the driver and the registrar only", s.podName, images)
	}
	registrarBefore := containerStatus(pod, registrarName)
	driverBefore := containerStatus(pod, driverContainer)
	if registrarBefore == nil || driverBefore == nil {
		return s.report(name, false, "pod %s lacks a container status", s.podName)
	}

	// kubelet's liveness probe of the driver passes through the registrar.
	counts, err := waitProbes(ctx, "kubelet's liveness probe of the driver passed", driverContainer, s.podName, func(counts map[string]float64) bool {
		return counts["Liveness/successful"] >= 1
	})
	if err != nil {
		return s.report(name, false, "%v; counts %v", err, counts)
	}
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", revDriverLiveness.port())
	probesOK := metricLine(metricsURL, `csi_sidecar_operations_seconds_count{driver_name="`+driverName+`",grpc_status_code="OK",method_name="/csi.v1.Identity/Probe"}`)

	// The registrar's readiness is polled throughout: the driver's
	// failing probe and its restart must not touch the registration.
	began := time.Now()
	stopPolling := pollNotReady(ctx, revDriverLiveness.port())
	defer stopPolling()

	if err := setAnswer("not-ready"); err != nil {
		return s.report(name, false, "%v", err)
	}
	var tRestarted time.Duration
	var lastBody string
	driverHealthz := fmt.Sprintf("http://127.0.0.1:%d/healthz", driverHealthPort)
	_, err = s.waitPod(ctx, s.podName, "kubelet restarted the not-ready driver", 3*time.Minute, func(p *corev1.Pod) bool {
		if _, body := get(driverHealthz); body != "" {
			lastBody = body
		}
		st := containerStatus(p, driverContainer)
		tRestarted = time.Since(began)
		return st != nil && st.RestartCount > driverBefore.RestartCount
	})
	if err != nil {
		return s.report(name, false, "%v; the driver health endpoint last answered %q", err, lastBody)
	}
	failedCounts, _ := probeCounts(driverContainer)
	if err := setAnswer("ready"); err != nil {
		return s.report(name, false, "%v", err)
	}
	// The restarted driver is probed again, and passes.
	var driverAfter *corev1.ContainerStatus
	final, err := s.waitPod(ctx, s.podName, "the restarted driver's liveness probe passes", 3*time.Minute, func(p *corev1.Pod) bool {
		driverAfter = containerStatus(p, driverContainer)
		all, _ := probeCounts(driverContainer)
		code, _ := get(driverHealthz)
		return driverAfter != nil && driverAfter.State.Running != nil && code == http.StatusOK &&
			all[s.podName]["Liveness/successful"] > failedCounts[s.podName]["Liveness/successful"]
	})
	notReady := stopPolling()
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	end := time.Now()
	registrarAfter := containerStatus(final, registrarName)
	registrarCounts, err := probeCounts(registrarName)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	var deregistrations []string
	for _, g := range s.watch.gaps(r.began, end) {
		deregistrations = append(deregistrations, "+"+ms(g.from.Sub(r.began)))
	}
	registered, _ := s.watch.now()
	driverFailed := failedCounts[s.podName]["Liveness/failed"]
	sameRegistrar := registrarAfter != nil && registrarAfter.ContainerID == registrarBefore.ContainerID && registrarAfter.RestartCount == registrarBefore.RestartCount
	ok := driverFailed >= 1 && strings.Contains(lastBody, "driver responded but is not ready") &&
		sameRegistrar && len(deregistrations) == 0 && registered.registered && len(notReady) == 0 &&
		registrarCounts[s.podName]["Liveness/failed"] == 0 && !strings.HasSuffix(probesOK, "missing")
	return s.report(name, ok, "%v; pod %s: %v; before: kubelet's driver liveness %v ok, registrar metric %s; driver turned not-ready at +0s, its /healthz answered %q, kubelet counted %v failed liveness probes and restarted it at +%s (restartCount %d -> %d), ready again and its liveness probe passing at +%s; registrar: same container %v, restartCount %d, its liveness failures %v, /readyz not 200: %d %v; CSINode deregistrations from the rollout on: %d %v, registered at the end %v",
		r, s.podName, images, counts["Liveness/successful"], probesOK, lastBody, driverFailed, ms(tRestarted),
		driverBefore.RestartCount, driverAfter.RestartCount, ms(end.Sub(began)), sameRegistrar, registrarAfter.RestartCount,
		registrarCounts[s.podName]["Liveness/failed"], len(notReady), notReady, len(deregistrations), deregistrations, registered.registered)
}

// pollNotReady polls the registrar's /readyz on port every 100ms until
// stop, which returns the answers that were not 200, with their times.
func pollNotReady(ctx context.Context, port int32) (stop func() []string) {
	ctx, cancel := context.WithCancel(ctx)
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
	began := time.Now()
	done := sample(ctx, 100*time.Millisecond, []string(nil), func(notReady *[]string) {
		code, body := get(readyz)
		if code == 0 && ctx.Err() == nil {
			// No answer within the client's timeout, seen once at load 8
			// while kubelet's probes passed: asked again at once, so that
			// only a registrar that does not answer twice in a row, or
			// answers not ready, fails the check.
			code, body = get(readyz)
		}
		if code != http.StatusOK {
			*notReady = append(*notReady, fmt.Sprintf("+%s %d %q", ms(time.Since(began)), code, body))
		}
	})
	var once sync.Once
	var notReady []string
	return func() []string {
		once.Do(func() {
			cancel()
			notReady = <-done
		})
		return notReady
	}
}
