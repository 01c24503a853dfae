// Package csinode confirms that kubelet's registration of the CSI driver
// took effect where workloads need it: it watches this node's CSINode (the
// object kubelet creates or updates with the driver's entry before it
// tells the registrar "registered"), and reports what it finds of the
// driver there, through a callback, each time that changes: listed under
// the current Node, missing (a registration made again restores it), or
// owned by a Node that was replaced (which the garbage collector deletes).
//
// It reads, never writes: a GET of the CSINode, then a WATCH of it by name
// from that GET's resourceVersion, with bookmarks and a timeout drawn in
// [5, 10) minutes as client-go's reflector does, renewed from the last
// resourceVersion seen, the GET made again after a 410 Gone; a GET of the
// Node for its UID at each GET of the CSINode, at each creation of the
// CSINode (kubelet 1.35 and later create it again with the Node UID they
// read at their start, which may be a replaced Node's), and whenever the
// CSINode's Node owner is not the UID last read. Failures are retried with a backoff
// from 1 s doubling to 5 min, with jitter, on an injected clock.
//
// It is written on internal/kubeapi rather than client-go's informers: one
// object of one resource, for which the binary would carry client-go (see
// that package for the measured sizes).
package csinode

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/internal/kubeapi"
)

// The retry backoff's bounds, and the watch's timeout's.
const (
	backoffInitial = time.Second
	backoffMax     = 5 * time.Minute
	watchMin       = 5 * time.Minute
	watchMax       = 10 * time.Minute
)

// Status is a snapshot of the watcher, for /status and /metrics.
type Status struct {
	Node   string `json:"node"`
	Driver string `json:"driver,omitempty"`
	// Finding is the last one reported, and when it was found.
	Finding     *Finding   `json:"finding,omitempty"`
	FindingTime *time.Time `json:"findingTime,omitempty"`
	// CSINodeOwnerUID is the UID of the Node that owns the CSINode, and
	// NodeUID the Node's own, as last read; "" for none.
	CSINodeOwnerUID string `json:"csiNodeOwnerUID,omitempty"`
	NodeUID         string `json:"nodeUID,omitempty"`
	// WatchRestarts counts the watches started after the first, and
	// WatchesExpired those that ended with a 410 Gone: their
	// resourceVersion had left the API server's window.
	WatchRestarts  uint64     `json:"watchRestarts"`
	WatchesExpired uint64     `json:"watchesExpired"`
	LastError      string     `json:"lastError,omitempty"`
	LastErrorTime  *time.Time `json:"lastErrorTime,omitempty"`
	// Requests counts the requests to the API server by verb (get, watch)
	// and answer: the HTTP status code, or "error" when there was none.
	Requests kubeapi.Requests `json:"requests"`
}

// Watcher watches the node's CSINode for the driver's entry.
type Watcher struct {
	client  *kubeapi.Client
	report  func(Finding)
	csiNode kubeapi.Object
	node    kubeapi.Object

	// For tests: the clock of the backoff, the jitter taken off each wait
	// (at most its argument), the watch's timeout, the backoff's bounds.
	clock        clock.Clock
	jitter       func(time.Duration) time.Duration
	watchTimeout func() time.Duration
	backoff      [2]time.Duration

	mu     sync.Mutex
	logger klog.Logger
	st     Status
	// seen: a CSINode (cs, nil when absent) and the Node's UID have been
	// read; until then, with a driver known, failures are reported.
	seen    bool
	cs      *csiNode
	started bool // a watch was started
	// staleOwner is the owner UID of the last CSINode read that a replaced
	// Node owned, until the driver is listed: the garbage collector
	// deletes such a CSINode within milliseconds, and what is then missing
	// says why it will be again.
	staleOwner string
}

// New returns a watcher of node's CSINode that calls report with each new
// finding, from Run's goroutine or SetDriver's, one at a time: report must
// not block nor call the watcher.
func New(node string, client *kubeapi.Client, report func(Finding)) *Watcher {
	return &Watcher{
		client:  client,
		report:  report,
		csiNode: kubeapi.Object{Group: "storage.k8s.io", Version: "v1", Resource: "csinodes", Name: node, Kind: "CSINode", Component: "deploy/csinode"},
		node:    kubeapi.Object{Version: "v1", Resource: "nodes", Name: node, Kind: "node", Component: "deploy/csinode"},
		clock:   clock.RealClock{},
		jitter:  func(d time.Duration) time.Duration { return rand.N(d + 1) },
		watchTimeout: func() time.Duration {
			return watchMin + rand.N(watchMax-watchMin+time.Second).Truncate(time.Second)
		},
		backoff: [2]time.Duration{backoffInitial, backoffMax},
		logger:  klog.Background().WithName("csinode"),
		st:      Status{Node: node, Requests: kubeapi.Requests{}},
	}
}

// SetDriver sets the driver's name, as kubelet registered it; the findings
// are about it from then on (a driver may rename itself).
func (w *Watcher) SetDriver(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.st.Driver = name
	w.evaluate()
}

// Status returns a snapshot of the watcher.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.st
	st.Requests = w.st.Requests.Clone()
	if st.Finding != nil {
		f := *st.Finding
		st.Finding = &f
	}
	return st
}

// Run watches the CSINode until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("csinode")
	w.mu.Lock()
	w.logger = logger
	w.mu.Unlock()
	logger.Info("Watching this node's CSINode for the driver", "node", w.csiNode.Name)
	retry := w.backoff[0]
	rv, relist := "", true
	for ctx.Err() == nil {
		var err error
		if relist {
			rv, err = w.get(ctx)
		}
		if err == nil {
			var progressed bool
			rv, progressed, err = w.watch(ctx, rv)
			if progressed {
				retry = w.backoff[0]
			}
		}
		// After any failure, the CSINode and the Node are read again.
		relist = err != nil
		if kubeapi.Code(err) == http.StatusGone {
			// The resourceVersion left the API server's window: read the
			// CSINode again, at once, as a reflector does.
			w.mu.Lock()
			w.st.WatchesExpired++
			w.mu.Unlock()
			logger.V(4).Info("The CSINode's watch expired: reading it again", "err", err)
			continue
		}
		if err == nil || ctx.Err() != nil {
			continue
		}
		w.failed(err)
		wait := retry - w.jitter(retry/5)
		retry = min(2*retry, w.backoff[1])
		select {
		case <-ctx.Done():
		case <-w.clock.After(wait):
		}
	}
}

// get reads the CSINode and the Node's UID, and returns the CSINode's
// resourceVersion, "" when it does not exist.
func (w *Watcher) get(ctx context.Context) (string, error) {
	cs := &csiNode{}
	err := w.client.Get(ctx, w.csiNode, cs)
	w.count("get", err)
	switch {
	case kubeapi.Code(err) == http.StatusNotFound:
		cs = nil
	case err != nil:
		return "", err
	}
	if err := w.observe(ctx, cs, true); err != nil {
		return "", err
	}
	if cs == nil {
		return "", nil
	}
	return cs.Metadata.ResourceVersion, nil
}

// watch follows the CSINode from rv until the watch ends, and returns the
// last resourceVersion seen and whether the watch made progress (an
// event, or the end the API server chose).
func (w *Watcher) watch(ctx context.Context, rv string) (string, bool, error) {
	w.mu.Lock()
	if w.started {
		w.st.WatchRestarts++
		w.logger.V(4).Info("Watching the CSINode again", "node", w.csiNode.Name, "resourceVersion", rv)
	}
	w.started = true
	w.mu.Unlock()
	stream, err := w.client.Watch(ctx, w.csiNode, rv, w.watchTimeout())
	w.count("watch", err)
	if err != nil {
		return rv, false, err
	}
	defer stream.Close()
	progressed := false
	for {
		e, err := stream.Next()
		if err == io.EOF {
			return rv, true, nil
		}
		if err != nil {
			return rv, progressed, err
		}
		progressed = true
		cs := &csiNode{}
		if err := json.Unmarshal(e.Object, cs); err != nil {
			return rv, progressed, fmt.Errorf("a watch event of CSINode %s is not one: %w", w.csiNode.Name, err)
		}
		if cs.Metadata.ResourceVersion != "" {
			rv = cs.Metadata.ResourceVersion
		}
		switch e.Type {
		case kubeapi.Added:
			err = w.observe(ctx, cs, true)
		case kubeapi.Modified:
			err = w.observe(ctx, cs, false)
		case kubeapi.Deleted:
			err = w.observe(ctx, nil, false)
		}
		if err != nil {
			return rv, progressed, err
		}
	}
}

// observe records the CSINode read (nil: it does not exist), after reading
// the Node's UID when readNode is set or the CSINode's owner is not the UID
// last read, and reports the finding if it changed.
func (w *Watcher) observe(ctx context.Context, cs *csiNode, readNode bool) error {
	w.mu.Lock()
	nodeUID := w.st.NodeUID
	w.mu.Unlock()
	owner := ""
	if cs != nil {
		owner = cs.ownerUID()
	}
	if readNode || (owner != "" && owner != nodeUID) {
		var n struct {
			Metadata struct {
				UID string `json:"uid"`
			} `json:"metadata"`
		}
		err := w.client.Get(ctx, w.node, &n)
		w.count("get", err)
		if err != nil && kubeapi.Code(err) != http.StatusNotFound {
			return err
		}
		nodeUID = n.Metadata.UID
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen, w.cs = true, cs
	w.st.CSINodeOwnerUID, w.st.NodeUID = owner, nodeUID
	if owner != "" && nodeUID != "" && owner != nodeUID {
		w.staleOwner = owner
	}
	w.st.LastError, w.st.LastErrorTime = "", nil
	w.evaluate()
	return nil
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
	case w.seen:
		f = find(w.csiNode.Name, w.st.Driver, w.cs, w.st.NodeUID)
		switch {
		case f.Listed:
			w.staleOwner = ""
		case f.Missing && w.staleOwner != "":
			f.Reason += fmt.Sprintf("; the last one was owned by the replaced Node of UID %s, not by the current one of UID %s: kubelet 1.35 and later create it with the Node UID they read at their start, which the garbage collector deletes again, until kubelet restarts",
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
