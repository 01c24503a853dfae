package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/e2e/harness"
	"github.com/csi-registrar/node-driver-registrar/test/kubelet/report"
)

// image is the registrar a DaemonSet's pod runs.
type image string

const (
	// upstreamImage is kubernetes-csi/node-driver-registrar, the one users
	// run today (harness.FindUpstreamRegistrar).
	upstreamImage image = "upstream"
	ourImage      image = "ours"
)

const (
	// ourGrace bounds our registrar's exit after SIGTERM, whatever clients
	// are connected (docs/architecture.md, "Behaviour"): well within a pod's default
	// terminationGracePeriodSeconds of 30.
	ourGrace = 5 * time.Second
	// settlePeriods is how many reconcile periods without a report about
	// the driver make kubelet settled: it acts on a socket's creation or
	// removal at its next pass.
	settlePeriods = 3
	// tailLines is how much of each registrar's output a failed case shows
	// next to kubelet's reports.
	tailLines = 30
)

// rolloutCase is one change of a DaemonSet's registrar image on a node.
type rolloutCase struct {
	from, to image
	// maxSurge 0: the old pod is stopped before the new one starts; 1: the
	// new pod starts while the old one runs, and the old one is stopped
	// once the new one has settled.
	maxSurge int
	// maxDeregistrations is how many times kubelet may deregister the
	// driver during the rollout.
	maxDeregistrations int
	// driverLost: the rollout ends with the driver unregistered and no
	// socket at the path. Only upstream to upstream with maxSurge 1, the
	// baseline users have today: the old pod's SIGTERM unlinks the new
	// pod's socket, and upstream never publishes it again.
	driverLost bool
	// attempts: how many times the case runs, each on a node of its own,
	// for an outcome that depends on a race; 0 means once.
	attempts int
	// attempt numbers the run when there are several.
	attempt int
}

func (c rolloutCase) name() string {
	name := fmt.Sprintf("%s-to-%s/maxSurge=%d", c.from, c.to, c.maxSurge)
	if c.attempts > 1 {
		name += fmt.Sprintf("/attempt=%d", c.attempt)
	}
	return name
}

func (c rolloutCase) driver() string {
	return fmt.Sprintf("%s-%s-%d-%d.rollout.e2e.example.com", c.from, c.to, c.maxSurge, c.attempt)
}

// Rollouts in the user's world: a DaemonSet whose registrar image changes
// from upstream's to ours, back, or to a newer version of the same, with
// maxSurge 0 or 1, under kubelet's plugin manager and CSI handler. Each case
// starts the old instance and waits until kubelet has registered the
// driver, rolls out, waits until kubelet has settled, and then checks what
// the user sees: CSINode lists the driver with its node ID, the socket at
// the path is the new instance's, kubelet deregistered the driver at most
// once (never, for ours to ours with maxSurge 1: the handover), the process
// that left left nothing in the registry, the old one exited 0 after its
// SIGTERM (ours within its grace) and the new one still runs. With maxSurge
// 1, while both run, neither may take the path from the other.
func TestRollout(t *testing.T) {
	t.Parallel()
	upstreamBin, upstreamErr := harness.FindUpstreamRegistrar()
	for _, tc := range []rolloutCase{
		{from: upstreamImage, to: upstreamImage, maxSurge: 0, maxDeregistrations: 1},
		// Two deregistrations when kubelet registered the new socket
		// before the old pod unlinked it, one when it had not yet.
		{from: upstreamImage, to: upstreamImage, maxSurge: 1, maxDeregistrations: 2, driverLost: true},
		{from: upstreamImage, to: ourImage, maxSurge: 0, maxDeregistrations: 1},
		{from: upstreamImage, to: ourImage, maxSurge: 1, maxDeregistrations: 1},
		{from: ourImage, to: upstreamImage, maxSurge: 0, maxDeregistrations: 1},
		// The rollback: the old instance, ours, must leave upstream's new
		// socket alone although upstream removes the path before it binds.
		// Microseconds separate the two. An old instance that took the
		// removal for a deletion and published again at once (before the
		// 100 ms grace of an empty path) won that race in a third to all
		// of the runs, depending on the load (on two cores): upstream then
		// exited 1 on EADDRINUSE, or found its socket replaced. Six runs
		// make a miss of such a race unlikely.
		{from: ourImage, to: upstreamImage, maxSurge: 1, maxDeregistrations: 1, attempts: 6},
		{from: ourImage, to: ourImage, maxSurge: 0, maxDeregistrations: 1},
		{from: ourImage, to: ourImage, maxSurge: 1, maxDeregistrations: 0},
	} {
		for attempt := 1; attempt <= max(tc.attempts, 1); attempt++ {
			tc := tc
			tc.attempt = attempt
			t.Run(tc.name(), func(t *testing.T) {
				t.Parallel()
				if (tc.from == upstreamImage || tc.to == upstreamImage) && upstreamErr != nil {
					if os.Getenv("CI") != "" {
						// CI always has ../shared/interop: a skip there hides a failure.
						t.Fatalf("this rollout needs upstream's registrar, and CI must have it: %v", upstreamErr)
					}
					t.Skipf("this rollout needs upstream's registrar: %v", upstreamErr)
				}
				r := &rollout{rolloutCase: tc, t: t, e: newEnv(t, tc.driver()), upstreamBin: upstreamBin}
				r.run()
			})
		}
	}
}

// instance is one pod's registrar.
type instance struct {
	*harness.Registrar
	image image
}

// rollout is one case as it runs.
type rollout struct {
	rolloutCase
	t           *testing.T
	e           *env
	upstreamBin string
	k           *harness.Kubelet
	old, new    *instance

	began                          time.Time
	firstReport                    int // index of kubelet's first report after began
	registrations, deregistrations int // kubelet's counts before the rollout
	oldExit                        string
}

func (r *rollout) run() {
	t, e := r.t, r.e
	r.k = e.startKubelet()
	e.startDriver(false)
	r.old = r.start("old-" + string(r.from))
	e.waitRegistered(r.k)
	r.waitForVerdict(r.old)
	// Deferred, not a cleanup: the processes still run.
	defer r.reportOnFailure()

	r.began = time.Now()
	r.firstReport = len(r.k.ReceivedEvents())
	r.registrations = r.k.CountEvents(e.driver, report.Register, true)
	r.deregistrations = r.k.CountEvents(e.driver, report.Deregister, false)
	switch r.maxSurge {
	case 0:
		r.stopOld()
		r.new = r.start("new-" + string(r.to))
		r.waitSettled(r.new)
	case 1:
		r.new = r.start("new-" + string(r.to))
		r.waitSettled(r.new)
		r.assertNoFight()
		r.stopOld()
	default:
		t.Fatalf("maxSurge %d: only 0 and 1 are simulated", r.maxSurge)
	}
	r.assertOutcome()
}

// start starts an instance of the image the step needs, on the env's
// driver, with -v=4: each kubelet call, not each probe.
func (r *rollout) start(name string) *instance {
	r.t.Helper()
	img := r.from
	if r.old != nil {
		img = r.to
	}
	verbosity := func(cfg *harness.RegistrarConfig) { cfg.Verbosity = 4 }
	if img == ourImage {
		return &instance{Registrar: r.e.startRegistrar(name, verbosity), image: img}
	}
	// Upstream's command line: it has no --termination-message-path.
	upstreamFlags := func(cfg *harness.RegistrarConfig) { cfg.TerminationMessagePath = "" }
	return &instance{Registrar: r.e.startRegistrarBinary(name, r.upstreamBin, verbosity, upstreamFlags), image: img}
}

// waitForVerdict waits until the instance has kubelet's verdict on its
// registration: what our handover needs before it moves a socket.
func (r *rollout) waitForVerdict(in *instance) {
	r.t.Helper()
	var err error
	if in.image == ourImage {
		_, err = in.WaitForReadyz(waitTimeout, 200, "registered")
	} else {
		_, err = in.WaitForLine(waitTimeout, "plugin_registered:true")
	}
	if err != nil {
		r.t.Fatalf("before the rollout: %v", err)
	}
}

// waitSettled waits until a new instance has done what it does at start:
// ours is registered (/readyz 200), or reports that it stepped aside or
// defers to the instance at the path; upstream's has bound its socket at
// the path, which answers GetInfo for the driver.
func (r *rollout) waitSettled(in *instance) {
	// An exit ends the polls; it is reported below.
	exited := func() bool { done, _ := in.Exited(); return done }
	var err error
	if in.image == ourImage {
		err = harness.Eventually(waitTimeout, pollInterval, in.Name+" to be registered, or to step aside or defer", func() (bool, error) {
			if exited() {
				return true, nil
			}
			code, body, err := in.Readyz()
			if err != nil || code == 200 {
				return err == nil, err
			}
			st, err := in.Status()
			if err != nil {
				return false, err
			}
			deferring := strings.Contains(strings.ToLower(st.State+" "+st.Reason), "defer")
			return st.State == stateSuperseded || deferring, fmt.Errorf("/readyz %d %q, /status state %q", code, body, st.State)
		})
	} else {
		_, err = in.WaitForLine(waitTimeout, "Registration Server started")
		if err == nil {
			err = harness.Eventually(waitTimeout, pollInterval, "the socket at the path to answer GetInfo", func() (bool, error) {
				if exited() {
					return true, nil
				}
				info, err := harness.GetInfo(r.e.regSocket(), time.Second)
				if err != nil {
					return false, err
				}
				return info.Name == r.e.driver, fmt.Errorf("GetInfo names %q", info.Name)
			})
		}
	}
	if done, code := in.Exited(); done {
		r.t.Fatalf("%s exited early, with %d, before it settled: want it running", in.Name, code)
	}
	if err != nil {
		r.t.Fatalf("rollout: %v", err)
	}
}

// stopOld sends the old instance SIGTERM, as kubelet does when it deletes
// the pod, and waits for its exit.
func (r *rollout) stopOld() {
	t := r.t
	if exited, code := r.old.Exited(); exited {
		t.Fatalf("%s exited early, with %d, before its SIGTERM", r.old.Name, code)
	}
	signalled := time.Now()
	if err := r.old.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := r.old.Wait(exitTimeout)
	if err != nil {
		t.Fatalf("after SIGTERM: %v", err)
	}
	took := time.Since(signalled)
	r.oldExit = fmt.Sprintf("exit %d after %v", code, took.Round(time.Millisecond))
	if code != 0 {
		t.Errorf("%s exited with %d after SIGTERM, want 0", r.old.Name, code)
	}
	if r.old.image == ourImage && took > ourGrace {
		t.Errorf("%s exited %v after SIGTERM, want within its grace of %v", r.old.Name, took.Round(time.Millisecond), ourGrace)
	}
}

// listener says who serves the path: the socket file and the process that
// listened on the socket that accepts there.
type listener struct {
	inode uint64
	pid   int
}

func (r *rollout) listenerAtPath() (listener, error) {
	ino, err := statSocket(r.e.regSocket())
	if err != nil {
		return listener{}, err
	}
	pid, err := harness.ListenerPID(r.e.regSocket(), time.Second)
	if err != nil {
		return listener{}, fmt.Errorf("connecting to the socket at the path: %w", err)
	}
	return listener{inode: ino, pid: pid}, nil
}

// describe names the process a listener belongs to: after a handover,
// the instance that listened first.
func (r *rollout) describe(l listener) string {
	who := "neither instance"
	switch l.pid {
	case r.old.Pid():
		who = r.old.Name
	case r.new.Pid():
		who = r.new.Name
	}
	return fmt.Sprintf("inode %d, listened on by pid %d (%s)", l.inode, l.pid, who)
}

// assertNoFight checks, with maxSurge 1 while both instances run, that the
// path keeps the socket it holds once the new one has settled, for
// settlePeriods reconcile periods: an instance that fights publishes again
// within milliseconds of the other's file event, and kubelet would act on
// it within a period. The socket is the new instance's (for ours,
// registered), unless ours defers to the old one; an old instance of ours
// reports that it stepped aside.
func (r *rollout) assertNoFight() {
	t := r.t
	settled, err := r.listenerAtPath()
	if err != nil {
		t.Errorf("while both instances run: %v", err)
		return
	}
	err = harness.Eventually(settlePeriods*reconcilePeriod, pollInterval, "a change at the path", func() (bool, error) {
		ino, err := statSocket(r.e.regSocket())
		oldExited, _ := r.old.Exited()
		newExited, _ := r.new.Exited()
		return err != nil || ino != settled.inode || oldExited || newExited, nil
	})
	if err == nil {
		now, nowErr := r.listenerAtPath()
		t.Errorf("while both instances ran, the path changed within %d reconcile periods after %s settled: it held %s, now %s (%v)",
			settlePeriods, r.new.Name, r.describe(settled), r.describe(now), nowErr)
	}
	for _, in := range []*instance{r.old, r.new} {
		if exited, code := in.Exited(); exited {
			t.Fatalf("%s exited early, with %d, while both instances ran", in.Name, code)
		}
	}
	now, err := r.listenerAtPath()
	if err != nil {
		t.Errorf("while both instances run: %v", err)
		return
	}
	newHolds := true
	if r.new.image == upstreamImage {
		if now.pid != r.new.Pid() {
			t.Errorf("while both instances run, the path holds %s, want %s's socket", r.describe(now), r.new.Name)
			newHolds = false
		}
	} else if code, body, err := r.new.Readyz(); err != nil || code != 200 {
		// Not registered: it defers to the old instance, whose socket
		// must then be at the path.
		newHolds = false
		if now.pid != r.old.Pid() {
			t.Errorf("while both instances run, %s defers (/readyz %d %q, %v), but the path holds %s, not %s's socket",
				r.new.Name, code, body, err, r.describe(now), r.old.Name)
		}
	}
	if newHolds && r.old.image == ourImage {
		st, err := r.old.Status()
		if err != nil || st.State != stateSuperseded {
			t.Errorf("while both instances run, %s's /status state is %q (%v), want %q: the path holds %s",
				r.old.Name, st.State, err, stateSuperseded, r.describe(now))
		}
	}
}

// waitForKubeletToSettle waits until kubelet has reported nothing about the
// driver for settlePeriods reconcile periods.
func (r *rollout) waitForKubeletToSettle() error {
	deadline := time.Now().Add(waitTimeout)
	for {
		seen := len(r.k.EventsFor(r.e.driver))
		err := r.k.WaitUntil(settlePeriods*reconcilePeriod, "a report about the driver", func() bool {
			return len(r.k.EventsFor(r.e.driver)) != seen
		})
		if err != nil {
			if exited, _ := r.k.Exited(); exited {
				return err
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubelet still reports about driver %q %v after the rollout", r.e.driver, waitTimeout)
		}
	}
}

// absences are the stretches of time during which CSINode did not list the
// driver, from kubelet's reports since the rollout began.
type absences struct {
	count int
	total time.Duration
	// open: CSINode does not list the driver at the end.
	open bool
}

func (r *rollout) absences() absences {
	var a absences
	listed, since := true, time.Time{}
	for _, ev := range r.k.ReceivedEvents()[r.firstReport:] {
		_, now := ev.State.Driver(r.e.driver)
		switch {
		case listed && !now:
			a.count++
			since = ev.Received
		case !listed && now:
			a.total += ev.Received.Sub(since)
		}
		listed = now
	}
	if !listed {
		a.open = true
		a.total += time.Since(since)
	}
	return a
}

func (a absences) String() string {
	if a.count == 0 {
		return "CSINode always listed the driver"
	}
	s := fmt.Sprintf("CSINode was without the driver %d time(s), %v in all", a.count, a.total.Round(time.Millisecond))
	if a.open {
		s += ", and still is"
	}
	return s
}

// assertOutcome waits until kubelet has settled and checks what the user
// sees after the rollout.
func (r *rollout) assertOutcome() {
	t, e, k := r.t, r.e, r.k
	if !r.driverLost {
		if _, err := k.WaitForDriver(waitTimeout, e.driver); err != nil {
			t.Errorf("after the rollout: %v", err)
		}
		if r.new.image == ourImage {
			if _, err := r.new.WaitForReadyz(waitTimeout, 200, "registered"); err != nil {
				t.Errorf("after the rollout: %v", err)
			}
		}
	}
	if err := r.waitForKubeletToSettle(); err != nil {
		t.Error(err)
	}

	deregistrations := k.CountEvents(e.driver, report.Deregister, false) - r.deregistrations
	registrations := k.CountEvents(e.driver, report.Register, true) - r.registrations
	t.Logf("%s: %d deregistration(s), %d registration(s); %v; the old instance: %s",
		r.name(), deregistrations, registrations, r.absences(), r.oldExit)
	if deregistrations > r.maxDeregistrations {
		t.Errorf("kubelet deregistered the driver %d times during the rollout, want at most %d", deregistrations, r.maxDeregistrations)
	}

	d, listed := k.State().Driver(e.driver)
	switch {
	case r.driverLost && listed:
		t.Errorf("CSINode lists driver %q; upstream to upstream with maxSurge 1 was expected to lose it", e.driver)
	case !r.driverLost && (!listed || d.NodeID != e.nodeID):
		t.Errorf("CSINode lists %+v (listed: %v), want driver %q with node ID %q", d, listed, e.driver, e.nodeID)
	}

	if r.driverLost {
		assertNoFile(t, e.regSocket())
		assertRegistryHolds(t, e.registry)
	} else {
		r.assertServedByNew()
		r.assertOnlyNewFiles()
	}
	assertRunning(t, r.new.Process)
}

// assertServedByNew checks that the socket at the path answers kubelet's
// GetInfo for the driver and belongs to the new instance: ours says so on
// /readyz (it compares the file with the socket it holds); upstream's is
// the process that listens on it, and its /healthz passes.
func (r *rollout) assertServedByNew() {
	t, e := r.t, r.e
	info, err := harness.GetInfo(e.regSocket(), 5*time.Second)
	switch {
	case err != nil:
		t.Errorf("GetInfo on %s after the rollout: %v", e.regSocket(), err)
	case info.Name != e.driver || info.Endpoint != e.driverSock:
		t.Errorf("GetInfo on %s names driver %q, endpoint %q; want %q, %q", e.regSocket(), info.Name, info.Endpoint, e.driver, e.driverSock)
	}
	if r.new.image == ourImage {
		st, err := r.new.Status()
		if err != nil || st.State != stateRegistered || st.SocketPath != e.regSocket() {
			t.Errorf("%s's /status: state %q, socketPath %q (%v); want %q, %q\n%s", r.new.Name, st.State, st.SocketPath, err, stateRegistered, e.regSocket(), st.Raw)
		}
		return
	}
	if l, err := r.listenerAtPath(); err != nil {
		t.Errorf("after the rollout: %v", err)
	} else if l.pid != r.new.Pid() {
		t.Errorf("after the rollout, the path holds %s, want %s's socket", r.describe(l), r.new.Name)
	}
	if code, err := r.new.Healthz(); err != nil || code != 200 {
		t.Errorf("%s's /healthz: %d, %v; want 200", r.new.Name, code, err)
	}
}

// hiddenName is ours' second name of its socket: .<driver>.<6 hex digits>.
var hiddenName = regexp.MustCompile(`^\..+\.[0-9a-f]{6}$`)

// assertOnlyNewFiles checks that the registry holds the socket and, when
// the new instance is ours, at most its hidden name of that same socket:
// nothing left by the instance that left.
func (r *rollout) assertOnlyNewFiles() {
	t, e := r.t, r.e
	assertRegistryHolds(t, e.registry, e.driver)
	socket, err := os.Lstat(e.regSocket())
	if err != nil {
		return // reported above
	}
	entries, err := os.ReadDir(e.registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, entry := range entries {
		name := entry.Name()
		if !strings.HasPrefix(name, "."+e.driver+".") {
			continue
		}
		if r.new.image == upstreamImage {
			t.Errorf("%s holds %s, a hidden name of ours, after %s left", e.registry, name, r.old.Name)
			continue
		}
		fi, err := os.Lstat(filepath.Join(e.registry, name))
		if err != nil || !hiddenName.MatchString(name) || !os.SameFile(fi, socket) {
			t.Errorf("%s holds %s (%v), which is not a second name of the socket at the path: left behind", e.registry, name, err)
		}
	}
}

// reportOnFailure shows, for a failed case, kubelet's reports since the
// rollout began and the end of each instance's output.
func (r *rollout) reportOnFailure() {
	if !r.t.Failed() {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "kubelet's reports about driver %q since the rollout began (before it: %d registrations, %d deregistrations):\n",
		r.e.driver, r.registrations, r.deregistrations)
	for _, ev := range r.k.ReceivedEvents()[r.firstReport:] {
		_, listed := ev.State.Driver(r.e.driver)
		fmt.Fprintf(&b, "  +%v %s error=%q CSINode lists the driver: %v\n", ev.Received.Sub(r.began).Round(time.Millisecond), ev.Kind, ev.Error, listed)
	}
	for _, in := range []*instance{r.old, r.new} {
		if in == nil {
			continue
		}
		state := "running"
		if exited, code := in.Exited(); exited {
			state = fmt.Sprintf("exited %d", code)
		}
		fmt.Fprintf(&b, "---- last %d lines of %s (pid %d, %s) ----\n%s\n", tailLines, in.Name, in.Pid(), state, in.Tail(tailLines))
	}
	r.t.Log(b.String())
}
