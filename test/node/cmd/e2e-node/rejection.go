package main

// Check 12 (issues 34, 46): kubelet rejects the driver N times, then
// accepts it. A socket published again while kubelet 1.36+ retries by
// itself would be a new socket under the accepted one's name, which kubelet
// would deregister a second later: the check expects what the registrar
// does for the kubelet the node runs (docs/compatibility.md).

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/csi-registrar/node-driver-registrar/test/node/localnode"
)

const (
	rejectedDaemonSet          = "csi-rejected"
	revRejected       revision = 50
	// longer than the registrar's first backoff before it publishes again
	// (1 s, or kubelet's backoff plus 2 s), and kubelet's reconcile period
	// (1 s) after that
	rejectedSettle = 10 * time.Second
)

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
		id, s.KubeletVersion, n, expect, rejectedSettle)
	// Three rejections also show as one Event with a count (--events).
	events := n == 3
	if events {
		name += "; with --events the Pod shows one Warning Event with count 3, then a Normal one"
	}
	ds, err := s.ownDaemonSet(revRejected, own{events: events, Own: localnode.Own{Name: rejectedDaemonSet, Driver: driver, KeepProbes: true,
		DriverArgs: []string{fmt.Sprintf("--fail-node-get-info-calls=%d", n)}}})
	if err == nil && events {
		err = s.ApplyManifests(ctx, nil, s.DeployFile("csinode/service-account/service-account.yaml"), s.DeployFile("events/rbac.yaml"))
	}
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	began := time.Now()
	watch, end, err := s.createOwn(ctx, id, ds, driver)
	defer end()
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	failingSince, err := waitAccepted(ctx, watch, revRejected.port())
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	first, _ := watch.First(began, localnode.IsRegistered)
	accepted := first.At
	time.Sleep(rejectedSettle)
	gaps := gaps(watch, accepted, time.Now())
	st, err := registrarStatus(revRejected.port())
	if err != nil {
		return s.report(name, false, "the registrar's /status after the acceptance: %v", err)
	}
	var p problems
	p.want(st.State == "registered", "the registrar's state is %q, want registered", st.State)
	p.want(st.KubeletCalls.NotifyRejected == uint64(n), "kubelet rejected the driver %d times, want %d", st.KubeletCalls.NotifyRejected, n)
	s.checkRetries(st.Publications["retry"], uint64(n), &p)
	for _, g := range describeGaps(gaps, accepted) {
		p.add("%s left CSINode after the acceptance at %s", driver, g)
	}
	eventsSeen, err := s.rejectedPods(ctx, n, events, &p)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	recovery := "unknown (never saw failingSince in the registrar's /status)"
	p.want(!failingSince.IsZero(), "never saw failingSince in the registrar's /status before the acceptance")
	if !failingSince.IsZero() {
		recovery = ms(accepted.Sub(failingSince))
		s.Timing(fmt.Sprintf("%s. %d rejection(s): first rejection → driver in CSINode", id, n), accepted.Sub(failingSince))
	}
	return s.report(name, len(p) == 0, "DaemonSet created → driver in CSINode +%s, %s after the first rejection; kubelet's GetInfo calls %d, rejections %d; %s; deregistrations within %s after the acceptance: %d; the Pod's Events: %s; %v",
		ms(accepted.Sub(began)), recovery, st.KubeletCalls.GetInfo, st.KubeletCalls.NotifyRejected, st, rejectedSettle,
		len(gaps), eventsSeen, p)
}

// waitAccepted returns /status's failingSince, which the registrar resets
// once kubelet accepts.
func waitAccepted(ctx context.Context, watch *localnode.Watch, port int32) (time.Time, error) {
	var failingSince time.Time
	err := localnode.WaitFor(ctx, watch.Driver+" in CSINode", 2*time.Minute, 100*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		if st, err := registrarStatus(port); err == nil && failingSince.IsZero() && st.FailingSince != nil {
			failingSince = *st.FailingSince
		}
		reg, _ := watch.Now()
		return reg.Registered, nil
	})
	if err != nil {
		_, said := statusOf(port)
		return failingSince, fmt.Errorf("%v; the registrar's %s", err, said)
	}
	return failingSince, nil
}

func (s *suite) rejectedPods(ctx context.Context, n int, events bool, p *problems) (string, error) {
	pods, err := s.PodsOf(ctx, rejectedDaemonSet)
	if err != nil {
		return "", err
	}
	seen := "not recorded (--events only with 3 rejections)"
	for _, pod := range pods {
		restarts, _ := s.restarted(ctx, &pod)
		p.want(len(restarts) == 0, "containers of %s restarted: %v", pod.Name, restarts)
		if events {
			seen = s.checkEvents(ctx, pod, n, p)
		}
	}
	return seen, nil
}

func (s *suite) checkRetries(republished, atLeast uint64, p *problems) {
	if s.kubeletRetries() {
		p.want(republished == 0, "the registrar published its socket again %d times while kubelet %s tries again by itself", republished, s.KubeletVersion)
		return
	}
	p.want(republished >= atLeast, "the registrar published its socket again %d times; kubelet %s tries again only on a new socket, so want at least %d", republished, s.KubeletVersion, atLeast)
}

func (s *suite) checkEvents(ctx context.Context, pod corev1.Pod, n int, p *problems) (seen string) {
	selector := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": pod.Name, "involvedObject.uid": string(pod.UID)}.String()
	var rejected, registered *corev1.Event
	err := localnode.WaitFor(ctx, "the registrar's Events", 30*time.Second, 200*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		list, err := s.Client.CoreV1().Events(localnode.Namespace).List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, err
		}
		var lines []string
		rejected, registered = nil, nil
		for i, e := range list.Items {
			lines = append(lines, fmt.Sprintf("%s %s (x%d) from %s: %s", e.Type, e.Reason, e.Count, e.Source.Component, e.Message))
			switch {
			case e.Type == corev1.EventTypeWarning && e.Reason == "RegistrationRejected":
				rejected = &list.Items[i]
			case e.Type == corev1.EventTypeNormal && e.Reason == "Registered":
				registered = &list.Items[i]
			}
		}
		seen = strings.Join(lines, "; ")
		return rejected != nil && rejected.Count == int32(n) && registered != nil, nil
	})
	p.want(err == nil, "want one Warning RegistrationRejected with count %d and a Normal Registered on the registrar's Pod: %v; Events: %s", n, err, seen)
	return seen
}
