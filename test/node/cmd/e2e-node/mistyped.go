package main

// Check 10 (issue 25): a mistyped --kubelet-registration-path must show
// where a user of upstream's image looks: kubelet restarts the registrar
// (deploy/'s liveness probe on its /healthz) with kubelet's reason in the
// pod's status. The driver is one of its own, and the healthy drivers' pods
// must not restart nor lose their registration meanwhile.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-registrar/node-driver-registrar/test/node/localnode"
)

const (
	mistypedDriver    = "mistyped.csi.example.com"
	mistypedDaemonSet = "csi-mistyped"
	mistypedSocket    = "csi-typo.sock"
	// shorter than the default (3m), for a short run
	mistypedUnhealthyAfter = 20 * time.Second
	// kubelet's container timestamps are whole seconds, and the container
	// takes a moment to stop.
	mistypedSlack             = 5 * time.Second
	revMistyped      revision = 40
	revMistypedFixed revision = 41
)

func (s *suite) mistypedDaemonSetFor(rev revision) (*appsv1.DaemonSet, error) {
	o := own{Own: localnode.Own{Name: mistypedDaemonSet, Driver: mistypedDriver, KeepProbes: true, Args: []string{"--unhealthy-after=" + mistypedUnhealthyAfter.String()}}}
	if rev == revMistyped {
		o.RegSocket = mistypedSocket
	}
	return s.ownDaemonSet(rev, o)
}

// healthy is what check 10 compares before and after: the other pods'
// containers and drivers.
type healthy struct {
	pods    map[string]corev1.ContainerStatus // namespace/pod/container
	watches map[string]*localnode.Watch
}

func (s *suite) watchHealthy(ctx context.Context) (*healthy, error) {
	pods, err := s.healthyPods(ctx)
	if err != nil {
		return nil, err
	}
	if len(pods) == 0 {
		return nil, fmt.Errorf("no healthy driver's pod on the node to compare with (did the earlier checks leave none?)")
	}
	csiNode, err := s.Client.StorageV1().CSINodes().Get(ctx, localnode.NodeName, getOpts)
	if err != nil {
		return nil, err
	}
	h := &healthy{pods: pods, watches: map[string]*localnode.Watch{}}
	for _, d := range csiNode.Spec.Drivers {
		w := localnode.NewWatch(d.Name)
		go w.Run(ctx, s.Client)
		h.watches[d.Name] = w
		if _, ok := w.WaitUntil(ctx, 30*time.Second, localnode.IsRegistered); !ok {
			return nil, fmt.Errorf("the watch of CSINode does not see %s registered", d.Name)
		}
	}
	return h, nil
}

func (s *suite) healthyPods(ctx context.Context) (map[string]corev1.ContainerStatus, error) {
	list, err := s.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]corev1.ContainerStatus{}
	for _, pod := range list.Items {
		if pod.Labels["app.kubernetes.io/name"] == mistypedDaemonSet {
			continue
		}
		for _, st := range pod.Status.ContainerStatuses {
			out[pod.Namespace+"/"+pod.Name+"/"+st.Name] = st
		}
	}
	return out, nil
}

func (h *healthy) since(ctx context.Context, s *suite, began time.Time, p *problems) (int, []string, error) {
	after, err := s.healthyPods(ctx)
	if err != nil {
		return 0, nil, err
	}
	var changed, drivers []string
	for key, was := range h.pods {
		now, ok := after[key]
		switch {
		case !ok:
			changed = append(changed, key+": gone")
		case now.RestartCount != was.RestartCount || now.ContainerID != was.ContainerID:
			changed = append(changed, fmt.Sprintf("%s: restartCount %d -> %d", key, was.RestartCount, now.RestartCount))
		}
	}
	slices.Sort(changed)
	p.want(len(changed) == 0, "healthy pods changed: %s", strings.Join(changed, ", "))
	for driver, w := range h.watches {
		for _, g := range gaps(w, began, time.Now()) {
			p.add("%s left CSINode at +%s", driver, ms(g.from.Sub(began)))
		}
		drivers = append(drivers, driver)
	}
	slices.Sort(drivers)
	return len(h.pods) - len(changed), drivers, nil
}

func (s *suite) checkMistypedPath(ctx context.Context) bool {
	name := fmt.Sprintf("10. mistyped --kubelet-registration-path (.../%s) with deploy/'s probes: kubelet tries again meanwhile (by itself from 1.36, before that on the socket the registrar publishes again) and restarts the registrar within --unhealthy-after (%s here; the default is 3m) plus the liveness probe's period x failureThreshold, with kubelet's reason in the pod's status; a rolling update fixing the path registers the driver; no healthy driver's pod restarts",
		mistypedSocket, mistypedUnhealthyAfter)
	ds, err := s.mistypedDaemonSetFor(revMistyped)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	liveness := localnode.Container(&ds.Spec.Template.Spec, localnode.RegistrarName).LivenessProbe
	if liveness == nil || liveness.HTTPGet == nil || liveness.HTTPGet.Path != "/healthz" {
		return s.report(name, false, "deploy/daemonset.yaml: the registrar's liveness probe is no longer httpGet /healthz; adapt test/node")
	}
	probeWindow := time.Duration(liveness.PeriodSeconds*liveness.FailureThreshold) * time.Second
	bound := mistypedUnhealthyAfter + probeWindow + mistypedSlack
	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	healthy, err := s.watchHealthy(watchCtx)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	began := time.Now()
	typoWatch, end, err := s.createOwn(ctx, "10", ds, mistypedDriver)
	defer end()
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	m, err := s.waitMistypedRestart(ctx, 2*bound+time.Minute)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	s.savePodLogs("10", mistypedDaemonSet) // the pod is deleted by the rolling update, and its logs with it
	var p problems
	m.check(s, bound, &p)
	for _, r := range typoWatch.Between(began, time.Now()) {
		p.want(!r.Registered, "CSINode listed %s at +%s, with the typo", mistypedDriver, ms(r.At.Sub(began)))
	}
	failed := m.describe(ctx, s, began, probeWindow)
	fixed, err := s.fixMistyped(ctx, typoWatch, &p)
	if err != nil {
		return s.report(name, false, "%s; the fix: %v", failed, err)
	}
	unchanged, drivers, err := healthy.since(ctx, s, began, &p)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	p.addErr(end())
	return s.report(name, len(p) == 0, "%s; %s; healthy drivers' containers unchanged: %d of %d, drivers in CSINode throughout: %v; %v (logs: _logs/pod-logs-10/)",
		failed, fixed, unchanged, len(healthy.pods), drivers, p)
}

func (m *mistypedRun) describe(ctx context.Context, s *suite, began time.Time, probeWindow time.Duration) string {
	st := containerStatus(m.pod, localnode.RegistrarName)
	term := st.LastTerminationState.Terminated
	toRestart := term.FinishedAt.Sub(m.failingSince)
	s.Timing("10. mistyped path: first rejection → registrar restarted by kubelet", toRestart)
	return fmt.Sprintf("kubelet %s; DaemonSet created → first rejection +%s → /healthz 503 %s after it (%q), %d rejections and %d publications again of the socket meanwhile → registrar terminated %s after it (bound: %s --unhealthy-after + %s liveness period x failureThreshold + %s slack), pod %s: restartCount %d, lastState.terminated exit code %d, reason %q, message %q; kubelet's event: %q",
		s.KubeletVersion, ms(m.failingSince.Sub(began)), ms(m.healthz503At.Sub(m.failingSince)), m.healthz503, m.attempts, m.republished, ms(toRestart), mistypedUnhealthyAfter, probeWindow, mistypedSlack,
		m.pod.Name, st.RestartCount, term.ExitCode, term.Reason, term.Message, s.lastEvent(ctx, m.pod.Name, "Unhealthy", "Liveness"))
}

type mistypedRun struct {
	failingSince, healthz503At time.Time
	healthz503, lastState      string
	attempts, republished      uint64
	pod                        *corev1.Pod
}

func (s *suite) waitMistypedRestart(ctx context.Context, timeout time.Duration) (*mistypedRun, error) {
	m := &mistypedRun{}
	port := revMistyped.port()
	err := localnode.WaitFor(ctx, "kubelet restarted the registrar", timeout, 250*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		pods, err := s.PodsOf(ctx, mistypedDaemonSet)
		if err != nil || len(pods) != 1 {
			return false, err
		}
		st := containerStatus(&pods[0], localnode.RegistrarName)
		if st == nil {
			return false, nil
		}
		if st.RestartCount >= 1 && st.LastTerminationState.Terminated != nil {
			m.pod = &pods[0]
			return true, nil
		}
		if st.RestartCount > 0 || st.State.Running == nil {
			return false, nil
		}
		if status, err := registrarStatus(port); err == nil {
			m.lastState = status.String()
			m.attempts = max(m.attempts, status.Attempts)
			m.republished = max(m.republished, status.Publications["retry"])
			if m.failingSince.IsZero() && status.FailingSince != nil {
				m.failingSince = *status.FailingSince
			}
		}
		if code, body := get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port)); code == http.StatusServiceUnavailable && m.healthz503At.IsZero() {
			m.healthz503At, m.healthz503 = time.Now(), body
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%v; the registrar's last /status: %s (%d rejections)", err, m.lastState, m.attempts)
	}
	return m, nil
}

func (m *mistypedRun) check(s *suite, bound time.Duration, p *problems) {
	term := containerStatus(m.pod, localnode.RegistrarName).LastTerminationState.Terminated
	p.want(!m.failingSince.IsZero(), "never saw failingSince in the first registrar's /status")
	toRestart := term.FinishedAt.Sub(m.failingSince)
	p.want(toRestart <= bound, "restarted %s after the first rejection, beyond the bound %s", ms(toRestart), bound)
	toUnhealthy := m.healthz503At.Sub(m.failingSince)
	p.want(!m.healthz503At.IsZero(), "never saw /healthz 503 before the restart")
	p.want(m.healthz503At.IsZero() || toUnhealthy >= mistypedUnhealthyAfter, "/healthz failed %s after the first rejection, before --unhealthy-after", ms(toUnhealthy))
	p.want(term.ExitCode == 1, "exit code %d, want 1", term.ExitCode)
	p.want(strings.Contains(term.Message, "kubelet rejected the plugin") && strings.Contains(term.Message, mistypedSocket),
		"the termination message lacks kubelet's rejection of %s", mistypedSocket)
	// Until the restart kubelet tries again: by itself on the same socket
	// (1.36 and later), or on the socket the registrar publishes again.
	p.want(m.attempts >= 2, "kubelet rejected the driver %d time(s) before the restart, want it to try again", m.attempts)
	s.checkRetries(m.republished, 1, p)
}

func (s *suite) fixMistyped(ctx context.Context, typoWatch *localnode.Watch, p *problems) (string, error) {
	want, err := s.mistypedDaemonSetFor(revMistypedFixed)
	if err != nil {
		return "", err
	}
	// kubelet retries a socket path that failed after a backoff that
	// doubles up to 2m2s (its operation executor's), also for the new
	// socket at that path.
	var states []string
	began := time.Now()
	r, err := s.roll(ctx, want, typoWatch, func() {
		if st, err := registrarStatus(revMistypedFixed.port()); err == nil {
			if n := len(states); n == 0 || !strings.HasPrefix(states[n-1], st.State+" ") {
				states = append(states, fmt.Sprintf("%s +%s", st.State, ms(time.Since(began))))
			}
		}
	})
	if err != nil {
		return "", fmt.Errorf("%v (the new registrar's states: %v)", err, states)
	}
	reg, _ := typoWatch.First(began, localnode.IsRegistered)
	tRegistered := reg.At.Sub(began)
	status, said := statusOf(revMistypedFixed.port())
	p.want(status != nil && status.State == "registered", "the new registrar's %s", said)
	deregistered := describeGaps(gaps(typoWatch, reg.At, time.Now()), began)
	p.want(!reg.At.IsZero() && len(deregistered) == 0, "%s left CSINode after the fix at %v", mistypedDriver, deregistered)
	final, _ := typoWatch.Now()
	p.want(final.Registered && final.NodeID == localnode.ExpectedNodeID, "at the end CSINode lists %s: %v, node ID %q", mistypedDriver, final.Registered, final.NodeID)
	restarts := r.restarted(r.newPod)
	p.want(len(restarts) == 0, "the fixed pod's containers restarted: %v", restarts)
	s.Timing("10. mistyped path: rolling update fixing it → driver in CSINode", tRegistered)
	return fmt.Sprintf("rolling update to .../%s → %s in CSINode with node ID %q +%s → new pod %s Ready +%s, its %s, old pod gone +%s; the new registrar's states: %v; deregistrations after that within %s: %d",
		localnode.DriverSocket, mistypedDriver, reg.NodeID, ms(tRegistered), r.newPod, ms(r.tNewReady), said, ms(r.tOldGone), states, rolloutSettle, len(deregistered)), nil
}
