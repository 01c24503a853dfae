package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// result is one line of the report.
type result struct {
	name    string
	ok      bool
	skipped bool // could not run; detail says why
	detail  string
}

// options are the command line's choices for the checks.
type options struct {
	// maxRolloutGap is the longest time without the driver in CSINode
	// that check 4a accepts; 0: none at all.
	maxRolloutGap time.Duration
	// upstreamMissing, when set, is why there is no image of upstream's
	// registrar: checks 4b and 4c are skipped with it as the reason.
	upstreamMissing string
	// failOnSkip makes a skipped check fail the run, as in CI.
	failOnSkip bool
	// only, when set, names the checks to run after check 1 (-checks,
	// E2E_NODE_CHECKS); nil: all.
	only map[string]bool
}

type suite struct {
	*cluster
	options
	repo    string
	watch   *csiNodeWatch
	results []result
	podName string // the current pod of the DaemonSet
}

func (s *suite) report(name string, ok bool, format string, args ...any) bool {
	s.results = append(s.results, result{name: name, ok: ok, detail: fmt.Sprintf(format, args...)})
	status := "PASS"
	if !ok {
		status = "FAIL"
	}
	fmt.Printf("e2e-node: %s %s: %s\n", status, name, fmt.Sprintf(format, args...))
	return ok
}

// failAll reports each of names failed, with one detail.
func (s *suite) failAll(names []string, format string, args ...any) bool {
	for _, name := range names {
		s.report(name, false, format, args...)
	}
	return false
}

// skipAll reports each of names skipped, for one reason.
func (s *suite) skipAll(names []string, reason string) bool {
	for _, name := range names {
		s.skip(name, reason)
	}
	return false
}

// skip reports a check that could not run, and why.
func (s *suite) skip(name, reason string) bool {
	s.results = append(s.results, result{name: name, skipped: true, detail: reason})
	fmt.Printf("e2e-node: SKIPPED %s: %s\n", name, reason)
	return false
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

var plainHTTP = &http.Client{Timeout: 2 * time.Second}

// get returns the status code and the first line of the body, or 0.
func get(url string) (int, string) {
	resp, err := plainHTTP.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	return resp.StatusCode, line
}

// podsOf lists the pods labelled app.kubernetes.io/name=app.
func (s *suite) podsOf(ctx context.Context, app string) ([]corev1.Pod, error) {
	list, err := s.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + app})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// waitPod waits until the pod name satisfies cond, and returns it as last
// read.
func (s *suite) waitPod(ctx context.Context, name, what string, timeout time.Duration, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := waitFor(ctx, what, timeout, 200*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		p, err := s.client.CoreV1().Pods(namespace).Get(ctx, name, getOpts)
		if err != nil {
			return false, err
		}
		pod = p
		return cond(p), nil
	})
	return pod, err
}

func containerStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == name {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (s *suite) regSocket() string {
	return s.path("kubelet", "plugins_registry", driverName+"-reg.sock")
}

// checkFirstRegistration creates the DaemonSet and follows its pod from
// creation to registration and readiness (checks 1 and, in part, 2).
func (s *suite) checkFirstRegistration(ctx context.Context) bool {
	const name1, name2 = "1. DaemonSet pod runs, kubelet registers the driver", "2a. readiness only after registration"
	if _, err := s.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return s.report(name1, false, "create namespace: %v", err)
	}
	// No serviceaccount controller runs: create the pods' account.
	if _, err := s.client.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		return s.report(name1, false, "create service account: %v", err)
	}
	ds, err := s.daemonSet(1)
	if err != nil {
		return s.report(name1, false, "%v", err)
	}
	f := &firstPod{began: time.Now(), readyz503: "never seen: registration came before the first /readyz poll"}
	if _, err := s.client.AppsV1().DaemonSets(namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		return s.report(name1, false, "create DaemonSet: %v", err)
	}
	err = waitFor(ctx, "a registered and ready pod", 4*time.Minute, 50*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		return s.observeFirstPod(ctx, f), nil
	})
	times := fmt.Sprintf("DaemonSet created, then pod created +%s, scheduled +%s, registrar running +%s, registered +%s (%s after the container started), pod Ready +%s",
		ms(f.tCreated), ms(f.tScheduled), ms(f.tRunning), ms(f.tRegistered), ms(f.tRegistered-f.tRunning), ms(f.tReady))
	if err != nil {
		return s.report(name1, false, "%v: %s (see logs/kubelet.log)", err, times)
	}
	reg, _ := s.watch.now()
	var annotation string
	ids := map[string]string{}
	node, err := s.client.CoreV1().Nodes().Get(ctx, nodeName, getOpts)
	if err == nil {
		annotation = node.Annotations["csi.volume.kubernetes.io/nodeid"]
		err = json.Unmarshal([]byte(annotation), &ids)
	}
	ok := reg.nodeID == expectedNodeID && err == nil && ids[driverName] == expectedNodeID
	s.report(name1, ok, "CSINode lists %s with node ID %q; Node annotation csi.volume.kubernetes.io/nodeid=%s (%v); %s",
		driverName, reg.nodeID, annotation, err, times)
	s.report(name2, len(f.violations) == 0, "violations: %d %v; /readyz before registration: 503 %q at +%s; registered +%s; kubelet marked the pod Ready +%s",
		len(f.violations), f.violations, f.readyz503, ms(f.tReadyz503), ms(f.tRegistered), ms(f.tReady))
	return ok
}

// firstPod is what check 1 saw of the first pod, from the DaemonSet's
// creation: when it was created, scheduled, running, registered and
// Ready, its first /readyz 503, and any readiness before registration.
type firstPod struct {
	began                                               time.Time
	tCreated, tScheduled, tRunning, tRegistered, tReady time.Duration
	tReadyz503                                          time.Duration
	readyz503                                           string
	violations                                          []string
}

// observeFirstPod reads the pod and /readyz before CSINode: if either says
// ready while CSINode, read afterwards, does not list the driver, readiness
// came before registration. It reports whether the pod is registered and
// Ready.
func (s *suite) observeFirstPod(ctx context.Context, f *firstPod) bool {
	pods, err := s.podsOf(ctx, "csi-node")
	code, body := get(fmt.Sprintf("http://127.0.0.1:%d/readyz", revision(1).port()))
	reg, _ := s.watch.now()
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
		st := containerStatus(pod, registrarName)
		setOnce(&f.tRunning, st != nil && st.State.Running != nil)
		if podReady(pod) && !reg.registered {
			f.violations = append(f.violations, fmt.Sprintf("pod Ready at %s before CSINode listed the driver", ms(since)))
		}
		setOnce(&f.tReady, podReady(pod))
	}
	if code == http.StatusOK && !reg.registered {
		f.violations = append(f.violations, fmt.Sprintf("/readyz 200 at %s before CSINode listed the driver", ms(since)))
	}
	if code == http.StatusServiceUnavailable && f.tReadyz503 == 0 {
		f.tReadyz503, f.readyz503 = since, body
	}
	setOnce(&f.tRegistered, reg.registered)
	return f.tRegistered != 0 && f.tReady != 0
}

// probeCounts reads kubelet's prober_probe_total for a container of each
// pod of the namespace: counts[pod]["Liveness/successful"] and so on.
// kubelet drops a pod's counts once the pod is gone.
func probeCounts(container string) (map[string]map[string]float64, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // kubelet's self-signed serving certificate
	}}
	resp, err := client.Get(fmt.Sprintf("https://%s:10250/metrics/probes", nodeIP))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("kubelet /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("kubelet /metrics/probes: %w", err)
	}
	counts := map[string]map[string]float64{}
	for _, m := range families["prober_probe_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["namespace"] != namespace || labels["container"] != container {
			continue
		}
		pod := labels["pod"]
		if counts[pod] == nil {
			counts[pod] = map[string]float64{}
		}
		counts[pod][labels["probe_type"]+"/"+labels["result"]] += m.GetCounter().GetValue()
	}
	return counts, nil
}

// waitProbes waits up to 2m for kubelet's probe counts of a pod's container
// to satisfy cond, and returns them.
func waitProbes(ctx context.Context, what, container, pod string, cond func(map[string]float64) bool) (map[string]float64, error) {
	var counts map[string]float64
	err := waitFor(ctx, what, 2*time.Minute, time.Second, nil, func(context.Context) (bool, error) {
		all, err := probeCounts(container)
		counts = all[pod]
		return err == nil && cond(counts), err
	})
	return counts, err
}

// checkProbes waits until kubelet has run each of the registrar's probes
// and checks that none failed, except readiness before registration.
func (s *suite) checkProbes(ctx context.Context) bool {
	const name = "2b. kubelet's probes pass (exec startup, liveness /healthz, readiness /readyz)"
	counts, err := waitProbes(ctx, "kubelet ran the liveness probe", registrarName, s.podName, func(counts map[string]float64) bool {
		return counts["Liveness/successful"] >= 1 && counts["Readiness/successful"] >= 1
	})
	if err != nil {
		return s.report(name, false, "%v; counts %v", err, counts)
	}
	pod, err := s.client.CoreV1().Pods(namespace).Get(ctx, s.podName, getOpts)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	st := containerStatus(pod, registrarName)
	if st == nil {
		return s.report(name, false, "pod %s has no status of container %s", s.podName, registrarName)
	}
	ok := counts["Startup/successful"] >= 1 && counts["Startup/failed"] == 0 &&
		counts["Liveness/failed"] == 0 && counts["Readiness/successful"] >= 1 &&
		st.RestartCount == 0 && st.Started != nil && *st.Started
	return s.report(name, ok, "kubelet prober_probe_total for %s/%s: %s (startup: exec --mode=kubelet-registration-probe); restartCount %d",
		s.podName, registrarName, describeProbes(counts), st.RestartCount)
}

// describeProbes tells kubelet's probe counts of a container.
func describeProbes(counts map[string]float64) string {
	return fmt.Sprintf("startup %v ok / %v failed, liveness %v ok / %v failed, readiness %v ok / %v failed",
		counts["Startup/successful"], counts["Startup/failed"], counts["Liveness/successful"], counts["Liveness/failed"],
		counts["Readiness/successful"], counts["Readiness/failed"])
}

// checkSocketDeleted removes the registration socket on the host and waits
// for the running registrar to publish it again and kubelet to register it.
func (s *suite) checkSocketDeleted(ctx context.Context) bool {
	const name = "5. registration socket deleted on the host: registered again, no restart"
	before, err := s.client.CoreV1().Pods(namespace).Get(ctx, s.podName, getOpts)
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
	err = waitFor(ctx, "socket back, kubelet registered it, /readyz 200", time.Minute, 20*time.Millisecond, nil, func(context.Context) (bool, error) {
		if tSocket == 0 && dialable(s.regSocket()) {
			tSocket = time.Since(began)
		}
		code, _ := get(readyz)
		reg, _ := s.watch.now()
		return tSocket != 0 && code == http.StatusOK && reg.registered, nil
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
	if seen := s.watch.between(began, time.Now()); len(seen) > 0 {
		changes = nil
		for _, r := range seen {
			changes = append(changes, fmt.Sprintf("+%s registered=%v", ms(r.at.Sub(began)), r.registered))
		}
	}
	published := metricLine(fmt.Sprintf("http://127.0.0.1:%d/metrics", revision(1).port()), `csi_node_driver_registrar_socket_publications_total{reason="deleted"}`)
	return s.report(name, len(restarts) == 0, "socket re-created +%s, /readyz 200 and CSINode listing the driver +%s; CSINode changes seen: %s; containers restarted or replaced: %v; registrar metric %s",
		ms(tSocket), ms(took), strings.Join(changes, ", "), restarts, published)
}

// rollout is what a rolling update of the DaemonSet did, followed from the
// update until a few seconds after the old pod's object was gone.
type rollout struct {
	began, end                        time.Time
	oldPod, newPod                    string
	from                              revision // the old pod's
	tNewReady, tOldDeleting, tOldGone time.Duration
	writes                            int   // CSINode changes recorded
	gaps                              []gap // times CSINode did not list the driver
	watchRestarted                    bool
	restarts                          map[string]int32 // the highest restartCount seen, by pod/container
}

// gap is a time CSINode did not list the driver; open if it still did not
// at the end of the rollout.
type gap struct {
	from, to time.Time
	open     bool
}

// rolloutSettle is how long a rollout is watched after the old pod's object
// is gone, in case kubelet reacts late to what the old pod left.
const rolloutSettle = 5 * time.Second

// rollUpdate rolls deploy/'s DaemonSet, with the driver registered, to
// next's template (roll), and makes the new pod the current one.
func (s *suite) rollUpdate(ctx context.Context, next revision) (*rollout, error) {
	want, err := s.daemonSet(next)
	if err != nil {
		return nil, err
	}
	if !s.watch.stateAt(time.Now()).registered {
		return nil, fmt.Errorf("the driver was not registered before the update")
	}
	r, err := s.roll(ctx, want, s.watch, nil)
	if err == nil {
		s.podName = r.newPod
	}
	return r, err
}

// roll gives the DaemonSet want names want's template and follows the
// maxSurge update until it is done, then for rolloutSettle, recording
// watch's changes and the pods' restarts; poll runs at each poll, if set.
func (s *suite) roll(ctx context.Context, want *appsv1.DaemonSet, watch *csiNodeWatch, poll func()) (*rollout, error) {
	ds, err := s.client.AppsV1().DaemonSets(namespace).Get(ctx, want.Name, getOpts)
	if err != nil {
		return nil, err
	}
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 1 || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		return nil, fmt.Errorf("deploy/daemonset.yaml no longer has maxSurge 1, maxUnavailable 0: %+v", ds.Spec.UpdateStrategy)
	}
	app := ds.Spec.Selector.MatchLabels["app.kubernetes.io/name"]
	pods, err := s.podsOf(ctx, app)
	if err != nil || len(pods) != 1 {
		return nil, fmt.Errorf("want one pod of %s before the update, have %d (%v)", want.Name, len(pods), err)
	}
	next := want.Spec.Template.Annotations[revisionKey]
	r := &rollout{oldPod: pods[0].Name, restarts: map[string]int32{}, began: time.Now()}
	fmt.Sscan(pods[0].Annotations[revisionKey], &r.from)
	watchRestarts := watch.restarts()
	updated, err := s.setTemplate(ctx, want.Name, want.Spec.Template)
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	err = waitFor(ctx, "rollout done (new pod Ready, old pod gone)", 4*time.Minute, 100*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		if poll != nil {
			poll()
		}
		return s.observeRollout(ctx, r, app, next, updated)
	})
	if err != nil {
		return nil, fmt.Errorf("%v (new pod %q ready +%s, old pod gone +%s)", err, r.newPod, ms(r.tNewReady), ms(r.tOldGone))
	}
	// The old pod's object is deleted only after its containers stopped, so
	// the old registrar has exited; kubelet may still react late to what it left.
	time.Sleep(rolloutSettle)
	r.end = time.Now()
	if pod, err := s.client.CoreV1().Pods(namespace).Get(ctx, r.newPod, getOpts); err == nil {
		r.recordRestarts(pod)
	}
	r.writes = len(watch.between(r.began, r.end))
	r.gaps = watch.gaps(r.began, r.end)
	r.watchRestarted = watch.restarts() != watchRestarts
	return r, nil
}

// observeRollout reads the pods of the DaemonSet updated, labelled app,
// and records when the new pod of revision next was Ready and the old one
// deleted and gone; it reports whether the DaemonSet's status says the
// rollout is done.
func (s *suite) observeRollout(ctx context.Context, r *rollout, app, next string, updated *appsv1.DaemonSet) (bool, error) {
	pods, err := s.podsOf(ctx, app)
	if err != nil {
		return false, err
	}
	oldSeen := false
	for i := range pods {
		pod := &pods[i]
		r.recordRestarts(pod)
		if pod.Name == r.oldPod {
			oldSeen = true
			if r.tOldDeleting == 0 && pod.DeletionTimestamp != nil {
				r.tOldDeleting = time.Since(r.began)
			}
		} else if pod.Annotations[revisionKey] == next {
			r.newPod = pod.Name
			if r.tNewReady == 0 && podReady(pod) {
				r.tNewReady = time.Since(r.began)
			}
		}
	}
	if !oldSeen && r.tOldGone == 0 {
		r.tOldGone = time.Since(r.began)
	}
	current, err := s.client.AppsV1().DaemonSets(namespace).Get(ctx, updated.Name, getOpts)
	if err != nil {
		return false, err
	}
	st := current.Status
	done := st.ObservedGeneration >= updated.Generation && st.UpdatedNumberScheduled == 1 && st.NumberAvailable == 1 && st.NumberUnavailable == 0
	return done && r.tNewReady != 0 && r.tOldGone != 0, nil
}

func (r *rollout) recordRestarts(pod *corev1.Pod) {
	for _, st := range pod.Status.ContainerStatuses {
		key := pod.Name + "/" + st.Name
		r.restarts[key] = max(r.restarts[key], st.RestartCount)
	}
}

// restarted lists the containers that restarted, with their counts: of
// the pods named, or all.
func (r *rollout) restarted(pods ...string) []string {
	var out []string
	for container, n := range r.restarts {
		pod, _, _ := strings.Cut(container, "/")
		if n > 0 && (len(pods) == 0 || slices.Contains(pods, pod)) {
			out = append(out, fmt.Sprintf("%s: %d", container, n))
		}
	}
	slices.Sort(out)
	return out
}

// describeGaps gives each gap's start from the update, its length and its
// cause. One that begins before the old pod's deletion comes from the new
// pod's socket replacing the old one: kubelet v1.37 then unregisters the
// plugin and registers it again one reconcile period (1 s) later.
func (r *rollout) describeGaps() []string {
	out := describeGaps(r.gaps, r.began)
	for i, g := range r.gaps {
		cause := "after the old pod's deletion began"
		if r.tOldDeleting == 0 || g.from.Sub(r.began) < r.tOldDeleting {
			cause = "before the old pod's deletion: kubelet re-registering the replaced socket"
		}
		out[i] += " (" + cause + ")"
	}
	return out
}

// describeGaps gives each gap's start from began and its length.
func describeGaps(gaps []gap, began time.Time) []string {
	var out []string
	for _, g := range gaps {
		if g.open {
			out = append(out, fmt.Sprintf("+%s, still at the end", ms(g.from.Sub(began))))
		} else {
			out = append(out, fmt.Sprintf("+%s for %s", ms(g.from.Sub(began)), ms(g.to.Sub(g.from))))
		}
	}
	return out
}

// longestGap is the longest gap; an open one counts as endless.
func (r *rollout) longestGap() time.Duration {
	var longest time.Duration
	for _, g := range r.gaps {
		if g.open {
			return time.Duration(math.MaxInt64)
		}
		longest = max(longest, g.to.Sub(g.from))
	}
	return longest
}

func (r *rollout) String() string {
	return fmt.Sprintf("update → new pod %s Ready +%s → old pod %s deleted +%s, gone +%s; CSINode watched throughout (%d changes, watch restarted: %v)",
		r.newPod, ms(r.tNewReady), r.oldPod, ms(r.tOldDeleting), ms(r.tOldGone), r.writes, r.watchRestarted)
}

// checkRollingUpdate changes the template and follows the maxSurge update,
// checking from the CSINode watch that the driver never left it.
func (s *suite) checkRollingUpdate(ctx context.Context) bool {
	name := "4a. rolling update (maxSurge 1, maxUnavailable 0): registered throughout"
	if s.maxRolloutGap > 0 {
		name = fmt.Sprintf("4a. rolling update (maxSurge 1, maxUnavailable 0): never unregistered longer than %s (E2E_NODE_MAX_ROLLOUT_GAP)", s.maxRolloutGap)
	}
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

// settled says how the node was rolloutSettle after the rollout r of
// csi-node, and whether as it should: the driver in CSINode with the
// expected node ID, the watch never restarted, the socket dialable.
func (s *suite) settled(r *rollout) (string, bool) {
	final, _ := s.watch.now()
	socket := dialable(s.regSocket())
	return fmt.Sprintf("%s after: registered=%v with node ID %q, socket dialable %v", rolloutSettle, final.registered, final.nodeID, socket),
		final.registered && final.nodeID == expectedNodeID && !r.watchRestarted && socket
}

// The bounds of checks 4b and 4c: between upstream's registrar and this
// one the socket cannot be handed over, and kubelet registers the driver
// again a reconcile pass after it unregistered it.
const (
	maxUpstreamDeregistrations = 1
	maxUpstreamGap             = 2 * time.Second
)

// checkRollbackToUpstream rolls a DaemonSet of this registrar to upstream's
// image. Check 3 deleted the DaemonSet: it is created again first.
func (s *suite) checkRollbackToUpstream(ctx context.Context) bool {
	const name = "4b. rollback to upstream's image (maxSurge 1): at most one deregistration, of at most 2s; no container restart"
	if s.upstreamMissing != "" {
		return s.skip(name, s.upstreamMissing)
	}
	if err := s.redeploy(ctx, revOurs); err != nil {
		return s.report(name, false, "no registered DaemonSet of this registrar to start from: %v", err)
	}
	return s.checkUpstreamRollout(ctx, name, revUpstream)
}

// checkUpgradeFromUpstream rolls the DaemonSet of upstream's image, which
// check 4b left, back to this registrar's.
func (s *suite) checkUpgradeFromUpstream(ctx context.Context) bool {
	const name = "4c. upgrade from upstream's image (maxSurge 1): at most one deregistration, of at most 2s; no container restart"
	if s.upstreamMissing != "" {
		return s.skip(name, s.upstreamMissing)
	}
	return s.checkUpstreamRollout(ctx, name, revOursAgain)
}

// redeploy brings deploy/'s DaemonSet to rev (deploy), and makes its pod
// the current one.
func (s *suite) redeploy(ctx context.Context, rev revision) error {
	want, err := s.daemonSet(rev)
	if err != nil {
		return err
	}
	pod, _, err := s.deploy(ctx, want, s.watch)
	if err == nil {
		s.podName = pod.Name
	}
	return err
}

// checkUpstreamRollout rolls the DaemonSet to next, from this registrar to
// upstream's or back, and checks the bounds above, that no container
// restarted, and that the new pod's registrar serves the socket.
func (s *suite) checkUpstreamRollout(ctx context.Context, name string, next revision) bool {
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

// servingRegistrar asks the registrar of rev whether it serves the
// registration socket: upstream's /healthz (200 when the socket at the path
// answers GetInfo for the driver; once the old pod is gone only upstream's
// can), or this registrar's /status.
func (s *suite) servingRegistrar(rev revision) (string, bool) {
	if rev.upstream() {
		code, body := get(fmt.Sprintf("http://127.0.0.1:%d/healthz", rev.port()))
		return fmt.Sprintf("upstream's /healthz %d %q", code, body), code == http.StatusOK
	}
	status, said := statusOf(rev.port())
	return said, status != nil && status.State == "registered"
}

// registrarState is the part of this registrar's /status the checks read.
type registrarState struct {
	State        string            `json:"state"`
	Reason       string            `json:"reason"`
	Publications map[string]uint64 `json:"socketPublications"`
	KubeletCalls struct {
		GetInfo        uint64 `json:"getInfo"`
		NotifyRejected uint64 `json:"notifyRejected"`
	} `json:"kubeletCalls"`
	// Attempts and FailingSince: kubelet's rejections since it last
	// accepted the driver, and when the registration started to fail.
	Attempts     uint64     `json:"attempts"`
	FailingSince *time.Time `json:"failingSince"`
}

func registrarStatus(port int32) (*registrarState, error) {
	resp, err := plainHTTP.Get(fmt.Sprintf("http://127.0.0.1:%d/status", port))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	status := &registrarState{}
	if err := json.NewDecoder(resp.Body).Decode(status); err != nil {
		return nil, err
	}
	return status, nil
}

// statusOf reads this registrar's /status on port: nil and why if it
// cannot, and what it says.
func statusOf(port int32) (*registrarState, string) {
	status, err := registrarStatus(port)
	if err != nil {
		return nil, "/status: " + err.Error()
	}
	return status, status.String()
}

func (st *registrarState) String() string {
	state := fmt.Sprintf("%q", st.State)
	if st.Reason != st.State {
		state += fmt.Sprintf(" (%s)", st.Reason)
	}
	return fmt.Sprintf("/status state %s, socket publications %v", state, st.Publications)
}

// checkPodDeleted deletes the DaemonSet, leaving its pod (the garbage
// collector orphans it), then deletes the pod itself.
func (s *suite) checkPodDeleted(ctx context.Context) bool {
	const name = "3. pod deleted: driver deregistered, no socket left"
	orphan := metav1.DeletePropagationOrphan
	if err := s.client.AppsV1().DaemonSets(namespace).Delete(ctx, "csi-node", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		return s.report(name, false, "delete DaemonSet: %v", err)
	}
	if err := waitFor(ctx, "DaemonSet gone, pod orphaned", time.Minute, 200*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		_, err := s.client.AppsV1().DaemonSets(namespace).Get(ctx, "csi-node", getOpts)
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		return s.report(name, false, "%v", err)
	}
	if !s.watch.stateAt(time.Now()).registered {
		return s.report(name, false, "the driver was not registered before the pod was deleted")
	}
	began := time.Now()
	if err := s.client.CoreV1().Pods(namespace).Delete(ctx, s.podName, metav1.DeleteOptions{}); err != nil {
		return s.report(name, false, "delete pod: %v", err)
	}
	reg, ok := s.watch.waitUntil(ctx, time.Minute, func(r registration) bool { return !r.registered })
	if !ok {
		return s.report(name, false, "CSINode still lists the driver 1m after the pod's deletion")
	}
	tDeregistered := reg.at.Sub(began)
	err := waitFor(ctx, "pod object gone", 2*time.Minute, 200*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		pods, err := s.podsOf(ctx, "csi-node")
		return err == nil && len(pods) == 0, err
	})
	tGone := time.Since(began)
	if err != nil {
		return s.report(name, false, "deregistered +%s, but %v", ms(tDeregistered), err)
	}
	names, driverFiles := dirNames(s.path("kubelet", "plugins_registry")), dirNames(s.path("kubelet", "plugins", driverName))
	final, _ := s.watch.now()
	ok = len(names) == 0 && !final.registered
	return s.report(name, ok, "pod deleted → CSINode without the driver +%s → pod object gone +%s; plugins_registry holds %d entries %v; driver socket directory holds %v",
		ms(tDeregistered), ms(tGone), len(names), names, driverFiles)
}

// dirNames lists the names in a directory.
func dirNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// metricLine returns the line of a Prometheus text page that starts with
// prefix, or why there is none.
func metricLine(url, prefix string) string {
	resp, err := plainHTTP.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	scanner := bufio.NewScanner(resp.Body)
	for scanner.Scan() {
		if strings.HasPrefix(scanner.Text(), prefix) {
			return scanner.Text()
		}
	}
	return prefix + " missing"
}
