package main

// Check 13 (issue 37): with --confirm-csinode, the registrar reports the
// driver registered only once this node's CSINode lists it under the
// current Node, and publishes its socket again when CSINode loses it, so
// that kubelet registers the driver again and writes CSINode. On the real
// node, while the driver is registered:
//
//   - 13a deletes the CSINode object;
//   - 13b replaces the Node object (deleted, then created again under the
//     same name with its labels, annotations, taints and spec, as node
//     repair does: kubelet does not create a deleted Node again,
//     kubernetes/kubernetes#115761), so that the garbage collector deletes
//     the CSINode that the old Node's UID owned. kubelet 1.34 and earlier
//     read the Node when they create a CSINode, and 1.38 and later read its
//     UID again: the registration made again heals it. kubelet 1.35 to 1.37
//     create it under the Node UID they read at their start
//     (kubernetes/kubernetes#131098), which the garbage collector deletes
//     again: the registrar must say so (unconfirmed, the stale owner named
//     in /status until kubelet restarts) and back off, and only a kubelet
//     restart heals;
//   - 13c does both against upstream's image, which has no such flag: the
//     driver stays out of CSINode.
//
// Each part has a DaemonSet of its own, check 8's hostpathplugin with the
// registrar under test (a pod with the driver's CSI inline volume shows the
// node usable again), with deploy/csinode's service account and ClusterRole
// (check 9 binds the node gate's to the same account only later: these
// rules alone must do), and deletes it at the end. Check 8's DaemonSet of the same driver goes
// first. Replacing the Node keeps its startup taint, which check 9, after
// this one, needs; the pods bound to the node keep running (the DaemonSet
// controller deletes only unscheduled pods of a missing node, and no pod
// garbage collector runs here).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	confirmDaemonSet = "csi-confirm"
	// revConfirm is this registrar with --confirm-csinode (HTTP port
	// 9868), revConfirmUpstream upstream's with its own flags only (9869).
	revConfirm         revision = 60
	revConfirmUpstream revision = 61
	// maxHeal is the longest check 13 accepts from the loss (the
	// deletion of CSINode or of the Node) to the driver in CSINode again
	// under the current Node, and to /status registered. The registrar
	// waits 1 s, kubelet's reconciler passes every second: a few seconds
	// are expected.
	maxHeal = 30 * time.Second
	// maxStale is the longest from the Node's replacement to the
	// registrar naming the stale owner (in /status or its log), with
	// kubelet 1.35 to 1.37.
	maxStale = 30 * time.Second
	// backoffWindow and maxBackoffPublications: with kubelet 1.35 to 1.37
	// the loss comes back after every registration; the registrar's
	// wait before each publication doubles from 1 s, so that it publishes
	// at most about five times in the 30 s after the replacement (1, 2,
	// 4, 8, 16 s), where a registrar that did not back off would publish
	// at each loss, every 2-3 s.
	backoffWindow = 30 * time.Second
	// staleStatusWait is how long after backoffWindow /status may take to
	// name the stale owner: one publication's cycle (kubelet registers the
	// driver again, creates the stale CSINode, the garbage collector
	// deletes it) on a loaded node.
	staleStatusWait        = 15 * time.Second
	maxBackoffPublications = 6
	// maxRestartHeal is the longest from a kubelet restart to the driver
	// in CSINode under the current Node and /status registered.
	maxRestartHeal = 2 * time.Minute
	// upstreamLostFor is how long 13c watches the driver stay out of
	// CSINode with upstream's image: many times what the registrar under
	// test takes to heal.
	upstreamLostFor = 20 * time.Second
	// statusPoll is how often the registrar's /status is read.
	statusPoll = 20 * time.Millisecond
)

// kubeletKeepsNodeUID reports whether kubelet creates a CSINode under the
// Node UID it read at its start (1.35 to 1.37: nodeInfoManager's
// CreateCSINode in v1.35.0, v1.36.0 and v1.37.1), rather than the current
// Node's, which it reads when it creates one (v1.34.0, v1.33.13, v1.32.13,
// v1.30.14) and, before it creates or deletes one, again from 1.38
// (v1.38.0-beta.0). By minor number, so that a prerelease of 1.38 counts
// as 1.38.
func (c *cluster) kubeletKeepsNodeUID() bool {
	v := c.kubeletVersion
	return v.Major() == 1 && v.Minor() >= 35 && v.Minor() <= 37
}

// confirmDaemonSetFor is check 8's hostpath DaemonSet under check 13's
// name for rev, without a startup probe; this registrar's revision gets
// deploy/csinode's flag and service account.
func (s *suite) confirmDaemonSetFor(rev revision) (*appsv1.DaemonSet, error) {
	o := own{name: confirmDaemonSet, hostpath: true, keepProbes: true}
	if !rev.upstream() {
		o.account, o.args = true, []string{"--confirm-csinode"}
	}
	return s.ownDaemonSet(rev, o)
}

func (s *suite) nodeUID(ctx context.Context) (types.UID, error) {
	node, err := s.client.CoreV1().Nodes().Get(ctx, nodeName, getOpts)
	if err != nil {
		return "", err
	}
	return node.UID, nil
}

// deployConfirm creates check 13's DaemonSet of rev and waits until its one
// pod is Ready and CSINode lists the driver under the Node uid. It returns
// the pod and how long that took.
func (s *suite) deployConfirm(ctx context.Context, watch *csiNodeWatch, rev revision, uid types.UID) (*corev1.Pod, time.Duration, error) {
	ds, err := s.confirmDaemonSetFor(rev)
	if err != nil {
		return nil, 0, err
	}
	began := time.Now()
	pod, _, err := s.deploy(ctx, ds, watch)
	if err == nil {
		if _, ok := watch.waitUntil(ctx, time.Minute, func(r registration) bool { return r.registered && r.owner == uid }); !ok {
			err = fmt.Errorf("%s not in CSINode under Node %s", hostpathDriver, uid)
		}
	}
	if err != nil {
		st, _ := registrarStatus(rev.port())
		return nil, 0, fmt.Errorf("%v; the registrar's /status: %v", err, st)
	}
	return pod, time.Since(began), nil
}

// confirmed is a part of check 13 under way with this registrar: its pod,
// Ready and registered under the Node uid, and the registrar's /status
// before the loss and since, as polled until stopPoll.
type confirmed struct {
	uid      types.UID
	pod      *corev1.Pod
	tReady   time.Duration // from the DaemonSet's creation
	before   *registrarState
	tl       statusTimeline
	stopPoll context.CancelFunc
}

// startConfirmed deploys revConfirm, checks that /status says registered,
// and starts polling /status. The check's end must call end, also after
// an error.
func (s *suite) startConfirmed(ctx context.Context, watch *csiNodeWatch, id string) (c *confirmed, end func(), err error) {
	pollCtx, stop := context.WithCancel(ctx)
	c = &confirmed{stopPoll: stop}
	end = func() {
		stop()
		s.removeConfirm(ctx, id)
	}
	if c.uid, err = s.nodeUID(ctx); err != nil {
		return nil, end, err
	}
	if c.pod, c.tReady, err = s.deployConfirm(ctx, watch, revConfirm, c.uid); err != nil {
		return nil, end, err
	}
	c.before, err = registrarStatus(revConfirm.port())
	if err != nil || c.before.State != "registered" {
		return nil, end, fmt.Errorf("the pod Ready and the driver in CSINode, but the registrar's /status: %v (%v)", c.before, err)
	}
	go c.tl.poll(pollCtx, revConfirm.port())
	return c, end, nil
}

// removeConfirm keeps the logs of check 13's pods (in _logs/pod-logs-13/),
// deletes its DaemonSet and waits until its pod is gone and CSINode does
// not list the driver.
func (s *suite) removeConfirm(ctx context.Context, id string) {
	s.savePodLogs("13", confirmDaemonSet)
	if err := s.removeDaemonSet(ctx, confirmDaemonSet, hostpathDriver); err != nil {
		fmt.Printf("e2e-node: check %s: %v\n", id, err)
	}
}

// statusEntry is what the registrar's /status said from a moment on.
type statusEntry struct {
	at            time.Time
	state, reason string
	lost          uint64 // socketPublications["csinode-lost"]
}

// statusTimeline records every change of the registrar's /status state,
// reason and csinode-lost publications, read every statusPoll.
type statusTimeline struct {
	mu      sync.Mutex
	entries []statusEntry
}

func (tl *statusTimeline) poll(ctx context.Context, port int32) {
	for ctx.Err() == nil {
		if st, err := registrarStatus(port); err == nil {
			e := statusEntry{at: time.Now(), state: st.State, reason: st.Reason, lost: st.Publications["csinode-lost"]}
			tl.mu.Lock()
			if n := len(tl.entries); n == 0 || tl.entries[n-1].state != e.state || tl.entries[n-1].reason != e.reason || tl.entries[n-1].lost != e.lost {
				tl.entries = append(tl.entries, e)
			}
			tl.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(statusPoll):
		}
	}
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

// healing is when, from a loss at began, CSINode listed the driver again
// under the expected Node and /status said registered again; zero if not.
type healing struct {
	lostAt, csiNodeAt, statusAt time.Time
}

// timingSince records t's offset from began as a timing, if t is set.
func (s *suite) timingSince(what string, began, t time.Time) {
	if !t.IsZero() {
		s.timing(what, t.Sub(began))
	}
}

// since is t's offset from began, or "never".
func since(began, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return "+" + ms(t.Sub(began))
}

// waitHealed waits up to bound for watch and tl to record, from began, the
// driver out of CSINode, then in it again owned by uid, and /status other
// than registered, then registered again. After a kubelet restart (lost),
// both count as out from began.
func waitHealed(ctx context.Context, what string, watch *csiNodeWatch, tl *statusTimeline, began time.Time, uid types.UID, bound time.Duration, lost bool) (healing, error) {
	var h healing
	err := waitFor(ctx, what, bound, statusPoll, nil, func(context.Context) (bool, error) {
		h = healing{}
		if lost {
			h.lostAt = began
		}
		for _, r := range watch.between(began, time.Now()) {
			switch {
			case !r.registered && h.lostAt.IsZero():
				h.lostAt = r.at
			case r.registered && r.owner == uid && !h.lostAt.IsZero() && h.csiNodeAt.IsZero():
				h.csiNodeAt = r.at
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
	return h, err
}

// replaceNode deletes the Node and creates one of the same name with its
// labels, annotations and spec (its taints among them), as node repair
// does; kubelet writes the new one's status. It returns the new Node.
func (s *suite) replaceNode(ctx context.Context) (*corev1.Node, error) {
	old, err := s.client.CoreV1().Nodes().Get(ctx, nodeName, getOpts)
	if err != nil {
		return nil, err
	}
	// Background, as kubectl delete node: the garbage collector deletes
	// what the Node owns (its CSINode, its Lease).
	background := metav1.DeletePropagationBackground
	uid := old.UID
	if err := s.client.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{
		PropagationPolicy: &background, Preconditions: &metav1.Preconditions{UID: &uid},
	}); err != nil {
		return nil, fmt.Errorf("delete Node: %w", err)
	}
	fresh := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: old.Name, Labels: old.Labels, Annotations: old.Annotations},
		Spec:       old.Spec,
	}
	var created *corev1.Node
	err = waitFor(ctx, "the Node created again", 30*time.Second, 20*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		created, err = s.client.CoreV1().Nodes().Create(ctx, fresh, metav1.CreateOptions{})
		return err == nil, err
	})
	return created, err
}

// waitNodeStatus waits until kubelet has written the replaced Node's
// status (the scheduler places no pod on a Node without it).
func (s *suite) waitNodeStatus(ctx context.Context) error {
	return waitFor(ctx, "kubelet's status on the new Node", time.Minute, 100*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		node, err := s.client.CoreV1().Nodes().Get(ctx, nodeName, getOpts)
		return err == nil && node.Status.NodeInfo.KubeletVersion != "" && len(node.Status.Allocatable) > 0, err
	})
}

// runsVolumePod starts a pod with the driver's inline volume and deletes it,
// as check 8a does.
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

// restarted lists the containers of pod that restarted, or changed since
// pod was read.
func (s *suite) restarted(ctx context.Context, pod *corev1.Pod) ([]string, error) {
	now, err := s.client.CoreV1().Pods(namespace).Get(ctx, pod.Name, getOpts)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, st := range now.Status.ContainerStatuses {
		was := containerStatus(pod, st.Name)
		if st.RestartCount > 0 || was == nil || was.ContainerID != st.ContainerID {
			out = append(out, fmt.Sprintf("%s: restartCount %d", st.Name, st.RestartCount))
		}
	}
	return out, nil
}

// containerLog is a container's log of pod, as kubelet keeps it.
func (s *suite) containerLog(pod *corev1.Pod, container string) string {
	return readLogs(s.path("pod-logs", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), container))
}

// readLogs reads the log files of a container's directory in kubelet's
// pod logs, in order.
func readLogs(dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	sort.Strings(files)
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		b.Write(data)
	}
	return b.String()
}

// checkCSINode runs check 13.
func (s *suite) checkCSINode(ctx context.Context) bool {
	replaced := "kubelet " + s.kubeletVersion.String() + " (1.34 or earlier, 1.38 or later) creates the CSINode again under the new Node: CSINode lists the driver again under the new Node's UID within " + maxHeal.String() + ", /status registered, an inline-volume pod runs"
	if s.kubeletKeepsNodeUID() {
		replaced = fmt.Sprintf("kubelet %s (1.35 to 1.37) creates the CSINode again under the old Node's UID, which the garbage collector deletes again: the registrar finds the stale owner within %s, %s after the replacement /status is still unconfirmed naming it, never registered meanwhile, at most %d publications again in that time, no container restart; then kubelet restarted: CSINode lists the driver under the new Node within %s, /status registered, an inline-volume pod runs",
			s.kubeletVersion, maxStale, backoffWindow, maxBackoffPublications, maxRestartHeal)
	}
	names := []string{
		"13a. --confirm-csinode, CSINode deleted while the driver is registered: the registrar publishes its socket again (csinode-lost), CSINode lists the driver again under the current Node within " + maxHeal.String() + ", /status registered again, an inline-volume pod runs",
		"13b. --confirm-csinode, Node replaced (deleted and created again, as node repair does) while the driver is registered: the garbage collector deletes the old Node's CSINode; " + replaced,
		fmt.Sprintf("13c. upstream's image, CSINode deleted, then Node replaced: the driver stays out of CSINode for %s after each loss (no healing: the comparison)", upstreamLostFor),
	}
	if *hostpathMissing != "" {
		for _, name := range names {
			s.skip(name, *hostpathMissing)
		}
		return false
	}
	// Check 8's DaemonSet registers the same driver.
	if err := s.removeDaemonSet(ctx, hostpathDaemonSet, hostpathDriver); err != nil {
		return s.failAll(names, "removing check 8's DaemonSet: %v", err)
	}
	// deploy/csinode's account, and check 8's CSIDriver if check 8 did not leave it.
	err := s.applyManifests(ctx, nil, s.deployFile("csinode/rbac.yaml"), s.deployFile("csinode/service-account/service-account.yaml"))
	if err == nil {
		if _, err = s.client.StorageV1().CSIDrivers().Create(ctx, hostpathCSIDriver(), metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			err = nil
		}
	}
	if err != nil {
		return s.failAll(names, "%v", err)
	}
	watch, stopWatch := s.startWatch(ctx, hostpathDriver)
	defer stopWatch()

	ok := s.checkCSINodeDeleted(ctx, names[0], watch)
	ok = s.checkNodeReplaced(ctx, names[1], watch) && ok
	if s.upstreamMissing != "" {
		return s.skip(names[2], s.upstreamMissing) && ok
	}
	return s.checkUpstreamStaysLost(ctx, names[2], watch) && ok
}

// checkCSINodeDeleted is check 13a.
func (s *suite) checkCSINodeDeleted(ctx context.Context, name string, watch *csiNodeWatch) bool {
	c, end, err := s.startConfirmed(ctx, watch, "13a")
	defer end()
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	uid, pod, tReady, before, tl := c.uid, c.pod, c.tReady, c.before, &c.tl

	began := time.Now()
	if err := s.client.StorageV1().CSINodes().Delete(ctx, nodeName, metav1.DeleteOptions{}); err != nil {
		return s.report(name, false, "delete CSINode: %v", err)
	}
	h, errHeal := waitHealed(ctx, "the driver in CSINode again and /status registered", watch, tl, began, uid, maxHeal, false)
	after, errStatus := registrarStatus(revConfirm.port())
	c.stopPoll()
	s.timingSince("13a. CSINode deleted → "+hostpathDriver+" in CSINode again, owned by the current Node", began, h.csiNodeAt)
	s.timingSince("13a. CSINode deleted → /status registered again", began, h.statusAt)
	var states []string
	for _, e := range tl.since(began) {
		states = append(states, fmt.Sprintf("%s %s (%s)", since(began, e.at), e.state, e.reason))
	}
	if errHeal != nil || errStatus != nil {
		return s.report(name, false, "%v; driver out of CSINode %s, back %s, /status registered %s; /status since the deletion: %v; now: %v (%v)",
			errHeal, since(began, h.lostAt), since(began, h.csiNodeAt), since(began, h.statusAt), states, after, errStatus)
	}
	republished := after.Publications["csinode-lost"] - before.Publications["csinode-lost"]
	volume, volumeOK := s.runsVolumePod(ctx, "csinode-13a")
	restarts, err := s.restarted(ctx, pod)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	ok := republished >= 1 && volumeOK && len(restarts) == 0
	return s.report(name, ok, "DaemonSet created → pod Ready, driver in CSINode +%s; CSINode deleted → driver out of CSINode %s → in CSINode again under Node %s %s, /status registered %s; csinode-lost publications: %d (want at least 1); /status since the deletion: %v; %s; container restarts: %v",
		ms(tReady), since(began, h.lostAt), uid, since(began, h.csiNodeAt), since(began, h.statusAt), republished, states, volume, restarts)
}

// checkNodeReplaced is check 13b.
func (s *suite) checkNodeReplaced(ctx context.Context, name string, watch *csiNodeWatch) bool {
	c, end, err := s.startConfirmed(ctx, watch, "13b")
	defer end()
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	oldUID, pod, tReady, before, tl := c.uid, c.pod, c.tReady, c.before, &c.tl

	began := time.Now()
	node, err := s.replaceNode(ctx)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	newUID := node.UID
	replacement := fmt.Sprintf("DaemonSet created → pod Ready, driver in CSINode +%s; Node %s deleted, created again as %s +%s", ms(tReady), oldUID, newUID, ms(time.Since(began)))
	var problems []string
	if !s.kubeletKeepsNodeUID() {
		h, err := waitHealed(ctx, "the driver in CSINode again under the new Node and /status registered", watch, tl, began, newUID, maxHeal, false)
		s.timingSince("13b. Node replaced → "+hostpathDriver+" in CSINode again, owned by the new Node", began, h.csiNodeAt)
		s.timingSince("13b. Node replaced → /status registered again", began, h.statusAt)
		replacement += fmt.Sprintf(" → driver out of CSINode (the garbage collector) %s → in CSINode again under the new Node %s, /status registered %s", since(began, h.lostAt), since(began, h.csiNodeAt), since(began, h.statusAt))
		if err != nil {
			problems = append(problems, err.Error())
		}
	} else {
		replacement += s.staleOwner(ctx, watch, tl, pod, began, before.Publications["csinode-lost"], oldUID, &problems)
		if ctx.Err() == nil {
			replacement += s.healedByRestart(ctx, watch, tl, newUID, &problems)
		}
	}
	after, errStatus := registrarStatus(revConfirm.port())
	c.stopPoll()
	if errStatus != nil {
		problems = append(problems, "/status: "+errStatus.Error())
	} else if republished := after.Publications["csinode-lost"] - before.Publications["csinode-lost"]; republished < 1 {
		problems = append(problems, "no csinode-lost publication")
	}
	restarts, err := s.restarted(ctx, pod)
	if err != nil {
		return s.report(name, false, "%s; %v", replacement, err)
	}
	if len(restarts) > 0 {
		problems = append(problems, fmt.Sprintf("containers restarted: %v", restarts))
	}
	if err := s.waitNodeStatus(ctx); err != nil {
		problems = append(problems, err.Error())
	}
	volume, volumeOK := s.runsVolumePod(ctx, "csinode-13b")
	if !volumeOK {
		problems = append(problems, "the volume pod did not run")
	}
	return s.report(name, len(problems) == 0, "%s; %v; %s; problems: %d %v", replacement, after, volume, len(problems), problems)
}

// staleOwner is check 13b's part for kubelet 1.35 to 1.37: the registrar
// names the stale owner, never says registered, backs off and does not
// restart. It returns what it saw and adds what is wrong to problems.
func (s *suite) staleOwner(ctx context.Context, watch *csiNodeWatch, tl *statusTimeline, pod *corev1.Pod, began time.Time, lostBefore uint64, oldUID types.UID, problems *[]string) string {
	// The registrar finds the stale owner: /status names it, or, as the
	// garbage collector deletes the stale CSINode within milliseconds,
	// often between two polls, the registrar's log does.
	namesOld := func(e statusEntry) bool {
		return e.state == "unconfirmed" && strings.Contains(e.reason, string(oldUID))
	}
	var logAt time.Time
	err := waitFor(ctx, "the registrar naming the old Node's UID "+string(oldUID)+" in /status or its log", maxStale, statusPoll, nil, func(context.Context) (bool, error) {
		logAt = firstLogLine(s.containerLog(pod, registrarName), string(oldUID))
		return !logAt.IsZero() || slices.ContainsFunc(tl.since(began), namesOld), nil
	})
	if err != nil {
		*problems = append(*problems, err.Error())
	}
	select {
	case <-ctx.Done():
		return " interrupted"
	case <-time.After(time.Until(began.Add(backoffWindow))):
	}
	windowEnd := time.Now()
	var statusAt time.Time
	polls := 0
	for _, e := range tl.since(began) {
		if namesOld(e) {
			polls++
			if statusAt.IsZero() {
				statusAt = e.at
			}
		}
	}
	s.timingSince("13b. Node replaced → the registrar logs the stale owner", began, logAt)
	s.timingSince("13b. Node replaced → /status names the stale owner (the first poll that saw it)", began, statusAt)
	// What a user reading /status is told: the replaced Node, as long as
	// the driver is not usable. Read from the window's end until it says
	// so, for a publication's cycle at most: right after a publication
	// it says that it waits for kubelet, for as long as kubelet takes.
	var final *registrarState
	errFinal := waitFor(ctx, "/status naming the stale owner "+string(oldUID)+" after the window", staleStatusWait, statusPoll, nil, func(context.Context) (bool, error) {
		st, err := registrarStatus(revConfirm.port())
		if err != nil {
			return false, err
		}
		final = st
		return final.State == "unconfirmed" && strings.Contains(final.Reason, string(oldUID)), nil
	})
	finalSaid := "nothing"
	if final != nil {
		finalSaid = fmt.Sprintf("%s (%s)", final.State, final.Reason)
	}
	if errFinal != nil {
		*problems = append(*problems, fmt.Sprintf("from %s after the replacement, /status said %s for %s: it does not name the stale owner %s, so it does not tell that the Node was replaced and kubelet must restart (%v)", ms(windowEnd.Sub(began)), finalSaid, staleStatusWait, oldUID, errFinal))
	}
	// kubelet's CSINode under the old Node, and the garbage collector's
	// deletion of it, as the watch saw them.
	var stale []string
	var staleFrom time.Time
	for _, r := range watch.between(began, windowEnd) {
		switch {
		case r.registered && r.owner == oldUID && staleFrom.IsZero():
			staleFrom = r.at
		case !r.registered && !staleFrom.IsZero():
			stale = append(stale, fmt.Sprintf("+%s for %s", ms(staleFrom.Sub(began)), ms(r.at.Sub(staleFrom))))
			staleFrom = time.Time{}
		}
	}
	lost := lostBefore
	var out, registered bool
	for _, e := range tl.since(began) {
		if e.at.After(windowEnd) {
			break
		}
		lost = e.lost
		out = out || e.state != "registered"
		registered = registered || (out && e.state == "registered")
	}
	publications := lost - lostBefore
	if publications > maxBackoffPublications {
		*problems = append(*problems, fmt.Sprintf("%d publications again in %s: no backoff", publications, backoffWindow))
	}
	if registered {
		*problems = append(*problems, "/status said registered while CSINode was owned by a deleted Node")
	}
	var states []string
	for _, e := range tl.since(began) {
		if len(states) < 12 {
			states = append(states, fmt.Sprintf("%s %s (%s) csinode-lost %d", since(began, e.at), e.state, e.reason, e.lost))
		}
	}
	return fmt.Sprintf(" → kubelet's CSINode under the old Node's UID, until the garbage collector deleted it: %v; the registrar names the stale owner in its log %s, in /status %s (seen by %d polls, every %s); from %s after the replacement: %s; csinode-lost publications then: %d (at most %d); registered meanwhile: %v; /status since the replacement (first 12 changes): %v",
		stale, since(began, logAt), since(began, statusAt), polls, statusPoll, ms(windowEnd.Sub(began)), finalSaid, publications, maxBackoffPublications, registered, states)
}

// healedByRestart restarts kubelet, which then creates CSINode under the
// new Node, and waits for the driver there and /status registered. It
// returns what it saw and adds what is wrong to problems.
func (s *suite) healedByRestart(ctx context.Context, watch *csiNodeWatch, tl *statusTimeline, newUID types.UID, problems *[]string) string {
	restartAt := time.Now()
	if err := s.restartKubelet(ctx, "kubelet-13b"); err != nil {
		*problems = append(*problems, "restarting kubelet: "+err.Error())
		return ""
	}
	h, err := waitHealed(ctx, "after kubelet's restart, the driver in CSINode under the current Node and /status registered", watch, tl, restartAt, newUID, maxRestartHeal, true)
	if err != nil {
		*problems = append(*problems, err.Error())
	}
	s.timingSince("13b. kubelet restarted → "+hostpathDriver+" in CSINode under the new Node", restartAt, h.csiNodeAt)
	s.timingSince("13b. kubelet restarted → /status registered", restartAt, h.statusAt)
	return fmt.Sprintf("; kubelet restarted (logs/kubelet-13b.log) → driver in CSINode under the new Node %s, /status registered %s", since(restartAt, h.csiNodeAt), since(restartAt, h.statusAt))
}

// firstLogLine returns the time of the first line of a container's log
// (CRI format: an RFC 3339 time first) that holds substr, or zero.
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

// staysLost waits up to maxHeal for the driver to leave CSINode after
// began, then watches it stay out for upstreamLostFor. It says what it saw
// and whether the driver stayed out.
func staysLost(ctx context.Context, watch *csiNodeWatch, began time.Time) (string, bool) {
	gone, ok := watch.waitUntil(ctx, maxHeal, func(r registration) bool { return !r.registered })
	if !ok {
		return fmt.Sprintf("the driver did not leave CSINode within %s", maxHeal), false
	}
	select {
	case <-ctx.Done():
		return "interrupted", false
	case <-time.After(time.Until(gone.at.Add(upstreamLostFor))):
	}
	var back time.Time
	for _, r := range watch.between(gone.at, time.Now()) {
		if r.registered && back.IsZero() {
			back = r.at
		}
	}
	if !back.IsZero() {
		return fmt.Sprintf("driver out of CSINode +%s, back %s later", ms(gone.at.Sub(began)), ms(back.Sub(gone.at))), false
	}
	return fmt.Sprintf("driver out of CSINode +%s, still out %s later", ms(gone.at.Sub(began)), upstreamLostFor), true
}

// checkUpstreamStaysLost is check 13c.
func (s *suite) checkUpstreamStaysLost(ctx context.Context, name string, watch *csiNodeWatch) bool {
	var parts []string
	var problems []string
	for _, part := range []string{"CSINode deleted", "Node replaced"} {
		uid, err := s.nodeUID(ctx)
		if err != nil {
			return s.report(name, false, "%v", err)
		}
		pod, tReady, err := s.deployConfirm(ctx, watch, revConfirmUpstream, uid)
		if err != nil {
			s.removeConfirm(ctx, "13c")
			return s.report(name, false, "%s: %v", part, err)
		}
		began := time.Now()
		if part == "CSINode deleted" {
			err = s.client.StorageV1().CSINodes().Delete(ctx, nodeName, metav1.DeleteOptions{})
		} else {
			_, err = s.replaceNode(ctx)
		}
		if err != nil {
			s.removeConfirm(ctx, "13c")
			return s.report(name, false, "%s: %v", part, err)
		}
		lost, ok := staysLost(ctx, watch, began)
		if !ok {
			problems = append(problems, part+": "+lost)
		}
		code, body := get(fmt.Sprintf("http://127.0.0.1:%d/healthz", revConfirmUpstream.port()))
		line := fmt.Sprintf("%s: DaemonSet created → pod Ready, driver in CSINode +%s; then %s; upstream's /healthz then %d %q", part, ms(tReady), lost, code, body)
		if restarts, err := s.restarted(ctx, pod); err == nil && len(restarts) > 0 {
			problems = append(problems, fmt.Sprintf("%s: containers restarted: %v", part, restarts))
		}
		if part == "Node replaced" && s.kubeletKeepsNodeUID() {
			// Otherwise kubelet would create every CSINode under the
			// deleted Node until the run ends.
			restartAt := time.Now()
			if err := s.restartKubelet(ctx, "kubelet-13c"); err != nil {
				problems = append(problems, "restarting kubelet: "+err.Error())
			} else {
				back, ok := watch.waitUntil(ctx, maxRestartHeal, isRegistered)
				again := fmt.Sprintf("not within %s", maxRestartHeal)
				if ok {
					again = "+" + ms(back.at.Sub(restartAt))
				}
				line += "; kubelet restarted (logs/kubelet-13c.log): kubelet registers the driver again, CSINode lists it " + again
			}
		}
		parts = append(parts, line)
		s.removeConfirm(ctx, "13c")
	}
	return s.report(name, len(problems) == 0, "%s; problems: %d %v", strings.Join(parts, "; "), len(problems), problems)
}
