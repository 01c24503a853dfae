package events

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

const driver = "test.csi.example.com"

var pod = Pod{Name: "csi-node-x", Namespace: "storage", UID: "uid-1", Node: "node-1"}

// started is a Recorder whose Events come out of client-go's broadcaster,
// as they would go to the API server.
func started(t *testing.T, cfg Config) (*Recorder, <-chan *corev1.Event) {
	t.Helper()
	broadcaster := record.NewBroadcaster()
	t.Cleanup(broadcaster.Shutdown)
	seen := make(chan *corev1.Event, 16)
	broadcaster.StartEventWatcher(func(e *corev1.Event) { seen <- e })
	cfg.Pod = pod
	return newRecorder(cfg, broadcaster.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: Component, Host: pod.Node})), seen
}

func next(t *testing.T, seen <-chan *corev1.Event) *corev1.Event {
	t.Helper()
	select {
	case e := <-seen:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no Event recorded")
		return nil
	}
}

// none checks that nothing was recorded: the broadcaster delivers in order,
// so a marker Event recorded now comes out first unless another was queued.
func none(t *testing.T, r *Recorder, seen <-chan *corev1.Event) {
	t.Helper()
	r.recorder.Event(r.pod, corev1.EventTypeNormal, "Marker", "marker")
	if e := next(t, seen); e.Reason != "Marker" {
		t.Fatalf("recorded %s %s %q, want no Event", e.Type, e.Reason, e.Message)
	}
}

func want(t *testing.T, e *corev1.Event, eventType, reason string, message ...string) {
	t.Helper()
	if e.Type != eventType || e.Reason != reason {
		t.Errorf("Event %s %s %q, want %s %s", e.Type, e.Reason, e.Message, eventType, reason)
	}
	for _, m := range message {
		if !strings.Contains(e.Message, m) {
			t.Errorf("Event %s message %q does not say %q", e.Reason, e.Message, m)
		}
	}
	ref := e.InvolvedObject
	if ref.Kind != "Pod" || ref.Name != pod.Name || ref.Namespace != pod.Namespace || string(ref.UID) != pod.UID || e.Namespace != pod.Namespace || e.Source.Component != Component || e.Source.Host != pod.Node {
		t.Errorf("Event %s about %+v in %q from %+v, want the registrar's Pod %+v", e.Reason, ref, e.Namespace, e.Source, pod)
	}
}

func TestRejectionsThenRegistration(t *testing.T) {
	r, seen := started(t, Config{})
	st := registration.Status{DriverName: driver, State: registration.Rejected}
	for range 3 {
		r.Observe(st, []registration.Transition{registration.KubeletRejected{Reason: "unsupported versions"}})
		want(t, next(t, seen), corev1.EventTypeWarning, ReasonRejected, driver, "unsupported versions")
	}
	st.State = registration.Registered
	r.Observe(st, []registration.Transition{registration.KubeletAccepted{}, registration.DriverRegistered{}})
	want(t, next(t, seen), corev1.EventTypeNormal, ReasonRegistered, driver)
	// Once registered, kubelet's confirmations after its restarts are no news.
	r.Observe(st, []registration.Transition{registration.KubeletAccepted{Again: true}, registration.DriverRegistered{}})
	none(t, r, seen)
}

func TestARegistrationWithoutTroubleIsNoEvent(t *testing.T) {
	r, seen := started(t, Config{})
	r.Observe(registration.Status{DriverName: driver, State: registration.Registered}, []registration.Transition{
		registration.Published{Reason: registration.ReasonStart}, registration.KubeletAccepted{}, registration.DriverRegistered{},
	})
	none(t, r, seen)
}

func TestKubeletSilence(t *testing.T) {
	r, seen := started(t, Config{})
	st := registration.Status{DriverName: driver, State: registration.KubeletSilent, Reason: "kubelet has not called GetInfo on the registration socket"}
	r.Observe(st, []registration.Transition{registration.KubeletWentSilent{}})
	want(t, next(t, seen), corev1.EventTypeWarning, ReasonKubeletSilent, st.Reason)
}

func TestCSINodeLostAndRestored(t *testing.T) {
	r, seen := started(t, Config{})
	st := registration.Status{DriverName: driver, State: registration.Unconfirmed}
	r.Observe(st, []registration.Transition{registration.CSINodeUnconfirmed{Reason: "CSINode node-1 does not list the driver"}})
	want(t, next(t, seen), corev1.EventTypeWarning, ReasonCSINodeUnconfirmed, driver, "does not list the driver")
	r.Observe(st, []registration.Transition{registration.Published{Reason: registration.ReasonCSINodeLost}, registration.KubeletAccepted{}})
	none(t, r, seen)
	st.State = registration.Registered
	r.Observe(st, []registration.Transition{registration.DriverRegistered{}})
	want(t, next(t, seen), corev1.EventTypeNormal, ReasonCSINodeRestored, driver)
}

func TestFailingForTooLong(t *testing.T) {
	fake := testingclock.NewFakeClock(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC))
	since := fake.Now()
	st := registration.Status{DriverName: driver, State: registration.Rejected, Reason: "rejected by kubelet: no", FailingSince: &since}
	var current registration.Status
	r, seen := started(t, Config{Clock: fake, Limit: registration.FailureLimit{After: 3 * time.Minute}, Status: func() registration.Status { return current }})

	// A failure that ends before the limit is no Event.
	current = st
	r.Observe(current, nil)
	fake.Step(time.Minute)
	current = registration.Status{DriverName: driver, State: registration.Registered}
	r.Observe(current, nil)
	fake.Step(3 * time.Minute)
	none(t, r, seen)

	// One that lasts is, once.
	since = fake.Now()
	current = st
	r.Observe(current, nil)
	fake.Step(3 * time.Minute)
	want(t, next(t, seen), corev1.EventTypeWarning, ReasonFailing, "3m0s", "rejected by kubelet: no", "/healthz fails")
	r.Observe(current, nil)
	fake.Step(time.Hour)
	none(t, r, seen)
}
