// Package events records Kubernetes Events on the registrar's own Pod, where
// kubectl describe pod and kubectl get events show them to an operator
// without access to the log: kubelet's rejection of the driver, its silence,
// a registration failing for longer than --unhealthy-after, CSINode losing
// the driver, and the registration that ends each of these. client-go's
// recorder aggregates repeats into one Event with a count.
package events

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// Component is the Events' source.
const Component = "csi-node-driver-registrar"

// Event reasons.
const (
	ReasonRejected           = "RegistrationRejected"
	ReasonKubeletSilent      = "KubeletSilent"
	ReasonFailing            = "RegistrationFailing"
	ReasonCSINodeUnconfirmed = "CSINodeLostDriver"
	ReasonCSINodeRestored    = "CSINodeRestored"
	ReasonRegistered         = "Registered"
)

// Pod is the registrar's own Pod, from the downward API. kubectl describe
// pod selects Events by the Pod's UID too.
type Pod struct {
	Name, Namespace, UID string
	// Node is the Events' source host.
	Node string
}

// Config says where the Events go and when a failure has lasted too long.
type Config struct {
	Pod  Pod
	REST *rest.Config
	// Limit is --unhealthy-after's; Status reads the registration when it
	// is reached.
	Limit  registration.FailureLimit
	Status func() registration.Status
	// Clock is the real one when nil.
	Clock clock.WithTickerAndDelayedExecution
}

// Recorder is an observer of the registration that records its Events.
type Recorder struct {
	cfg      Config
	pod      *corev1.ObjectReference
	recorder record.EventRecorder

	mu sync.Mutex
	// troubled: a Warning was recorded since kubelet last registered the
	// driver, so that its registration is worth a Normal Event.
	troubled, csinodeLost bool
	// failingSince is the failure the timer waits on.
	failingSince time.Time
	timer        clock.Timer
}

// New starts sending Events to the API server until ctx ends.
func New(ctx context.Context, cfg Config) (*Recorder, error) {
	sink, err := newSink(ctx, cfg.REST)
	if err != nil {
		return nil, fmt.Errorf("the API server's client: %w", err)
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(sink)
	return newRecorder(cfg, broadcaster.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: Component, Host: cfg.Pod.Node})), nil
}

func newRecorder(cfg Config, recorder record.EventRecorder) *Recorder {
	cfg.Clock = cmp.Or[clock.WithTickerAndDelayedExecution](cfg.Clock, clock.RealClock{})
	cfg.Limit.Clock = cfg.Clock
	pod := &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: cfg.Pod.Namespace, Name: cfg.Pod.Name, UID: types.UID(cfg.Pod.UID)}
	return &Recorder{cfg: cfg, pod: pod, recorder: recorder}
}

// Observe is a registration.Observer.
func (r *Recorder) Observe(now registration.Status, happened []registration.Transition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range happened {
		switch t := t.(type) {
		case registration.KubeletRejected:
			// No attempt count in the message: repeats aggregate into one Event.
			r.warn(ReasonRejected, "kubelet rejected the driver %s: %s", now.DriverName, t.Reason)
		case registration.KubeletWentSilent:
			r.warn(ReasonKubeletSilent, "%s", now.Reason)
		case registration.CSINodeUnconfirmed:
			r.csinodeLost = true
			r.warn(ReasonCSINodeUnconfirmed, "kubelet has the driver %s registered, but %s; the registration socket is published again so that kubelet registers the driver again and restores it", now.DriverName, t.Reason)
		case registration.DriverRegistered:
			switch {
			case r.csinodeLost:
				r.recorder.Eventf(r.pod, corev1.EventTypeNormal, ReasonCSINodeRestored, "kubelet registered the driver %s again and this node's CSINode lists it", now.DriverName)
			case r.troubled:
				r.recorder.Eventf(r.pod, corev1.EventTypeNormal, ReasonRegistered, "kubelet registered the driver %s", now.DriverName)
			}
			r.troubled, r.csinodeLost = false, false
		}
	}
	r.watchFailure(now)
}

func (r *Recorder) warn(reason, format string, args ...any) {
	r.troubled = true
	r.recorder.Eventf(r.pod, corev1.EventTypeWarning, reason, format, args...)
}

// watchFailure runs a timer until the current failure reaches the limit.
func (r *Recorder) watchFailure(now registration.Status) {
	since := time.Time{}
	if now.FailingSince != nil {
		since = *now.FailingSince
	}
	if since.Equal(r.failingSince) {
		return
	}
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.failingSince = since
	if since.IsZero() || r.cfg.Limit.After <= 0 {
		return
	}
	// A clock may run the function under its own lock, which Exceeded takes.
	r.timer = r.cfg.Clock.AfterFunc(since.Add(r.cfg.Limit.After).Sub(r.cfg.Clock.Now()), func() { go r.limitReached(since) })
}

// limitReached records the failure that began at since if it still lasts.
func (r *Recorder) limitReached(since time.Time) {
	failure, ok := r.cfg.Limit.Exceeded(r.cfg.Status())
	r.mu.Lock()
	defer r.mu.Unlock()
	if !ok || !failure.Since.Equal(since) || !r.failingSince.Equal(since) {
		return
	}
	r.warn(ReasonFailing, "the registration has failed for %s (--unhealthy-after=%s): %s; /healthz fails from now on, so that the liveness probe restarts the container",
		failure.Lasted.Round(time.Second), r.cfg.Limit.After, failure.Reason)
}
