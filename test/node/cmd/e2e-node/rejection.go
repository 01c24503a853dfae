package main

// Check 12 (issue 34): kubelet rejects the driver N times (the test
// driver's NodeGetInfo fails N times), then accepts it. Whatever kubelet's
// version, the driver must stay in CSINode once kubelet has accepted it:
// a socket published again while kubelet 1.36+ retries by itself would be
// a new socket under the accepted one's name, and kubelet would deregister
// the driver a second later. What the registrar does meanwhile depends on
// kubelet's version (docs/compatibility.md): kubelet 1.36 and later try
// again by itself on the same socket, and the registrar leaves it alone;
// older ones try again only on a socket created again, which the registrar
// publishes. The check expects the behaviour of the kubelet the node runs,
// and reports how long the recovery took, N = 1 and N = 3.

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	rejectedDaemonSet = "csi-rejected"
	// revRejected: HTTP port 9858.
	revRejected revision = 50
	// rejectedSettle is how long the driver must stay in CSINode after
	// kubelet accepted it: longer than the registrar's first backoff
	// before it publishes again (1 s, or kubelet's backoff plus 2 s),
	// and than kubelet's reconcile period (1 s) after that.
	rejectedSettle = 10 * time.Second
)

// checkRejectedThenAccepted runs check 12 with one rejection, then three.
func (s *suite) checkRejectedThenAccepted(ctx context.Context) bool {
	ok := s.checkRejections(ctx, "12a", 1)
	return s.checkRejections(ctx, "12b", 3) && ok
}

func (s *suite) checkRejections(ctx context.Context, id string, n int) bool {
	driver := fmt.Sprintf("rejected-%d.csi.example.com", n)
	expect := "the registrar publishes its socket again after each rejection (kubelet before 1.36 tries again only on a new socket)"
	if s.kubeletRetries() {
		expect = "the registrar leaves its socket alone (kubelet 1.36 and later tries again by itself)"
	}
	name := fmt.Sprintf("%s. kubelet %s rejects the driver %d time(s), then accepts it: %s; the driver stays in CSINode for %s after the acceptance",
		id, s.kubeletVersion, n, expect, rejectedSettle)
	if n == 3 {
		name += "; with --events the Pod shows one Warning Event with count 3, then a Normal one"
	}
	// Three rejections also show as one Event with a count (--events).
	events := n == 3
	ds, err := s.ownDaemonSet(revRejected, own{name: rejectedDaemonSet, driver: driver, keepProbes: true, events: events,
		driverArgs: []string{fmt.Sprintf("--fail-node-get-info-calls=%d", n)}})
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	if events {
		if err := s.applyManifests(ctx, nil, s.deployFile("csinode/service-account/service-account.yaml"), s.deployFile("events/rbac.yaml")); err != nil {
			return s.report(name, false, "%v", err)
		}
	}
	watch, stopWatch := s.startWatch(ctx, driver)
	defer stopWatch()

	began := time.Now()
	if _, err := s.client.AppsV1().DaemonSets(namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		return s.report(name, false, "create DaemonSet: %v", err)
	}
	var problems []string
	defer func() {
		if err := s.removeDaemonSet(ctx, rejectedDaemonSet, driver); err != nil {
			fmt.Printf("e2e-node: check %s: %v\n", id, err)
		}
	}()

	// The registrar's /status until CSINode lists the driver: when the
	// first rejection came (failingSince; reset once kubelet accepts).
	var failingSince time.Time
	port := revRejected.port()
	err = waitFor(ctx, driver+" in CSINode", 2*time.Minute, 100*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		if st, err := registrarStatus(port); err == nil && failingSince.IsZero() && st.FailingSince != nil {
			failingSince = *st.FailingSince
		}
		reg, _ := watch.now()
		return reg.registered, nil
	})
	if err != nil {
		st, _ := registrarStatus(port)
		return s.report(name, false, "%v; the registrar's /status: %v", err, st)
	}
	first, _ := watch.first(began, isRegistered)
	accepted := first.at
	time.Sleep(rejectedSettle)
	gaps := watch.gaps(accepted, time.Now())
	for _, g := range gaps {
		problems = append(problems, fmt.Sprintf("%s left CSINode %s after the acceptance", driver, ms(g.from.Sub(accepted))))
	}
	st, err := registrarStatus(port)
	if err != nil {
		return s.report(name, false, "the registrar's /status after the acceptance: %v", err)
	}
	problems = append(problems, s.acceptedProblems(st, n)...)
	pods, err := s.podsOf(ctx, rejectedDaemonSet)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	eventsSeen := "not recorded (--events only with 3 rejections)"
	for _, pod := range pods {
		if restarts, _ := s.restarted(ctx, &pod); len(restarts) > 0 {
			problems = append(problems, fmt.Sprintf("containers of %s restarted: %v", pod.Name, restarts))
		}
		if events {
			var p []string
			p, eventsSeen = s.checkEvents(ctx, pod, n)
			problems = append(problems, p...)
		}
	}
	recovery := "unknown (never saw failingSince in the registrar's /status)"
	if failingSince.IsZero() {
		problems = append(problems, "never saw failingSince in the registrar's /status before the acceptance")
	} else {
		recovery = ms(accepted.Sub(failingSince))
		s.timing(fmt.Sprintf("%s. %d rejection(s): first rejection → driver in CSINode", id, n), accepted.Sub(failingSince))
	}
	return s.report(name, len(problems) == 0, "DaemonSet created → driver in CSINode +%s, %s after the first rejection; kubelet's GetInfo calls %d, rejections %d; %s; deregistrations within %s after the acceptance: %d; the Pod's Events: %s; problems: %d %v",
		ms(accepted.Sub(began)), recovery, st.KubeletCalls.GetInfo, st.KubeletCalls.NotifyRejected, st, rejectedSettle,
		len(gaps), eventsSeen, len(problems), problems)
}

// acceptedProblems checks the registrar's /status once kubelet accepted
// the driver it rejected n times.
func (s *suite) acceptedProblems(st *registrarState, n int) []string {
	var problems []string
	if st.State != "registered" {
		problems = append(problems, fmt.Sprintf("the registrar's state is %q, want registered", st.State))
	}
	if got := st.KubeletCalls.NotifyRejected; got != uint64(n) {
		problems = append(problems, fmt.Sprintf("kubelet rejected the driver %d times, want %d", got, n))
	}
	if p := s.retryProblem(st.Publications["retry"], uint64(n)); p != "" {
		problems = append(problems, p)
	}
	return problems
}

// retryProblem says what is wrong with the registrar's publications of its
// socket again after rejections, for kubelet's version: there must be none
// where kubelet tries again by itself, at least atLeast where it tries again
// only on a new socket.
func (s *suite) retryProblem(republished, atLeast uint64) string {
	switch {
	case s.kubeletRetries() && republished != 0:
		return fmt.Sprintf("the registrar published its socket again %d times while kubelet %s tries again by itself", republished, s.kubeletVersion)
	case !s.kubeletRetries() && republished < atLeast:
		return fmt.Sprintf("the registrar published its socket again %d times; kubelet %s tries again only on a new socket, so want at least %d", republished, s.kubeletVersion, atLeast)
	}
	return ""
}
