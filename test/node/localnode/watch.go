package localnode

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

// Registration is what the node's CSINode said about the driver at a moment.
type Registration struct {
	At         time.Time
	Registered bool
	NodeID     string
	// Owner is the UID of the Node that the CSINode names as its owner.
	Owner types.UID
}

// Watch records every write to the node's CSINode object, as the API
// server delivers them: unlike polling, it cannot miss a short
// deregistration.
type Watch struct {
	Driver string

	mu       sync.Mutex
	timeline []Registration
	changed  chan struct{} // closed and replaced on each new entry
	relists  int           // times the watch had to be restarted
}

func NewWatch(driver string) *Watch {
	return &Watch{Driver: driver, changed: make(chan struct{})}
}

func (w *Watch) record(node *storagev1.CSINode) {
	r := Registration{At: time.Now()}
	if node != nil {
		for _, o := range node.OwnerReferences {
			if o.Kind == "Node" {
				r.Owner = o.UID
			}
		}
		for _, d := range node.Spec.Drivers {
			if d.Name == w.Driver {
				r.Registered, r.NodeID = true, d.NodeID
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.timeline); n > 0 && w.timeline[n-1].Registered == r.Registered && w.timeline[n-1].NodeID == r.NodeID && w.timeline[n-1].Owner == r.Owner {
		return
	}
	w.timeline = append(w.timeline, r)
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *Watch) Run(ctx context.Context, client kubernetes.Interface) {
	selector := fields.OneTermEqualSelector("metadata.name", NodeName).String()
	listed := false
	WatchEach(ctx, func(ctx context.Context) (watch.Interface, error) {
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

// WatchEach opens the watch again whenever it closes, until ctx ends or
// handle returns false.
func WatchEach(ctx context.Context, start func(context.Context) (watch.Interface, error), handle func(watch.Event) bool) {
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

func (c *Node) StartWatch(ctx context.Context, driver string) (w *Watch, stop context.CancelFunc) {
	w = NewWatch(driver)
	ctx, stop = context.WithCancel(ctx)
	go w.Run(ctx, c.Client)
	return w, stop
}

// Now returns the latest state and a channel closed at the next change.
func (w *Watch) Now() (Registration, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.timeline) == 0 {
		return Registration{}, w.changed
	}
	return w.timeline[len(w.timeline)-1], w.changed
}

func (w *Watch) WaitUntil(ctx context.Context, timeout time.Duration, cond func(Registration) bool) (Registration, bool) {
	deadline := time.After(timeout)
	for {
		r, changed := w.Now()
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

func (w *Watch) Between(from, to time.Time) []Registration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Registration
	for _, r := range w.timeline {
		if !r.At.Before(from) && !r.At.After(to) {
			out = append(out, r)
		}
	}
	return out
}

func (w *Watch) First(from time.Time, cond func(Registration) bool) (Registration, bool) {
	for _, r := range w.Between(from, time.Now()) {
		if cond(r) {
			return r, true
		}
	}
	return Registration{}, false
}

func IsRegistered(r Registration) bool { return r.Registered }

func (w *Watch) Restarts() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.relists
}
