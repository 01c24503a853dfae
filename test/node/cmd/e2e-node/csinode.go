package main

// Check 13 (issue 37): --confirm-csinode on a real node. kubelet does not
// create a deleted Node again (kubernetes/kubernetes#115761): the check
// creates it. kubelet 1.35 to 1.37 create the CSINode again under the UID
// they read at their start (kubernetes/kubernetes#131098): there the
// registrar must name the stale owner and back off until kubelet restarts.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/csi-registrar/node-driver-registrar/test/node/localnode"
)

const (
	confirmDaemonSet            = "csi-confirm"
	revConfirm         revision = 60
	revConfirmUpstream revision = 61
	// The registrar waits 1 s, kubelet reconciles every second.
	maxHeal  = 30 * time.Second
	maxStale = 30 * time.Second
	// With kubelet 1.35 to 1.37 the loss comes back after each
	// registration; a registrar whose wait doubles from 1 s publishes about
	// five times in backoffWindow, one without backoff every 2-3 s.
	backoffWindow          = 30 * time.Second
	maxBackoffPublications = 6
	// One publication's cycle on a loaded node.
	staleStatusWait = 15 * time.Second
	maxRestartHeal  = 2 * time.Minute
	// upstreamLostFor is many times what this registrar takes to heal.
	upstreamLostFor = 20 * time.Second
	statusPoll      = 20 * time.Millisecond
)

// kubeletKeepsNodeUID: kubelet 1.35 to 1.37 (nodeInfoManager's
// CreateCSINode). By minor number: a prerelease of 1.38 counts as 1.38.
func (s *suite) kubeletKeepsNodeUID() bool {
	v := s.KubeletVersion
	return v.Major() == 1 && v.Minor() >= 35 && v.Minor() <= 37
}

// deployConfirm deploys check 13's DaemonSet of rev until CSINode lists
// the driver under the current Node, whose UID it returns.
func (s *suite) deployConfirm(ctx context.Context, watch *localnode.Watch, rev revision) (*corev1.Pod, types.UID, time.Duration, error) {
	o := own{Own: localnode.Own{Name: confirmDaemonSet, Hostpath: true, KeepProbes: true}}
	if !rev.upstream() {
		o.account, o.Args = true, []string{"--confirm-csinode"}
	}
	ds, err := s.ownDaemonSet(rev, o)
	if err != nil {
		return nil, "", 0, err
	}
	node, err := s.Client.CoreV1().Nodes().Get(ctx, localnode.NodeName, getOpts)
	if err != nil {
		return nil, "", 0, err
	}
	began := time.Now()
	pod, _, err := s.Deploy(ctx, ds, watch)
	if err == nil {
		if _, ok := watch.WaitUntil(ctx, time.Minute, func(r localnode.Registration) bool { return r.Registered && r.Owner == node.UID }); !ok {
			err = fmt.Errorf("%s not in CSINode under Node %s", localnode.HostpathDriver, node.UID)
		}
	}
	if err != nil {
		_, said := statusOf(rev.port())
		return nil, "", 0, fmt.Errorf("%v; the registrar's %s", err, said)
	}
	return pod, node.UID, time.Since(began), nil
}

// confirmed is a part of check 13 under way with this registrar.
type confirmed struct {
	uid    types.UID
	pod    *corev1.Pod
	tReady time.Duration
	before *registrarState
	tl     statusTimeline
}

type statusEntry struct {
	at            time.Time
	state, reason string
	lost          uint64 // socketPublications["csinode-lost"]
}

// statusTimeline records every change of the registrar's /status, polled
// fast: a state can last milliseconds.
type statusTimeline struct {
	mu      sync.Mutex
	entries []statusEntry
}

func (tl *statusTimeline) poll(ctx context.Context, port int32) {
	wait.UntilWithContext(ctx, func(context.Context) {
		st, err := registrarStatus(port)
		if err != nil {
			return
		}
		e := statusEntry{at: time.Now(), state: st.State, reason: st.Reason, lost: st.Publications["csinode-lost"]}
		tl.mu.Lock()
		defer tl.mu.Unlock()
		if n := len(tl.entries); n == 0 || tl.entries[n-1].state != e.state || tl.entries[n-1].reason != e.reason || tl.entries[n-1].lost != e.lost {
			tl.entries = append(tl.entries, e)
		}
	}, statusPoll)
}

func (tl *statusTimeline) since(t time.Time) []statusEntry {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var out []statusEntry
	for _, e := range tl.entries {
		if !e.at.Before(t) {
			out = append(out, e)
		}
	}
	return out
}

// describe lists the first most changes from began on (0: all).
func (tl *statusTimeline) describe(began time.Time, most int) []string {
	var states []string
	for _, e := range tl.since(began) {
		if most > 0 && len(states) == most {
			break
		}
		states = append(states, fmt.Sprintf("%s %s (%s) csinode-lost %d", since(began, e.at), e.state, e.reason, e.lost))
	}
	return states
}

// healing is when a loss healed, in CSINode and in /status.
type healing struct {
	lostAt, csiNodeAt, statusAt time.Time
}

func (h healing) describe(began time.Time) string {
	return fmt.Sprintf("driver out of CSINode %s → in CSINode again %s, /status registered %s", since(began, h.lostAt), since(began, h.csiNodeAt), since(began, h.statusAt))
}

// waitHealed waits for the driver out of CSINode and back under uid, and
// /status out of registered and back. After a kubelet restart (lost),
// both count as out from began.
func (s *suite) waitHealed(ctx context.Context, label string, watch *localnode.Watch, tl *statusTimeline, began time.Time, uid types.UID, bound time.Duration, lost bool) (healing, error) {
	var h healing
	err := localnode.WaitFor(ctx, label+": the driver in CSINode under Node "+string(uid)+" and /status registered", bound, statusPoll, nil, func(context.Context) (bool, error) {
		h = healing{}
		if lost {
			h.lostAt = began
		}
		for _, r := range watch.Between(began, time.Now()) {
			switch {
			case !r.Registered && h.lostAt.IsZero():
				h.lostAt = r.At
			case r.Registered && r.Owner == uid && !h.lostAt.IsZero() && h.csiNodeAt.IsZero():
				h.csiNodeAt = r.At
			}
		}
		left := lost
		for _, e := range tl.since(began) {
			switch {
			case e.state != "registered":
				left = true
			case left && h.statusAt.IsZero():
				h.statusAt = e.at
			}
		}
		return !h.csiNodeAt.IsZero() && !h.statusAt.IsZero(), nil
	})
	s.timingSince(label+" → "+localnode.HostpathDriver+" in CSINode, owned by the current Node", began, h.csiNodeAt)
	s.timingSince(label+" → /status registered", began, h.statusAt)
	return h, err
}

// replaceNode deletes the Node and creates it again, as node repair does;
// kubelet writes the new one's status.
func (s *suite) replaceNode(ctx context.Context) (*corev1.Node, error) {
	old, err := s.Client.CoreV1().Nodes().Get(ctx, localnode.NodeName, getOpts)
	if err != nil {
		return nil, err
	}
	// Background, as kubectl delete node: the garbage collector deletes
	// what the Node owns (its CSINode, its Lease).
	background := metav1.DeletePropagationBackground
	uid := old.UID
	if err := s.Client.CoreV1().Nodes().Delete(ctx, localnode.NodeName, metav1.DeleteOptions{
		PropagationPolicy: &background, Preconditions: &metav1.Preconditions{UID: &uid},
	}); err != nil {
		return nil, fmt.Errorf("delete Node: %w", err)
	}
	fresh := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: old.Name, Labels: old.Labels, Annotations: old.Annotations},
		Spec:       old.Spec,
	}
	var created *corev1.Node
	err = localnode.WaitFor(ctx, "the Node created again", 30*time.Second, 20*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		created, err = s.Client.CoreV1().Nodes().Create(ctx, fresh, metav1.CreateOptions{})
		return err == nil, err
	})
	return created, err
}

// waitNodeStatus waits until kubelet has written the replaced Node's
// status (the scheduler places no pod on a Node without it).
func (s *suite) waitNodeStatus(ctx context.Context) error {
	return localnode.WaitFor(ctx, "kubelet's status on the new Node", time.Minute, 100*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		node, err := s.Client.CoreV1().Nodes().Get(ctx, localnode.NodeName, getOpts)
		return err == nil && node.Status.NodeInfo.KubeletVersion != "" && len(node.Status.Allocatable) > 0, err
	})
}

// runsVolumePod starts a volume pod and deletes it, as check 8a does.
func (s *suite) runsVolumePod(ctx context.Context, name string) (string, bool) {
	v, err := s.startVolumePod(ctx, name)
	if err != nil {
		return fmt.Sprintf("volume pod: %v", err), false
	}
	u, err := s.deleteVolumePod(ctx, v)
	if err != nil {
		return fmt.Sprintf("%v; then %v", v, err), false
	}
	return fmt.Sprintf("%v; deleted → unpublished +%s", v, ms(u.tUnpublished)), true
}

func (s *suite) checkCSINode(ctx context.Context) bool {
	replaced := "kubelet " + s.KubeletVersion.String() + " (1.34 or earlier, 1.38 or later) creates the CSINode again under the new Node: CSINode lists the driver again under the new Node's UID within " + maxHeal.String() + ", /status registered, an inline-volume pod runs"
	if s.kubeletKeepsNodeUID() {
		replaced = fmt.Sprintf("kubelet %s (1.35 to 1.37) creates the CSINode again under the old Node's UID, which the garbage collector deletes again: the registrar finds the stale owner within %s, %s after the replacement /status is still unconfirmed naming it, never registered meanwhile, at most %d publications again in that time, no container restart; then kubelet restarted: CSINode lists the driver under the new Node within %s, /status registered, an inline-volume pod runs",
			s.KubeletVersion, maxStale, backoffWindow, maxBackoffPublications, maxRestartHeal)
	}
	names := []string{
		"13a. --confirm-csinode, CSINode deleted while the driver is registered: the registrar publishes its socket again (csinode-lost), CSINode lists the driver again under the current Node within " + maxHeal.String() + ", /status registered again, an inline-volume pod runs",
		"13b. --confirm-csinode, Node replaced (deleted and created again, as node repair does) while the driver is registered: the garbage collector deletes the old Node's CSINode; " + replaced,
		fmt.Sprintf("13c. upstream's image, CSINode deleted, then Node replaced: the driver stays out of CSINode for %s after each loss (no healing: the comparison)", upstreamLostFor),
	}
	if s.HostpathMissing != "" {
		return s.skipAll(names, s.HostpathMissing)
	}
	// Check 8's DaemonSet registers the same driver.
	if err := s.RemoveDaemonSet(ctx, localnode.HostpathDaemonSet, localnode.HostpathDriver); err != nil {
		return s.failAll(names, "removing check 8's DaemonSet: %v", err)
	}
	err := s.ApplyManifests(ctx, nil, s.DeployFile("csinode/rbac.yaml"), s.DeployFile("csinode/service-account/service-account.yaml"))
	if err == nil {
		if _, err = s.Client.StorageV1().CSIDrivers().Create(ctx, localnode.HostpathCSIDriver(), metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			err = nil
		}
	}
	if err != nil {
		return s.failAll(names, "%v", err)
	}
	watch, stopWatch := s.StartWatch(ctx, localnode.HostpathDriver)
	defer stopWatch()

	ok := s.checkCSINodeDeleted(ctx, names[0], watch)
	ok = s.checkNodeReplaced(ctx, names[1], watch) && ok
	if s.UpstreamMissing != "" {
		return s.skip(names[2], s.UpstreamMissing) && ok
	}
	return s.checkUpstreamStaysLost(ctx, names[2], watch) && ok
}

func (s *suite) checkCSINodeDeleted(ctx context.Context, name string, watch *localnode.Watch) bool {
	return s.checkConfirmedLoss(ctx, name, "13a", watch, func(c *confirmed, began time.Time) (string, problems) {
		if err := s.Client.StorageV1().CSINodes().Delete(ctx, localnode.NodeName, metav1.DeleteOptions{}); err != nil {
			return "", problems{"delete CSINode: " + err.Error()}
		}
		h, err := s.waitHealed(ctx, "13a. CSINode deleted", watch, &c.tl, began, c.uid, maxHeal, false)
		var p problems
		p.addErr(err)
		return fmt.Sprintf("CSINode deleted → %s under Node %s; /status since the deletion: %v", h.describe(began), c.uid, c.tl.describe(began, 0)), p
	})
}

func (s *suite) checkNodeReplaced(ctx context.Context, name string, watch *localnode.Watch) bool {
	return s.checkConfirmedLoss(ctx, name, "13b", watch, func(c *confirmed, began time.Time) (string, problems) {
		node, err := s.replaceNode(ctx)
		if err != nil {
			return "", problems{err.Error()}
		}
		saw := fmt.Sprintf("Node %s deleted, created again as %s +%s", c.uid, node.UID, ms(time.Since(began)))
		var p problems
		if !s.kubeletKeepsNodeUID() {
			h, err := s.waitHealed(ctx, "13b. Node replaced", watch, &c.tl, began, node.UID, maxHeal, false)
			p.addErr(err)
			return saw + " → (the garbage collector) " + h.describe(began) + " under the new Node", p
		}
		saw += s.staleOwner(ctx, watch, c, began, &p)
		if ctx.Err() == nil {
			saw += s.healedByRestart(ctx, watch, &c.tl, node.UID, &p)
		}
		return saw, p
	})
}

// checkConfirmedLoss runs a part of check 13 with this registrar: lose
// takes the driver's registration away and says what followed.
func (s *suite) checkConfirmedLoss(ctx context.Context, name, id string, watch *localnode.Watch, lose func(*confirmed, time.Time) (string, problems)) bool {
	defer s.endOwn(ctx, "13", confirmDaemonSet, localnode.HostpathDriver)
	c := &confirmed{}
	var err error
	if c.pod, c.uid, c.tReady, err = s.deployConfirm(ctx, watch, revConfirm); err != nil {
		return s.report(name, false, "%v", err)
	}
	if c.before, err = registrarStatus(revConfirm.port()); err != nil || c.before.State != "registered" {
		return s.report(name, false, "the pod Ready and the driver in CSINode, but the registrar's /status: %v (%v)", c.before, err)
	}
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	go c.tl.poll(pollCtx, revConfirm.port())
	saw, p := lose(c, time.Now())
	after, errStatus := registrarStatus(revConfirm.port())
	stopPoll()
	republished := uint64(0)
	if errStatus != nil {
		p.add("/status: %v", errStatus)
	} else {
		republished = after.Publications["csinode-lost"] - c.before.Publications["csinode-lost"]
		p.want(republished >= 1, "no csinode-lost publication")
	}
	restarts, err := s.restarted(ctx, c.pod)
	p.want(err == nil && len(restarts) == 0, "containers restarted: %v (%v)", restarts, err)
	p.addErr(s.waitNodeStatus(ctx))
	volume, volumeOK := s.runsVolumePod(ctx, "csinode-"+id)
	p.want(volumeOK, "the volume pod did not run")
	return s.report(name, len(p) == 0, "DaemonSet created → pod Ready, driver in CSINode +%s; %s; now %v; csinode-lost publications: %d (want at least 1); %s; container restarts: %v; %v",
		ms(c.tReady), saw, after, republished, volume, restarts, p)
}

// staleOwner is check 13b's part for kubelet 1.35 to 1.37.
func (s *suite) staleOwner(ctx context.Context, watch *localnode.Watch, c *confirmed, began time.Time, p *problems) string {
	oldUID := string(c.uid)
	namesOld := func(state, reason string) bool { return state == "unconfirmed" && strings.Contains(reason, oldUID) }
	// The garbage collector deletes the stale CSINode within milliseconds,
	// often between two polls of /status: the registrar's log counts too.
	var logAt time.Time
	err := localnode.WaitFor(ctx, "the registrar naming the old Node's UID "+oldUID+" in /status or its log", maxStale, statusPoll, nil, func(context.Context) (bool, error) {
		logAt = firstLogLine(s.containerLog(c.pod, localnode.RegistrarName), oldUID)
		return !logAt.IsZero() || slices.ContainsFunc(c.tl.since(began), func(e statusEntry) bool { return namesOld(e.state, e.reason) }), nil
	})
	p.addErr(err)
	select {
	case <-ctx.Done():
		return " interrupted"
	case <-time.After(time.Until(began.Add(backoffWindow))):
	}
	windowEnd := time.Now()
	w := c.tl.window(began, windowEnd, c.before.Publications["csinode-lost"], namesOld)
	s.timingSince("13b. Node replaced → the registrar logs the stale owner", began, logAt)
	s.timingSince("13b. Node replaced → /status names the stale owner (the first poll that saw it)", began, w.namedAt)
	// Right after a publication /status says that it waits for kubelet.
	finalSaid := "nothing"
	errFinal := localnode.WaitFor(ctx, "/status naming the stale owner "+oldUID+" after the window", staleStatusWait, statusPoll, nil, func(context.Context) (bool, error) {
		st, err := registrarStatus(revConfirm.port())
		if err != nil {
			return false, err
		}
		finalSaid = fmt.Sprintf("%s (%s)", st.State, st.Reason)
		return namesOld(st.State, st.Reason), nil
	})
	p.want(errFinal == nil, "from %s after the replacement, /status said %s for %s: it does not name the stale owner %s, so it does not tell that the Node was replaced and kubelet must restart (%v)", ms(windowEnd.Sub(began)), finalSaid, staleStatusWait, oldUID, errFinal)
	p.want(w.publications <= maxBackoffPublications, "%d publications again in %s: no backoff", w.publications, backoffWindow)
	p.want(!w.registered, "/status said registered while CSINode was owned by a deleted Node")
	return fmt.Sprintf(" → kubelet's CSINode under the old Node's UID, until the garbage collector deleted it: %v; the registrar names the stale owner in its log %s, in /status %s (seen by %d polls, every %s); from %s after the replacement: %s; csinode-lost publications then: %d (at most %d); registered meanwhile: %v; /status since the replacement (first 12 changes): %v",
		staleCSINodes(watch, began, windowEnd, c.uid), since(began, logAt), since(began, w.namedAt), w.named, statusPoll, ms(windowEnd.Sub(began)), finalSaid, w.publications, maxBackoffPublications, w.registered, c.tl.describe(began, 12))
}

// statusWindow is what /status said in a window after a loss.
type statusWindow struct {
	namedAt      time.Time
	named        int
	publications uint64
	registered   bool
}

func (tl *statusTimeline) window(from, to time.Time, lostBefore uint64, names func(state, reason string) bool) statusWindow {
	var w statusWindow
	lost, out := lostBefore, false
	for _, e := range tl.since(from) {
		if e.at.After(to) {
			break
		}
		if names(e.state, e.reason) {
			w.named++
			if w.namedAt.IsZero() {
				w.namedAt = e.at
			}
		}
		lost = e.lost
		out = out || e.state != "registered"
		w.registered = w.registered || (out && e.state == "registered")
	}
	w.publications = lost - lostBefore
	return w
}

// staleCSINodes lists kubelet's CSINodes under the old Node's UID and how
// long each lived until the garbage collector deleted it.
func staleCSINodes(watch *localnode.Watch, began, end time.Time, oldUID types.UID) []string {
	var stale []string
	var staleFrom time.Time
	for _, r := range watch.Between(began, end) {
		switch {
		case r.Registered && r.Owner == oldUID && staleFrom.IsZero():
			staleFrom = r.At
		case !r.Registered && !staleFrom.IsZero():
			stale = append(stale, fmt.Sprintf("+%s for %s", ms(staleFrom.Sub(began)), ms(r.At.Sub(staleFrom))))
			staleFrom = time.Time{}
		}
	}
	return stale
}

// healedByRestart restarts kubelet, which then reads the new Node.
func (s *suite) healedByRestart(ctx context.Context, watch *localnode.Watch, tl *statusTimeline, newUID types.UID, p *problems) string {
	restartAt := time.Now()
	if err := s.RestartKubelet(ctx, "kubelet-13b"); err != nil {
		p.add("restarting kubelet: %v", err)
		return ""
	}
	h, err := s.waitHealed(ctx, "13b. kubelet restarted", watch, tl, restartAt, newUID, maxRestartHeal, true)
	p.addErr(err)
	return fmt.Sprintf("; kubelet restarted (logs/kubelet-13b.log) → driver in CSINode under the new Node %s, /status registered %s", since(restartAt, h.csiNodeAt), since(restartAt, h.statusAt))
}

// firstLogLine returns the time of a CRI log's first line holding substr.
func firstLogLine(log, substr string) time.Time {
	for line := range strings.SplitSeq(log, "\n") {
		if !strings.Contains(line, substr) {
			continue
		}
		stamp, _, _ := strings.Cut(line, " ")
		if t, err := time.Parse(time.RFC3339Nano, stamp); err == nil {
			return t
		}
	}
	return time.Time{}
}

// staysLost wants the driver out of CSINode for upstreamLostFor.
func staysLost(ctx context.Context, watch *localnode.Watch, began time.Time) (string, bool) {
	gone, ok := watch.WaitUntil(ctx, maxHeal, func(r localnode.Registration) bool { return !r.Registered })
	if !ok {
		return fmt.Sprintf("the driver did not leave CSINode within %s", maxHeal), false
	}
	select {
	case <-ctx.Done():
		return "interrupted", false
	case <-time.After(time.Until(gone.At.Add(upstreamLostFor))):
	}
	var back time.Time
	for _, r := range watch.Between(gone.At, time.Now()) {
		if r.Registered && back.IsZero() {
			back = r.At
		}
	}
	if !back.IsZero() {
		return fmt.Sprintf("driver out of CSINode +%s, back %s later", ms(gone.At.Sub(began)), ms(back.Sub(gone.At))), false
	}
	return fmt.Sprintf("driver out of CSINode +%s, still out %s later", ms(gone.At.Sub(began)), upstreamLostFor), true
}

func (s *suite) checkUpstreamStaysLost(ctx context.Context, name string, watch *localnode.Watch) bool {
	var parts []string
	var p problems
	for _, part := range []string{"CSINode deleted", "Node replaced"} {
		line, err := s.upstreamLoss(ctx, watch, part, &p)
		if err != nil {
			return s.report(name, false, "%s: %v", part, err)
		}
		parts = append(parts, line)
	}
	return s.report(name, len(p) == 0, "%s; %v", strings.Join(parts, "; "), p)
}

// upstreamLoss is a part of check 13c: upstream's image must not heal.
func (s *suite) upstreamLoss(ctx context.Context, watch *localnode.Watch, part string, p *problems) (string, error) {
	defer s.endOwn(ctx, "13", confirmDaemonSet, localnode.HostpathDriver)
	pod, _, tReady, err := s.deployConfirm(ctx, watch, revConfirmUpstream)
	if err != nil {
		return "", err
	}
	began := time.Now()
	if part == "CSINode deleted" {
		err = s.Client.StorageV1().CSINodes().Delete(ctx, localnode.NodeName, metav1.DeleteOptions{})
	} else {
		_, err = s.replaceNode(ctx)
	}
	if err != nil {
		return "", err
	}
	lost, ok := staysLost(ctx, watch, began)
	p.want(ok, "%s: %s", part, lost)
	code, body := get(fmt.Sprintf("http://127.0.0.1:%d/healthz", revConfirmUpstream.port()))
	line := fmt.Sprintf("%s: DaemonSet created → pod Ready, driver in CSINode +%s; then %s; upstream's /healthz then %d %q", part, ms(tReady), lost, code, body)
	restarts, _ := s.restarted(ctx, pod)
	p.want(len(restarts) == 0, "%s: containers restarted: %v", part, restarts)
	if part == "Node replaced" && s.kubeletKeepsNodeUID() {
		// Or kubelet creates every later CSINode under the deleted Node.
		restartAt := time.Now()
		if err := s.RestartKubelet(ctx, "kubelet-13c"); err != nil {
			p.add("restarting kubelet: %v", err)
			return line, nil
		}
		back, ok := watch.WaitUntil(ctx, maxRestartHeal, localnode.IsRegistered)
		again := fmt.Sprintf("not within %s", maxRestartHeal)
		if ok {
			again = "+" + ms(back.At.Sub(restartAt))
		}
		line += "; kubelet restarted (logs/kubelet-13c.log): kubelet registers the driver again, CSINode lists it " + again
	}
	return line, nil
}
