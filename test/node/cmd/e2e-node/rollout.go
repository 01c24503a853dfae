package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/csi-registrar/node-driver-registrar/test/node/localnode"
)

// rollout is what a maxSurge rolling update of a DaemonSet did.
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

// gap is a time CSINode did not list the driver.
type gap struct {
	from, to time.Time
	open     bool
}

func gaps(w *localnode.Watch, from, to time.Time) []gap {
	var gaps []gap
	var down time.Time
	for _, r := range w.Between(from, to) {
		switch {
		case !r.Registered && down.IsZero():
			down = r.At
		case r.Registered && !down.IsZero():
			gaps = append(gaps, gap{from: down, to: r.At})
			down = time.Time{}
		}
	}
	if !down.IsZero() {
		gaps = append(gaps, gap{from: down, to: to, open: true})
	}
	return gaps
}

// rolloutSettle: kubelet may react late to what the old pod left.
const rolloutSettle = 5 * time.Second

func (s *suite) rollUpdate(ctx context.Context, next revision) (*rollout, error) {
	want, err := s.daemonSet(next)
	if err != nil {
		return nil, err
	}
	if reg, _ := s.watch.Now(); !reg.Registered {
		return nil, fmt.Errorf("the driver was not registered before the update")
	}
	r, err := s.roll(ctx, want, s.watch, nil)
	if err == nil {
		s.podName = r.newPod
	}
	return r, err
}

// roll gives the DaemonSet want's template and follows the update until
// rolloutSettle after it is done; poll, if set, runs at each poll.
func (s *suite) roll(ctx context.Context, want *appsv1.DaemonSet, watch *localnode.Watch, poll func()) (*rollout, error) {
	ds, err := s.Client.AppsV1().DaemonSets(localnode.Namespace).Get(ctx, want.Name, getOpts)
	if err != nil {
		return nil, err
	}
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 1 || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		return nil, fmt.Errorf("deploy/daemonset.yaml no longer has maxSurge 1, maxUnavailable 0: %+v", ds.Spec.UpdateStrategy)
	}
	app := ds.Spec.Selector.MatchLabels["app.kubernetes.io/name"]
	pods, err := s.PodsOf(ctx, app)
	if err != nil || len(pods) != 1 {
		return nil, fmt.Errorf("want one pod of %s before the update, have %d (%v)", want.Name, len(pods), err)
	}
	next := want.Spec.Template.Annotations[localnode.RevisionKey]
	r := &rollout{oldPod: pods[0].Name, restarts: map[string]int32{}, began: time.Now()}
	fmt.Sscan(pods[0].Annotations[localnode.RevisionKey], &r.from)
	watchRestarts := watch.Restarts()
	updated, err := s.SetTemplate(ctx, want.Name, want.Spec.Template)
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	err = localnode.WaitFor(ctx, "rollout done (new pod Ready, old pod gone)", 4*time.Minute, 100*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		if poll != nil {
			poll()
		}
		return s.observeRollout(ctx, r, app, next, updated)
	})
	if err != nil {
		return nil, fmt.Errorf("%v (new pod %q ready +%s, old pod gone +%s)", err, r.newPod, ms(r.tNewReady), ms(r.tOldGone))
	}
	time.Sleep(rolloutSettle)
	r.end = time.Now()
	if pod, err := s.Client.CoreV1().Pods(localnode.Namespace).Get(ctx, r.newPod, getOpts); err == nil {
		r.recordRestarts(pod)
	}
	r.writes = len(watch.Between(r.began, r.end))
	r.gaps = gaps(watch, r.began, r.end)
	r.watchRestarted = watch.Restarts() != watchRestarts
	return r, nil
}

func (s *suite) observeRollout(ctx context.Context, r *rollout, app, next string, updated *appsv1.DaemonSet) (bool, error) {
	pods, err := s.PodsOf(ctx, app)
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
		} else if pod.Annotations[localnode.RevisionKey] == next {
			r.newPod = pod.Name
			if r.tNewReady == 0 && localnode.PodReady(pod) {
				r.tNewReady = time.Since(r.began)
			}
		}
	}
	if !oldSeen && r.tOldGone == 0 {
		r.tOldGone = time.Since(r.began)
	}
	current, err := s.Client.AppsV1().DaemonSets(localnode.Namespace).Get(ctx, updated.Name, getOpts)
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

// describeGaps: a gap that begins before the old pod's deletion comes from
// the new pod's socket replacing the old one: kubelet v1.37 then
// unregisters the plugin and registers it again a reconcile period later.
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

func (s *suite) settled(r *rollout) (string, bool) {
	final, _ := s.watch.Now()
	socket := dialable(s.regSocket())
	return fmt.Sprintf("%s after: registered=%v with node ID %q, socket dialable %v", rolloutSettle, final.Registered, final.NodeID, socket),
		final.Registered && final.NodeID == localnode.ExpectedNodeID && !r.watchRestarted && socket
}

func (s *suite) redeploy(ctx context.Context, rev revision) error {
	want, err := s.daemonSet(rev)
	if err != nil {
		return err
	}
	pod, _, err := s.Deploy(ctx, want, s.watch)
	if err == nil {
		s.podName = pod.Name
	}
	return err
}
