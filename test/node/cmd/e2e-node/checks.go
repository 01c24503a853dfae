package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-registrar/node-driver-registrar/test/node/localnode"
)

func (s *suite) checkFirstRegistration(ctx context.Context) bool {
	const name1, name2 = "1. DaemonSet pod runs, kubelet registers the driver", "2a. readiness only after registration"
	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: localnode.Namespace}}, metav1.CreateOptions{}); err != nil {
		return s.report(name1, false, "create namespace: %v", err)
	}
	// No serviceaccount controller runs: create the pods' account.
	if _, err := s.Client.CoreV1().ServiceAccounts(localnode.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		return s.report(name1, false, "create service account: %v", err)
	}
	ds, err := s.daemonSet(1)
	if err != nil {
		return s.report(name1, false, "%v", err)
	}
	f := &firstPod{began: time.Now(), readyz503: "never seen: registration came before the first /readyz poll"}
	if _, err := s.Client.AppsV1().DaemonSets(localnode.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		return s.report(name1, false, "create DaemonSet: %v", err)
	}
	err = localnode.WaitFor(ctx, "a registered and ready pod", 4*time.Minute, 50*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		return s.observeFirstPod(ctx, f), nil
	})
	times := fmt.Sprintf("DaemonSet created, then pod created +%s, scheduled +%s, registrar running +%s, registered +%s (%s after the container started), pod Ready +%s",
		ms(f.tCreated), ms(f.tScheduled), ms(f.tRunning), ms(f.tRegistered), ms(f.tRegistered-f.tRunning), ms(f.tReady))
	if err != nil {
		return s.report(name1, false, "%v: %s (see logs/kubelet.log)", err, times)
	}
	reg, _ := s.watch.Now()
	var annotation string
	ids := map[string]string{}
	node, err := s.Client.CoreV1().Nodes().Get(ctx, localnode.NodeName, getOpts)
	if err == nil {
		annotation = node.Annotations["csi.volume.kubernetes.io/nodeid"]
		err = json.Unmarshal([]byte(annotation), &ids)
	}
	ok := reg.NodeID == localnode.ExpectedNodeID && err == nil && ids[localnode.DriverName] == localnode.ExpectedNodeID
	s.report(name1, ok, "CSINode lists %s with node ID %q; Node annotation csi.volume.kubernetes.io/nodeid=%s (%v); %s",
		localnode.DriverName, reg.NodeID, annotation, err, times)
	s.report(name2, len(f.violations) == 0, "violations: %d %v; /readyz before registration: 503 %q at +%s; registered +%s; kubelet marked the pod Ready +%s",
		len(f.violations), f.violations, f.readyz503, ms(f.tReadyz503), ms(f.tRegistered), ms(f.tReady))
	return ok
}

type firstPod struct {
	began                                               time.Time
	tCreated, tScheduled, tRunning, tRegistered, tReady time.Duration
	tReadyz503                                          time.Duration
	readyz503                                           string
	violations                                          []string
}

// observeFirstPod reads the pod and /readyz before CSINode: if either says
// ready while CSINode, read afterwards, does not list the driver, readiness
// came before registration.
func (s *suite) observeFirstPod(ctx context.Context, f *firstPod) bool {
	pods, err := s.PodsOf(ctx, "csi-node")
	code, body := get(fmt.Sprintf("http://127.0.0.1:%d/readyz", revision(1).port()))
	reg, _ := s.watch.Now()
	since := time.Since(f.began)
	setOnce := func(t *time.Duration, happened bool) {
		if *t == 0 && happened {
			*t = since
		}
	}
	if err == nil && len(pods) > 0 {
		pod := &pods[0]
		s.podName = pod.Name
		setOnce(&f.tCreated, true)
		setOnce(&f.tScheduled, pod.Spec.NodeName != "")
		st := containerStatus(pod, localnode.RegistrarName)
		setOnce(&f.tRunning, st != nil && st.State.Running != nil)
		if localnode.PodReady(pod) && !reg.Registered {
			f.violations = append(f.violations, fmt.Sprintf("pod Ready at %s before CSINode listed the driver", ms(since)))
		}
		setOnce(&f.tReady, localnode.PodReady(pod))
	}
	if code == http.StatusOK && !reg.Registered {
		f.violations = append(f.violations, fmt.Sprintf("/readyz 200 at %s before CSINode listed the driver", ms(since)))
	}
	if code == http.StatusServiceUnavailable && f.tReadyz503 == 0 {
		f.tReadyz503, f.readyz503 = since, body
	}
	setOnce(&f.tRegistered, reg.Registered)
	return f.tRegistered != 0 && f.tReady != 0
}

func (s *suite) checkProbes(ctx context.Context) bool {
	const name = "2b. kubelet's probes pass (exec startup, liveness /healthz, readiness /readyz)"
	counts, err := waitProbes(ctx, "kubelet ran the liveness probe", localnode.RegistrarName, s.podName, func(counts map[string]float64) bool {
		return counts["Liveness/successful"] >= 1 && counts["Readiness/successful"] >= 1
	})
	if err != nil {
		return s.report(name, false, "%v; counts %v", err, counts)
	}
	pod, err := s.Client.CoreV1().Pods(localnode.Namespace).Get(ctx, s.podName, getOpts)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	st := containerStatus(pod, localnode.RegistrarName)
	if st == nil {
		return s.report(name, false, "pod %s has no status of container %s", s.podName, localnode.RegistrarName)
	}
	ok := counts["Startup/successful"] >= 1 && counts["Startup/failed"] == 0 &&
		counts["Liveness/failed"] == 0 && counts["Readiness/successful"] >= 1 &&
		st.RestartCount == 0 && st.Started != nil && *st.Started
	return s.report(name, ok, "kubelet prober_probe_total for %s/%s: %s (startup: exec --mode=kubelet-registration-probe); restartCount %d",
		s.podName, localnode.RegistrarName, describeProbes(counts), st.RestartCount)
}

func (s *suite) checkSocketDeleted(ctx context.Context) bool {
	const name = "5. registration socket deleted on the host: registered again, no restart"
	before, err := s.Client.CoreV1().Pods(localnode.Namespace).Get(ctx, s.podName, getOpts)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	if _, err := os.Lstat(s.regSocket()); err != nil {
		return s.report(name, false, "no registration socket before the test: %v", err)
	}
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", revision(1).port())
	began := time.Now()
	if err := os.Remove(s.regSocket()); err != nil {
		return s.report(name, false, "%v", err)
	}
	var tSocket time.Duration
	err = localnode.WaitFor(ctx, "socket back, kubelet registered it, /readyz 200", time.Minute, 20*time.Millisecond, nil, func(context.Context) (bool, error) {
		if tSocket == 0 && dialable(s.regSocket()) {
			tSocket = time.Since(began)
		}
		code, _ := get(readyz)
		reg, _ := s.watch.Now()
		return tSocket != 0 && code == http.StatusOK && reg.Registered, nil
	})
	took := time.Since(began)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	restarts, err := s.restarted(ctx, before)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	changes := []string{"none (kubelet re-registered without an intermediate CSINode write)"}
	if seen := s.watch.Between(began, time.Now()); len(seen) > 0 {
		changes = nil
		for _, r := range seen {
			changes = append(changes, fmt.Sprintf("+%s registered=%v", ms(r.At.Sub(began)), r.Registered))
		}
	}
	published := metricLine(fmt.Sprintf("http://127.0.0.1:%d/metrics", revision(1).port()), `csi_node_driver_registrar_socket_publications_total{reason="deleted"}`)
	return s.report(name, len(restarts) == 0, "socket re-created +%s, /readyz 200 and CSINode listing the driver +%s; CSINode changes seen: %s; containers restarted or replaced: %v; registrar metric %s",
		ms(tSocket), ms(took), strings.Join(changes, ", "), restarts, published)
}

func (s *suite) checkRollingUpdate(ctx context.Context) bool {
	name := "4a. rolling update (maxSurge 1, maxUnavailable 0): " + s.allowedGap()
	r, err := s.rollUpdate(ctx, 2)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	after, settled := s.settled(r)
	code, body := get(fmt.Sprintf("http://127.0.0.1:%d/readyz", revision(2).port()))
	ok := r.longestGap() <= s.maxRolloutGap && settled && code == http.StatusOK
	return s.report(name, ok, "%v: times without the driver: %d %v (allowed: none longer than %s); %s, new pod /readyz %d %q",
		r, len(r.gaps), r.describeGaps(), s.maxRolloutGap, after, code, body)
}

func (s *suite) allowedGap() string {
	if s.maxRolloutGap > 0 {
		return fmt.Sprintf("never unregistered longer than %s (E2E_NODE_MAX_ROLLOUT_GAP)", s.maxRolloutGap)
	}
	return "registered throughout"
}

// The bounds of checks 4b and 4c: between upstream's registrar and this
// one the socket cannot be handed over, and kubelet registers the driver
// again a reconcile pass after it unregistered it.
const (
	maxUpstreamDeregistrations = 1
	maxUpstreamGap             = 2 * time.Second
)

// checkRollbackToUpstream: check 3 deleted the DaemonSet.
func (s *suite) checkRollbackToUpstream(ctx context.Context) bool {
	return s.checkUpstreamRollout(ctx, "4b. rollback to upstream's image", revOurs, revUpstream)
}

func (s *suite) checkUpgradeFromUpstream(ctx context.Context) bool {
	return s.checkUpstreamRollout(ctx, "4c. upgrade from upstream's image", 0, revOursAgain)
}

func (s *suite) checkUpstreamRollout(ctx context.Context, what string, from, next revision) bool {
	name := what + " (maxSurge 1): at most one deregistration, of at most 2s; no container restart"
	if s.UpstreamMissing != "" {
		return s.skip(name, s.UpstreamMissing)
	}
	if from != 0 {
		if err := s.redeploy(ctx, from); err != nil {
			return s.report(name, false, "no registered DaemonSet of this registrar to start from: %v", err)
		}
	}
	r, err := s.rollUpdate(ctx, next)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	after, settled := s.settled(r)
	serving, servingOK := s.servingRegistrar(next)
	restarted := r.restarted()
	ok := len(r.gaps) <= maxUpstreamDeregistrations && r.longestGap() <= maxUpstreamGap && len(restarted) == 0 && settled && servingOK
	return s.report(name, ok, "%v: deregistrations: %d %v (allowed: %d, of at most %s); container restarts in %d containers: %d %v; %s, %s",
		r, len(r.gaps), r.describeGaps(), maxUpstreamDeregistrations, maxUpstreamGap, len(r.restarts), len(restarted), restarted, after, serving)
}

// servingRegistrar: upstream's /healthz says 200 when the socket at the
// path answers GetInfo for the driver; once the old pod is gone only
// upstream's can.
func (s *suite) servingRegistrar(rev revision) (string, bool) {
	if rev.upstream() {
		code, body := get(fmt.Sprintf("http://127.0.0.1:%d/healthz", rev.port()))
		return fmt.Sprintf("upstream's /healthz %d %q", code, body), code == http.StatusOK
	}
	status, said := statusOf(rev.port())
	return said, status != nil && status.State == "registered"
}

func (s *suite) checkPodDeleted(ctx context.Context) bool {
	const name = "3. pod deleted: driver deregistered, no socket left"
	orphan := metav1.DeletePropagationOrphan
	if err := s.Client.AppsV1().DaemonSets(localnode.Namespace).Delete(ctx, "csi-node", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		return s.report(name, false, "delete DaemonSet: %v", err)
	}
	if err := localnode.WaitFor(ctx, "DaemonSet gone, pod orphaned", time.Minute, 200*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		_, err := s.Client.AppsV1().DaemonSets(localnode.Namespace).Get(ctx, "csi-node", getOpts)
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		return s.report(name, false, "%v", err)
	}
	if reg, _ := s.watch.Now(); !reg.Registered {
		return s.report(name, false, "the driver was not registered before the pod was deleted")
	}
	began := time.Now()
	if err := s.Client.CoreV1().Pods(localnode.Namespace).Delete(ctx, s.podName, metav1.DeleteOptions{}); err != nil {
		return s.report(name, false, "delete pod: %v", err)
	}
	reg, ok := s.watch.WaitUntil(ctx, time.Minute, func(r localnode.Registration) bool { return !r.Registered })
	if !ok {
		return s.report(name, false, "CSINode still lists the driver 1m after the pod's deletion")
	}
	tDeregistered := reg.At.Sub(began)
	err := localnode.WaitFor(ctx, "pod object gone", 2*time.Minute, 200*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		pods, err := s.PodsOf(ctx, "csi-node")
		return err == nil && len(pods) == 0, err
	})
	tGone := time.Since(began)
	if err != nil {
		return s.report(name, false, "deregistered +%s, but %v", ms(tDeregistered), err)
	}
	names, driverFiles := dirNames(s.Path("kubelet", "plugins_registry")), dirNames(s.Path("kubelet", "plugins", localnode.DriverName))
	final, _ := s.watch.Now()
	ok = len(names) == 0 && !final.Registered
	return s.report(name, ok, "pod deleted → CSINode without the driver +%s → pod object gone +%s; plugins_registry holds %d entries %v; driver socket directory holds %v",
		ms(tDeregistered), ms(tGone), len(names), names, driverFiles)
}
