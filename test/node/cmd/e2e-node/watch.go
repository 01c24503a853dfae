package main

import (
	"context"
	"sync"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

var getOpts = metav1.GetOptions{}

// registration is what the node's CSINode said about the driver at a moment.
type registration struct {
	at         time.Time
	registered bool
	nodeID     string
	// owner is the UID of the Node that the CSINode names as its owner.
	owner types.UID
}

// csiNodeWatch records every write to the node's CSINode object, as the API
// server delivers them: unlike polling, it cannot miss a short
// deregistration.
type csiNodeWatch struct {
	driver string

	mu       sync.Mutex
	timeline []registration
	changed  chan struct{} // closed and replaced on each new entry
	relists  int           // times the watch had to be restarted
}

func newCSINodeWatch(driver string) *csiNodeWatch {
	return &csiNodeWatch{driver: driver, changed: make(chan struct{})}
}

func (w *csiNodeWatch) record(node *storagev1.CSINode) {
	r := registration{at: time.Now()}
	if node != nil {
		for _, o := range node.OwnerReferences {
			if o.Kind == "Node" {
				r.owner = o.UID
			}
		}
		for _, d := range node.Spec.Drivers {
			if d.Name == w.driver {
				r.registered, r.nodeID = true, d.NodeID
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.timeline); n > 0 && w.timeline[n-1].registered == r.registered && w.timeline[n-1].nodeID == r.nodeID && w.timeline[n-1].owner == r.owner {
		return
	}
	w.timeline = append(w.timeline, r)
	close(w.changed)
	w.changed = make(chan struct{})
}

// run watches until ctx ends, re-listing whenever the watch closes.
func (w *csiNodeWatch) run(ctx context.Context, client kubernetes.Interface) {
	selector := fields.OneTermEqualSelector("metadata.name", nodeName).String()
	listed := false
	watchEach(ctx, func(ctx context.Context) (watch.Interface, error) {
		list, err := client.StorageV1().CSINodes().List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return nil, err
		}
		if listed {
			w.mu.Lock()
			w.relists++
			w.mu.Unlock()
		}
		listed = true
		if len(list.Items) == 0 {
			w.record(nil)
		} else {
			w.record(&list.Items[0])
		}
		return client.StorageV1().CSINodes().Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: list.ResourceVersion})
	}, func(event watch.Event) bool {
		switch event.Type {
		case watch.Added, watch.Modified:
			w.record(event.Object.(*storagev1.CSINode))
		case watch.Deleted:
			w.record(nil)
		}
		return true
	})
}

// watchEach hands each event of the watch that start opens to handle, and
// opens one again whenever it closes, until ctx ends or handle returns
// false.
func watchEach(ctx context.Context, start func(context.Context) (watch.Interface, error), handle func(watch.Event) bool) {
	for ctx.Err() == nil {
		w, err := start(ctx)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for event := range w.ResultChan() {
			if !handle(event) {
				w.Stop()
				return
			}
		}
		w.Stop()
	}
}

// startWatch starts a watch of the driver in CSINode, until stop.
func (s *suite) startWatch(ctx context.Context, driver string) (w *csiNodeWatch, stop context.CancelFunc) {
	w = newCSINodeWatch(driver)
	ctx, stop = context.WithCancel(ctx)
	go w.run(ctx, s.client)
	return w, stop
}

// now returns the latest state and a channel closed at the next change.
func (w *csiNodeWatch) now() (registration, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.timeline) == 0 {
		return registration{}, w.changed
	}
	return w.timeline[len(w.timeline)-1], w.changed
}

// waitUntil waits for a state that satisfies cond and returns it.
func (w *csiNodeWatch) waitUntil(ctx context.Context, timeout time.Duration, cond func(registration) bool) (registration, bool) {
	deadline := time.After(timeout)
	for {
		r, changed := w.now()
		if cond(r) {
			return r, true
		}
		select {
		case <-changed:
		case <-deadline:
			return r, false
		case <-ctx.Done():
			return r, false
		}
	}
}

// between returns the entries recorded in [from, to].
func (w *csiNodeWatch) between(from, to time.Time) []registration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []registration
	for _, r := range w.timeline {
		if !r.at.Before(from) && !r.at.After(to) {
			out = append(out, r)
		}
	}
	return out
}

// first returns the first entry from from on that satisfies cond.
func (w *csiNodeWatch) first(from time.Time, cond func(registration) bool) (registration, bool) {
	for _, r := range w.between(from, time.Now()) {
		if cond(r) {
			return r, true
		}
	}
	return registration{}, false
}

func isRegistered(r registration) bool { return r.registered }

// gaps returns the times in [from, to] that CSINode did not list the
// driver; one still open at to ends there, open.
func (w *csiNodeWatch) gaps(from, to time.Time) []gap {
	var gaps []gap
	var down time.Time
	for _, r := range w.between(from, to) {
		switch {
		case !r.registered && down.IsZero():
			down = r.at
		case r.registered && !down.IsZero():
			gaps = append(gaps, gap{from: down, to: r.at})
			down = time.Time{}
		}
	}
	if !down.IsZero() {
		gaps = append(gaps, gap{from: down, to: to, open: true})
	}
	return gaps
}

func (w *csiNodeWatch) restarts() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.relists
}
