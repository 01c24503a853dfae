// Package nodegate applies kubelet's verdict on the CSI driver to this Node,
// so that pods needing the driver are not scheduled before it is usable: it
// removes startup taints once kubelet accepts the driver (it never adds one)
// and sets a Node condition for the Node Readiness Controller (KEP-5233).
// Run applies the latest event with retries and never holds the
// registration up.
package nodegate

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/internal/kubeapi"
)

// ConditionSuffix makes the default condition type from the driver's name:
// KEP-5233's conditions are domain-prefixed, and its storage example names
// this one so.
const ConditionSuffix = "/NodePluginRegistered"

const (
	ReasonRegistered   = "Registered"
	ReasonRejected     = "RejectedByKubelet"
	ReasonUnregistered = "Unregistered"
	ReasonNotInCSINode = "NotInCSINode"
)

// finalTimeout bounds the update made after Run's context is done: the
// False condition of a registrar that stopped.
const finalTimeout = 2 * time.Second

// retryBackoff doubles the retries from 200ms up to a minute; its jitter
// spreads out the nodes of a cluster.
var retryBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: time.Minute, Steps: math.MaxInt32}

// Request names, in Status.Requests and the metrics.
const (
	RequestGetNode      = "get-node"
	RequestRemoveTaints = "remove-taints"
	RequestSetCondition = "set-condition"
)

// Config says what to change on which node.
type Config struct {
	NodeName  string
	TaintKeys []string
	// Condition sets the condition of type ConditionType, or the driver's
	// name + ConditionSuffix when ConditionType is empty.
	Condition     bool
	ConditionType string
	Client        *kubeapi.Client
	Clock         clock.Clock
}

// Status is a snapshot of the gate, for /status and /metrics.
type Status struct {
	Node      string   `json:"node"`
	TaintKeys []string `json:"removeTaints,omitempty"`
	// TaintsChecked is when the node was last found without them.
	TaintsChecked *time.Time `json:"taintsCheckedTime,omitempty"`
	// RemovedTaints are those this process removed, as key:effect.
	RemovedTaints []string   `json:"removedTaints,omitempty"`
	Condition     *Condition `json:"condition,omitempty"`
	ConditionTime *time.Time `json:"conditionTime,omitempty"`
	// Pending: the node does not show yet what the registrar knows.
	Pending       bool             `json:"pending"`
	LastError     string           `json:"lastError,omitempty"`
	LastErrorTime *time.Time       `json:"lastErrorTime,omitempty"`
	NextRetry     *time.Time       `json:"nextRetryTime,omitempty"`
	Requests      kubeapi.Requests `json:"requests"`
}

// wanted is what the node should show; the event methods write it, Run
// applies it. Each change bumps its generation.
type wanted struct {
	taintGen  uint64 // one per acceptance by kubelet
	cond      *Condition
	condSince time.Time // when cond's status last changed
	condGen   uint64
}

// Gate applies the registration's events to the node.
type Gate struct {
	cfg  Config
	wake chan struct{}

	mu     sync.Mutex
	wanted wanted
	st     Status
}

// New returns a gate; Run applies the events.
func New(cfg Config) *Gate {
	cfg.Clock = cmp.Or[clock.Clock](cfg.Clock, clock.RealClock{})
	return &Gate{
		cfg:  cfg,
		wake: make(chan struct{}, 1),
		st:   Status{Node: cfg.NodeName, TaintKeys: cfg.TaintKeys, Requests: kubeapi.Requests{}},
	}
}

// Registered records that kubelet accepted the driver. It never blocks.
func (g *Gate) Registered(driverName string) {
	g.want(driverName, true, "True", ReasonRegistered, "kubelet accepted the CSI driver "+driverName)
}

// Rejected records that kubelet rejected the driver.
func (g *Gate) Rejected(driverName, reason string) {
	g.want(driverName, false, "False", ReasonRejected, "kubelet rejected the CSI driver "+driverName+": "+reason)
}

// Unconfirmed records that this node's CSINode no longer lists the driver
// (--confirm-csinode): the condition becomes False; taints stay removed.
func (g *Gate) Unconfirmed(driverName, reason string) {
	g.want(driverName, false, "False", ReasonNotInCSINode, reason)
}

// Withdrawn records that the registrar removed its socket on its way out.
func (g *Gate) Withdrawn(driverName string) {
	g.want(driverName, false, "False", ReasonUnregistered, "the registrar of the CSI driver "+driverName+" stopped and removed its registration socket")
}

func (g *Gate) want(driverName string, removeTaints bool, status, reason, message string) {
	g.mu.Lock()
	w := &g.wanted
	if removeTaints && len(g.cfg.TaintKeys) > 0 {
		w.taintGen++
	}
	c := &Condition{Type: cmp.Or(g.cfg.ConditionType, driverName+ConditionSuffix), Status: status, Reason: reason, Message: message}
	if g.cfg.Condition && driverName != "" && (w.cond == nil || *w.cond != *c) {
		if w.cond == nil || w.cond.Status != c.Status || w.cond.Type != c.Type {
			w.condSince = g.cfg.Clock.Now()
		}
		w.cond = c
		w.condGen++
	}
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Status returns a snapshot. Of what it shares with the gate, the
// pointers are replaced, never written through, and RemovedTaints only
// grows: the counts alone are copied.
func (g *Gate) Status() Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.st
	st.RemovedTaints = slices.Clip(st.RemovedTaints)
	st.Requests = g.st.Requests.Clone()
	return st
}

type applied struct {
	taintGen, condGen uint64
	// cond is the condition last applied, so that lastTransitionTime is
	// sent only with a change of its status or type.
	cond *Condition
}

// Run applies events until ctx is done, then makes one last attempt within
// finalTimeout. No API error ends it.
func (g *Gate) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("nodegate")
	logger.Info("Updating the node on kubelet's verdicts", "node", g.cfg.NodeName, "removeTaints", g.cfg.TaintKeys, "condition", g.cfg.Condition)
	var done applied
	backoff := retryBackoff
	retry := g.cfg.Clock.NewTimer(0)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			// With nothing pending, sync sends nothing.
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalTimeout)
			defer cancel()
			if err := g.sync(final, logger, &done); err != nil {
				logger.Error(err, "Cannot update the node before exiting", g.errorKeys(err)...)
			}
			return
		case <-g.wake:
		case <-retry.C():
		}
		retry.Stop()
		err := g.sync(ctx, logger, &done)
		if err == nil || ctx.Err() != nil {
			backoff = retryBackoff
			continue
		}
		delay := backoff.Step()
		next := g.cfg.Clock.Now().Add(delay)
		g.mu.Lock()
		g.st.NextRetry = &next
		g.mu.Unlock()
		logger.V(2).Info("Updating the node failed; trying again", "node", g.cfg.NodeName, "after", delay, "err", err)
		retry.Reset(delay)
	}
}

// sync applies what is wanted and not yet applied: the taints first, as
// they are what keeps pods off the node.
func (g *Gate) sync(ctx context.Context, logger klog.Logger, done *applied) error {
	g.mu.Lock()
	want := g.wanted
	g.mu.Unlock()

	var taintErr, condErr error
	if want.taintGen != done.taintGen {
		var removed []string
		removed, taintErr = removeTaints(ctx, g.cfg.Client, g.cfg.NodeName, g.cfg.TaintKeys, g.count)
		if taintErr == nil {
			done.taintGen = want.taintGen
			now := g.cfg.Clock.Now()
			g.mu.Lock()
			g.st.TaintsChecked = &now
			g.st.RemovedTaints = append(g.st.RemovedTaints, removed...)
			g.mu.Unlock()
			if len(removed) > 0 {
				logger.Info("Removed the startup taints from the node: kubelet accepted the driver", "node", g.cfg.NodeName, "taints", removed)
			} else {
				logger.V(2).Info("The node has none of the startup taints", "node", g.cfg.NodeName, "keys", g.cfg.TaintKeys)
			}
		}
	}
	if want.condGen != done.condGen && want.cond != nil {
		var transition time.Time
		if done.cond == nil || want.cond.Status != done.cond.Status || want.cond.Type != done.cond.Type {
			transition = want.condSince
		}
		now := g.cfg.Clock.Now()
		condErr = setCondition(ctx, g.cfg.Client, g.cfg.NodeName, conditionPatch(*want.cond, now, transition))
		g.count(RequestSetCondition, condErr)
		if condErr == nil {
			done.condGen, done.cond = want.condGen, want.cond
			g.mu.Lock()
			g.st.Condition, g.st.ConditionTime = want.cond, &now
			g.mu.Unlock()
			logger.Info("Set the node's condition", "node", g.cfg.NodeName, "type", want.cond.Type, "status", want.cond.Status, "reason", want.cond.Reason)
		}
	}
	err := errors.Join(taintErr, condErr)
	g.mu.Lock()
	defer g.mu.Unlock()
	// Pending while done falls short of what is wanted now.
	g.st.Pending = g.wanted.taintGen != done.taintGen || g.wanted.condGen != done.condGen
	if err != nil {
		now := g.cfg.Clock.Now()
		if g.st.LastError != err.Error() {
			logger.Error(err, "Cannot update the node", g.errorKeys(err)...)
		}
		g.st.LastError, g.st.LastErrorTime = err.Error(), &now
	} else {
		g.st.LastError, g.st.LastErrorTime = "", nil
	}
	g.st.NextRetry = nil
	return err
}

func (g *Gate) errorKeys(err error) []any {
	kv := []any{"node", g.cfg.NodeName}
	if apiErr, ok := errors.AsType[*kubeapi.APIError](err); ok && apiErr.Policy != "" {
		kv = append(kv, "policy", apiErr.Policy)
	}
	return kv
}

func (g *Gate) count(name string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.st.Requests.Add(name, err)
}
