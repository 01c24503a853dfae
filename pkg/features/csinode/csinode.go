// Package csinode confirms that kubelet's registration of the CSI driver
// took effect: it watches this node's CSINode with client-go's reflector and
// reports each change of what it finds of the driver there: listed, missing,
// or owned by a replaced Node. It never writes.
//
// The Node's UID is read at the first list, at each creation of the CSINode
// (kubelet 1.35 to 1.37 create it with the UID they read at their start)
// and whenever the CSINode's owner is not the UID last read.
package csinode

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/internal/kubeapi"
)

// retryBackoff spaces the retries of failed reads; the reflector starts it
// over two minutes into a series. Its steps are not jittered: when a watch
// that worked fails, the first retry waits a random part of the cap (see
// spreadRetry), so the nodes that lost the API server together come back
// spread over one cap, and fixed steps keep that spread.
var retryBackoff = wait.Backoff{Duration: 800 * time.Millisecond, Factor: 2, Cap: 40 * time.Second, Steps: math.MaxInt32}

// errNoWatchList stands for the API server's refusal to stream the list,
// given again without asking it (the reflector then lists).
var errNoWatchList = errors.New("the API server cannot stream the list")

// clientWatchDecoding is the cause client-go gives the ERROR event it makes
// when a watch's stream breaks, to tell it from the API server's own.
const clientWatchDecoding = "ClientWatchDecoding"

// unreachable hides a refused connection from the reflector, which would
// retry the watch from its resourceVersion: a restarted API server answers
// that with 410 Gone, and the reflector lists only a backoff step later.
// Ended here, the attempt lists at the next step.
type unreachable struct{ error }

// Status is a snapshot of the watcher, for /status and /metrics.
type Status struct {
	Node            string     `json:"node"`
	Driver          string     `json:"driver,omitempty"`
	Finding         *Finding   `json:"finding,omitempty"`
	FindingTime     *time.Time `json:"findingTime,omitempty"`
	CSINodeOwnerUID string     `json:"csiNodeOwnerUID,omitempty"`
	NodeUID         string     `json:"nodeUID,omitempty"`
	// WatchRestarts counts the watches after the first; WatchesExpired those
	// that ended with a 410 Gone.
	WatchRestarts  uint64           `json:"watchRestarts"`
	WatchesExpired uint64           `json:"watchesExpired"`
	LastError      string           `json:"lastError,omitempty"`
	LastErrorTime  *time.Time       `json:"lastErrorTime,omitempty"`
	Requests       kubeapi.Requests `json:"requests"`
}

// Watcher watches the node's CSINode for the driver's entry.
type Watcher struct {
	client  *kubeapi.Client
	report  func(Finding)
	csiNode kubeapi.Object
	node    kubeapi.Object
	clock   clock.Clock
	// backoff and watchTimeout (the reflector's when zero) are set by tests.
	backoff      wait.Backoff
	watchTimeout time.Duration
	wake         chan struct{}

	mu     sync.Mutex
	logger klog.Logger
	st     Status
	cs     *csiNode
	// nodeWanted counts the reads of the Node's UID asked for, nodeRead
	// those done; the finding waits until both agree.
	nodeWanted, nodeRead uint64
	// seen: a CSINode (or its absence) and the Node's UID have been read;
	// until then, with a driver known, failures are reported.
	seen    bool
	started bool // a watch was started
	// watching: the last watch request was answered; its failure starts a
	// series of retries, which spreadRetry spreads.
	watching bool
	// noWatchList: the API server refused to stream a list; it is not asked
	// again until the registrar restarts.
	noWatchList bool
	// staleOwner is a replaced Node's UID that owned the last CSINode, until
	// the driver is listed: the garbage collector deletes such a CSINode at
	// once, and the Missing finding then says why.
	staleOwner string
}

// New returns a watcher that calls report with each new finding, under its
// lock: report must not block nor call the watcher. clk (nil: the real
// clock) does not time the reflector's waits.
func New(node string, client *kubeapi.Client, clk clock.Clock, report func(Finding)) *Watcher {
	return &Watcher{
		client:  client,
		report:  report,
		csiNode: kubeapi.Object{Group: "storage.k8s.io", Resource: "csinodes", Name: node, Kind: "CSINode", Component: "deploy/csinode"},
		node:    kubeapi.Object{Resource: "nodes", Name: node, Kind: "node", Component: "deploy/csinode"},
		clock:   cmp.Or[clock.Clock](clk, clock.RealClock{}),
		backoff: retryBackoff,
		wake:    make(chan struct{}, 1),
		logger:  klog.Background().WithName("csinode"),
		st:      Status{Node: node, Requests: kubeapi.Requests{}},
	}
}

// SetDriver sets the driver's name as kubelet registered it.
func (w *Watcher) SetDriver(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.st.Driver = name
	w.evaluate()
}

// Status returns a snapshot. Its pointers are replaced, never written
// through: only the counts are copied.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.st
	st.Requests = w.st.Requests.Clone()
	return st
}

// Run watches the CSINode, and reads the Node's UID when asked.
func (w *Watcher) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("csinode")
	w.mu.Lock()
	w.logger = logger
	w.mu.Unlock()
	logger.Info("Watching this node's CSINode for the driver", "node", w.csiNode.Name)

	backoff := w.backoff
	expected := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "storage.k8s.io/v1", "kind": "CSINode"}}
	reflector := cache.NewReflectorWithOptions(w.listWatch(), expected, store{w}, cache.ReflectorOptions{
		Name: "csinode", TypeDescription: "CSINode " + w.csiNode.Name, Backoff: &backoff, Logger: &logger,
	})
	var reflecting sync.WaitGroup
	defer reflecting.Wait()
	reflecting.Go(func() { reflector.RunWithContext(ctx) })

	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-retry:
		}
		retry = nil
		w.mu.Lock()
		wanted, done := w.nodeWanted, w.nodeRead
		w.mu.Unlock()
		if wanted == done {
			continue
		}
		n, err := w.client.Get(ctx, w.node)
		w.count("get", err)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !apierrors.IsNotFound(err):
			w.failed(err)
			retry = w.clock.After(backoff.Step())
			continue
		}
		backoff = w.backoff
		w.mu.Lock()
		w.st.NodeUID, w.nodeRead = "", wanted
		if n != nil {
			w.st.NodeUID = string(n.GetUID())
		}
		w.settle()
		w.mu.Unlock()
	}
}

func (w *Watcher) listWatch() cache.ListerWatcher {
	csiNodes := w.client.Resource(w.csiNode)
	byName := fields.OneTermEqualSelector("metadata.name", w.csiNode.Name).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			options.FieldSelector = byName
			list, err := csiNodes.List(ctx, options)
			err = kubeapi.Error("list", w.csiNode, err)
			w.count("list", err)
			if err != nil && ctx.Err() == nil {
				w.failed(err)
				w.spreadRetry(ctx)
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			if w.watchTimeout > 0 {
				seconds := int64(w.watchTimeout / time.Second)
				options.TimeoutSeconds = &seconds
			}
			watchList := options.SendInitialEvents != nil && *options.SendInitialEvents
			w.mu.Lock()
			if watchList && w.noWatchList {
				w.mu.Unlock()
				return nil, errNoWatchList
			}
			if w.started {
				w.st.WatchRestarts++
				w.logger.V(4).Info("Watching the CSINode again", "node", w.csiNode.Name, "resourceVersion", options.ResourceVersion)
			}
			w.started = true
			w.mu.Unlock()
			options.FieldSelector = byName
			events, err := csiNodes.Watch(ctx, options)
			err = kubeapi.Error("watch", w.csiNode, err)
			w.count("watch", err)
			// A watch-list's failure is not reported: the reflector lists
			// then, as it does with API servers that cannot stream a list.
			if err != nil {
				if ctx.Err() == nil && !watchList {
					w.failed(err)
				}
				w.spreadRetry(ctx)
				if !watchList && utilnet.IsConnectionRefused(err) {
					err = unreachable{err}
				}
				return nil, err
			}
			w.mu.Lock()
			w.watching = true
			w.mu.Unlock()
			return watch.Filter(events, func(e watch.Event) (watch.Event, bool) {
				if e.Type == watch.Error {
					w.watchFailed(e.Object, watchList)
				}
				return e, true
			}), nil
		},
	}
}

// watchFailed records a watch's ERROR event; the reflector lists again.
func (w *Watcher) watchFailed(status runtime.Object, watchList bool) {
	err := kubeapi.Error("watch", w.csiNode, apierrors.FromObject(status))
	switch {
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		w.mu.Lock()
		w.st.WatchesExpired++
		w.logger.V(4).Info("The CSINode's watch expired: reading it again", "err", err)
		w.mu.Unlock()
	case apierrors.HasStatusCause(err, clientWatchDecoding):
		// The stream broke, or the reflector stopped the watch while it was
		// read: not the API server's answer. The reflector watches again.
		w.logger.V(4).Info("The CSINode's watch stream broke", "err", err)
	case watchList:
		w.mu.Lock()
		w.noWatchList = true
		w.logger.V(4).Info("The API server cannot stream the CSINode: listing it, now and after", "err", err)
		w.mu.Unlock()
	default:
		w.failed(err)
	}
}

// spreadRetry waits a random part of the backoff's cap when a request fails
// after a watch that was answered: the first of a series of retries. The
// nodes of a cluster lose the API server at the same instant; spread so, they
// come back spread over the cap (steadily, as the steps are not jittered),
// at most the cap after it returns, instead of together.
func (w *Watcher) spreadRetry(ctx context.Context) {
	w.mu.Lock()
	first := w.watching
	w.watching = false
	w.mu.Unlock()
	if !first || w.backoff.Cap <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-w.clock.After(rand.N(w.backoff.Cap)):
	}
}

// store keeps nothing: it tells the watcher of each change.
type store struct{ w *Watcher }

func (s store) Add(obj any) error    { return s.changed(obj, true) }
func (s store) Update(obj any) error { return s.changed(obj, false) }
func (s store) Delete(any) error     { s.w.changed(nil, false); return nil }
func (s store) Resync() error        { return nil }

// Replace (a list) reads the Node's UID only if none was read yet (see
// changed).
func (s store) Replace(items []any, _ string) error {
	if len(items) == 0 {
		s.w.changed(nil, false)
		return nil
	}
	return s.changed(items[0], false)
}

// changed tells the watcher of obj; created: an Add, whose owner kubelet 1.35
// to 1.37 set to the UID they read at their start, maybe a replaced Node's.
func (s store) changed(obj any, created bool) error {
	cs := &csiNode{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).UnstructuredContent(), cs); err != nil {
		return fmt.Errorf("CSINode %s: %w", s.w.csiNode.Name, err)
	}
	s.w.changed(cs, created)
	return nil
}

// changed asks Run for the Node's UID when the CSINode was created, the Node
// was not read yet, or the owner is not the UID last read; the finding waits
// for it. A list does not read it again otherwise: every node lists again
// after an outage, and would make one request more each. A Node replaced
// meanwhile is read when the garbage collector deletes its CSINode and
// kubelet creates one again.
func (w *Watcher) changed(cs *csiNode, created bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cs = cs
	w.st.CSINodeOwnerUID = ""
	if cs != nil {
		w.st.CSINodeOwnerUID = cs.ownerUID()
	}
	owner, nodeUID := w.st.CSINodeOwnerUID, w.st.NodeUID
	if created || w.nodeRead == 0 || (owner != "" && owner != nodeUID) {
		w.nodeWanted++
		select {
		case w.wake <- struct{}{}:
		default:
		}
		return
	}
	w.settle()
}

// settle reports once the CSINode and the Node's UID are read; w.mu is held.
func (w *Watcher) settle() {
	if w.nodeWanted != w.nodeRead {
		return
	}
	w.seen = true
	owner, nodeUID := w.st.CSINodeOwnerUID, w.st.NodeUID
	if owner != "" && nodeUID != "" && owner != nodeUID {
		w.staleOwner = owner
	}
	w.st.LastError, w.st.LastErrorTime = "", nil
	w.evaluate()
}

// failed records err; before anything was read, it is the finding.
func (w *Watcher) failed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err.Error() != w.st.LastError {
		w.logger.Error(err, "Reading the CSINode failed; trying again", "node", w.csiNode.Name)
	}
	now := w.clock.Now()
	w.st.LastError, w.st.LastErrorTime = err.Error(), &now
	w.evaluate()
}

// evaluate reports the finding if it changed; w.mu is held.
func (w *Watcher) evaluate() {
	if w.st.Driver == "" {
		return
	}
	var f Finding
	switch {
	case w.seen && w.nodeWanted != w.nodeRead:
		return
	case w.seen:
		f = find(w.csiNode.Name, w.st.Driver, w.cs, w.st.NodeUID)
		switch {
		case f.Listed:
			w.staleOwner = ""
		case f.Missing && w.staleOwner != "":
			f.Reason += fmt.Sprintf("; the last one was owned by the replaced Node of UID %s, not by the current one of UID %s: kubelet 1.35 to 1.37 create it with the Node UID they read at their start, which the garbage collector deletes again, until kubelet restarts (1.38 and later read it again)",
				w.staleOwner, w.st.NodeUID)
		}
	case w.st.LastError != "":
		f = Finding{Reason: "cannot read CSINode " + w.csiNode.Name + " yet: " + w.st.LastError}
	default:
		return
	}
	if w.st.Finding != nil && *w.st.Finding == f {
		return
	}
	now := w.clock.Now()
	w.st.Finding, w.st.FindingTime = &f, &now
	w.logger.Info("CSINode finding", "node", w.csiNode.Name, "driver", w.st.Driver, "listed", f.Listed, "missing", f.Missing, "reason", f.Reason)
	w.report(f)
}

func (w *Watcher) count(verb string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.st.Requests.Add(verb, err)
}
