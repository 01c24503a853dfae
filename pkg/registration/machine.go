package registration

// machine.step is the registration's one decision: (state, event) to (state,
// transitions, effects), with no I/O and no clock read. The loop carries the
// effects out, and their outcomes come back as events. Effects that talk to
// another process are conversations, one at a time; meanwhile only kubelet's
// calls and the silence timer are acted on. docs/architecture.md tables the
// transitions.

import (
	"errors"
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

// timer names one of the registration's deadlines.
type timer int

const (
	silenceTimer timer = iota
	retryTimer
	vacancyTimer
	// publishTimer: a publication deferred (short of a resource, or by a
	// conversation) is due.
	publishTimer
	// csinodeTimer: CSINode lost the driver while kubelet has it registered.
	csinodeTimer
	timers
)

// vacancyGrace is how long an empty or silent path is left alone before
// publishing there again: another registrar (upstream's, at start) may have
// removed the socket to bind its own, which refuses connections until it
// listens. It is far shorter than kubelet's reconcile period.
const vacancyGrace = 100 * time.Millisecond

// maxStrikes is how many looks, vacancyGrace apart, a socket that accepts
// connections but does not answer GetInfo gets before it is replaced as dead.
const maxStrikes = 4

// kubeletBackoff is kubelet's (>= 1.36) own retry of a rejected socket.
// Older kubelets retry only a socket created again, which would deregister
// the driver for a newer kubelet: so a rejected socket is published again
// only once kubelet's retry is overdue.
var kubeletBackoff = doubling(500*time.Millisecond, 2*time.Minute+2*time.Second)

// kubeletRetryLate is kubelet's reconciler period, and a second to spare.
const kubeletRetryLate = 2 * time.Second

// kubeletRetryDue is when kubelet has retried at the latest after its
// rejections'th rejection in a row.
func kubeletRetryDue(rejections uint64) time.Duration {
	b := kubeletBackoff
	for i := uint64(1); i < rejections && b.Steps > 0; i++ {
		b.Step()
	}
	return b.Duration + kubeletRetryLate
}

func doubling(initial, max time.Duration) wait.Backoff {
	return wait.Backoff{Duration: initial, Factor: 2, Cap: max, Steps: math.MaxInt32}
}

// publishRetry is the same backoff as the registrar's other transient faults.
var publishRetry = doubling(100*time.Millisecond, 5*time.Second)

// csinodeBackoff: only kubelet writes CSINode, so one that lost the driver is
// restored by registering again. The first second lets a watch deliver
// kubelet's own update; it doubles since a kubelet that writes under a
// replaced Node sees its CSINode deleted again.
var csinodeBackoff = doubling(time.Second, 5*time.Minute)

// machine is the loop's only state; readers see a copy in each snapshot.
type machine struct {
	cfg   Config
	state State
	// name is the driver's, "" until it named itself; path follows it.
	name, path string
	// driverName is the driver's latest name: a claim starts when it is not name.
	driverName string
	// claim is the name whose path is claimed ("" when none); name and path
	// stay the standing registration's until it ends.
	claim string
	// gen is the current publication (0: none), ours its socket file; gens
	// counts the publications decided.
	gen, gens uint64
	ours      sockfile.ID
	// at is what was last found at the path.
	at At
	// lookAgain: the path changed during a conversation. offering: the
	// conversation is an offer, which closes the socket's listener itself.
	conversing, offering, lookAgain bool
	// heldHandover waits for the conversation: refused, the newer instance
	// would replace the socket, and kubelet deregister the driver.
	heldHandover *handoverAsked
	handedOver   bool
	// due holds each timer's deadline; zero when it is not running.
	due [timers]time.Time
	// backoff follows kubelet's rejections, shortBackoff failed publications.
	backoff, shortBackoff wait.Backoff
	// pending is the reason of the publication due at publishTimer.
	pending string
	suspect suspicion
	// owner is the socket file of the instance followed while standing aside.
	owner sockfile.ID
	// failingSince: the start (no driver name yet), kubelet's first rejection
	// or its missed call; zero while nothing fails.
	failingSince time.Time
	// kubeletRetrying: kubelet called GetInfo on the socket it rejected.
	kubeletRetrying bool
	// csinode is the last CSINodeReport, nil before one.
	csinode     *CSINodeReport
	csinodeWait wait.Backoff
	// rec holds the fields of Status kept as Status shows them: the
	// endpoint, the driver's reachability, kubelet's calls and rejections
	// since it last accepted, the publications and the last one's error,
	// the withdrawal. Nothing it points to is written once set.
	rec Status
}

// newMachine waits for the driver, which counts as failing from now.
func newMachine(cfg Config, now time.Time) machine {
	return machine{
		cfg: cfg, state: WaitingForDriver, failingSince: now,
		backoff: rejectionBackoff, shortBackoff: publishRetry,
		csinodeWait: csinodeBackoff,
		rec:         Status{Endpoint: cfg.Endpoint, Publications: map[string]uint64{}},
	}
}

// An event is an input of step; each handles itself on the machine.
type event interface {
	step(m *machine, now time.Time, o *output)
}

// output is what a step decided: its transitions, in order, and effects;
// publishing: one of them is a publication.
type output struct {
	transitions []Transition
	effects     []effect
	publishing  bool
}

func (o *output) record(t ...Transition) { o.transitions = append(o.transitions, t...) }
func (o *output) do(e ...effect)         { o.effects = append(o.effects, e...) }

func (m *machine) publish(o *output, reason string) {
	m.gens++
	o.do(publish{reason, m.gens})
	o.publishing = true
}

// Events: the inputs of step.
type (
	// looked: what a look found at the path (the claimed one for lookClaim).
	looked struct {
		at      At
		purpose purpose
	}
	// published: publication gen, socket file, serves the path.
	published struct {
		gen    uint64
		reason string
		file   sockfile.ID
	}
	// publishFailed: publishing for reason failed for want of a resource.
	publishFailed struct {
		reason string
		err    error
	}
	// tookOver: the takeover ended; file is the socket taken as publication
	// gen, with kubelet's verdict on it, or zero: none was taken.
	tookOver struct {
		gen     uint64
		file    sockfile.ID
		verdict *Verdict
	}
	// handoverAsked: another instance asks for publication gen's socket.
	handoverAsked struct {
		gen  uint64
		call *handoverCall
	}
	// offered: the offer ended; err nil: the socket is the other instance's.
	offered struct {
		call *handoverCall
		err  error
	}
	// kubeletCall: kubelet's GetInfo, or its verdict (notify), on gen.
	kubeletCall struct {
		gen        uint64
		notify     bool
		registered bool
		reason     string
	}
	fired struct{ timer timer }
	// serveEnded: the gRPC server of publication gen stopped serving.
	serveEnded struct {
		gen uint64
		err error
	}
	// pathChanged: the path changed, or its watch lost events.
	pathChanged struct{}
	// ownerLost: the connection to owner's instance ended.
	ownerLost struct{ owner sockfile.ID }
	stopping  struct{}
	// withdrew: Run removed the socket on its way out.
	withdrew struct{}
)

// purpose says why the path is looked at.
type purpose int

const (
	lookChange purpose = iota
	lookVacancy
	lookPending
	// lookClaim also asks a registrar there whether it can hand over.
	lookClaim
)

// An effect is what step asks the loop to do; loop.go carries each out.
type effect interface {
	carryOut(l *loop) error
}

// Effects, each with the events its outcome comes back as.
type (
	// look at the path: looked.
	look struct{ purpose purpose }
	// takeOver the claimed path's socket as publication gen: tookOver.
	takeOver struct{ gen uint64 }
	// publish a new socket at the path: published or publishFailed.
	publish struct {
		reason string
		gen    uint64
	}
	// retire the publication; a socket handed over stays.
	retire struct{ handedOver bool }
	// follow owner's instance over a held connection: ownerLost.
	follow struct{ owner sockfile.ID }
	// offer the current publication to call: offered.
	offer struct{ call *handoverCall }
	// answer call once the snapshot shows what it changed.
	answer struct {
		call *handoverCall
		err  error
	}
	fail struct{ err error }
)

// step applies ev at now. Between conversations it then decides a held
// handover, then starts the driver name's claim or a look the path asks for.
func (m *machine) step(now time.Time, ev event) output {
	var o output
	ev.step(m, now, &o)
	if held := m.heldHandover; held != nil && !m.conversing {
		m.heldHandover = nil
		held.step(m, now, &o)
	}
	m.watchCSINode(now)
	switch {
	case m.conversing || m.state == Stopped:
	case o.publishing:
		// A look now would take the new socket for another's: it waits
		// for published, which says what ours is.
	case m.driverName != "" && m.driverName != m.name && m.claim == "":
		m.startClaim(&o)
	case m.lookAgain && m.path != "":
		m.lookAgain = false
		o.do(m.startLook(lookChange))
	}
	return o
}

func (ev driverReport) step(m *machine, _ time.Time, _ *output) {
	m.rec.DriverReachable, m.rec.DriverError = ev.reachable, ev.err
	if ev.name != "" {
		m.driverName = ev.name
	}
}

func (ev CSINodeReport) step(m *machine, _ time.Time, o *output) {
	if !m.cfg.ConfirmCSINode {
		return
	}
	wasConfirmed := m.confirmed()
	m.csinode = &ev
	if ev.Listed {
		m.csinodeWait = csinodeBackoff
	}
	switch {
	case m.state != Registered:
	case !wasConfirmed && m.confirmed():
		o.record(DriverRegistered{})
	case wasConfirmed && !m.confirmed():
		o.record(CSINodeUnconfirmed{Reason: ev.Reason})
	}
}

func (ev looked) step(m *machine, now time.Time, o *output) {
	m.conversing = false
	switch {
	case m.state == Stopped:
	case ev.purpose == lookClaim:
		m.claimFound(ev.at, o)
	default:
		m.at = ev.at
		m.lookedAt(now, ev.at, ev.purpose, o)
	}
}

func (ev tookOver) step(m *machine, now time.Time, o *output) {
	m.conversing = false
	if m.state == Stopped {
		return // the stop withdraws a socket taken like any other
	}
	reason := m.endClaim(o)
	if ev.file == (sockfile.ID{}) {
		m.publish(o, reason)
		return
	}
	m.publishedAt(now, ev.gen, ReasonHandover, ev.file, o)
	m.state, m.failingSince = WaitingForKubelet, time.Time{}
	if ev.verdict != nil {
		m.rec.LastVerdict = ev.verdict
		if ev.verdict.Registered {
			m.state = Registered
			m.due[silenceTimer] = time.Time{}
			if m.confirmed() {
				o.record(DriverRegistered{})
			}
		}
	}
}

func (ev published) step(m *machine, now time.Time, o *output) {
	m.publishedAt(now, ev.gen, ev.reason, ev.file, o)
	if m.state != Rejected || ev.reason == ReasonStart || ev.reason == ReasonRenamed {
		// After a rejection kubelet's verdict stands until its next.
		m.state, m.failingSince = WaitingForKubelet, time.Time{}
	}
}

func (ev publishFailed) step(m *machine, now time.Time, o *output) {
	err, retry := ev.err.Error(), now.Add(m.shortBackoff.Step())
	o.record(PublishFailed{Reason: ev.reason, Err: err, Retry: retry, Repeated: m.rec.PublishError == err})
	m.rec.PublishError = err
	m.pending, m.due[publishTimer] = ev.reason, retry
}

func (ev handoverAsked) step(m *machine, _ time.Time, o *output) {
	switch {
	case m.conversing && m.heldHandover == nil:
		m.heldHandover = &ev
	case m.conversing:
		o.do(answer{ev.call, errors.New("this instance is busy with another handover of the registration socket")})
	case ev.gen != m.gen || m.gen == 0 || o.publishing:
		o.do(answer{ev.call, errors.New("this instance no longer serves the registration socket")})
	case m.state != Registered:
		o.do(answer{ev.call, fmt.Errorf("kubelet has not registered the driver through this instance's socket (state %s)", m.state)})
	default:
		m.conversing, m.offering = true, true
		o.do(offer{ev.call})
	}
}

func (ev offered) step(m *machine, _ time.Time, o *output) {
	m.conversing, m.offering = false, false
	if ev.err != nil {
		o.do(answer(ev)) // refused: the socket stays ours
		return
	}
	// The socket file at the path is the other instance's now.
	owner := m.ours
	if m.state != Stopped {
		m.standAside(Superseded, owner)
		m.handedOver = true
	}
	o.record(SteppedAside{HandedOver: true})
	o.do(retire{handedOver: true}, follow{owner}, answer{ev.call, nil})
}

func (ev kubeletCall) step(m *machine, now time.Time, o *output) {
	switch {
	case ev.gen != m.gen || m.gen == 0:
		if ev.notify {
			o.record(VerdictIgnored{Registered: ev.registered, Reason: ev.reason})
		}
	case ev.notify:
		m.verdict(now, ev.registered, ev.reason, o)
	default:
		m.rec.KubeletCalls.GetInfo++
		m.rec.LastGetInfo = &now
		m.due[silenceTimer] = time.Time{}
		if m.state == Rejected && !m.due[retryTimer].IsZero() {
			// kubelet retries by itself: a new socket now could replace
			// one it is about to accept.
			m.due[retryTimer], m.kubeletRetrying = time.Time{}, true
			o.record(KubeletRetrying{Attempts: m.rec.Attempts})
		}
		if m.state == KubeletSilent {
			m.state, m.failingSince = WaitingForKubelet, time.Time{}
		}
	}
}

func (ev fired) step(m *machine, now time.Time, o *output) {
	if m.due[ev.timer].IsZero() || !m.canFire(ev.timer) {
		return // stopped since it was due, or waits for the conversation
	}
	m.due[ev.timer] = time.Time{}
	switch ev.timer {
	case silenceTimer:
		if m.state == WaitingForKubelet {
			m.state, m.failingSince = KubeletSilent, now
			o.record(KubeletWentSilent{})
		}
	case retryTimer:
		if m.state == Rejected && m.gen != 0 {
			m.publish(o, ReasonRetry)
		}
	case vacancyTimer:
		o.do(m.startLook(lookVacancy))
	case publishTimer:
		o.do(m.startLook(lookPending))
	case csinodeTimer:
		m.csinodeWait.Step()
		m.publish(o, ReasonCSINodeLost)
	}
}

func (ev serveEnded) step(m *machine, now time.Time, o *output) {
	if ev.gen != m.gen || m.gen == 0 {
		return
	}
	if !m.offering {
		o.record(ServeEnded{Err: ev.err})
	}
	if m.conversing {
		m.pending, m.due[publishTimer] = ReasonStale, now
		return
	}
	m.publish(o, ReasonStale)
}

func (pathChanged) step(m *machine, _ time.Time, _ *output) {
	// The claimed path counts too: a socket published there during a
	// takeover would leave the one taken unlinked.
	m.lookAgain = m.path != "" || m.claim != ""
}

func (ev ownerLost) step(m *machine, now time.Time, o *output) {
	if ev.owner != m.owner || m.owner == (sockfile.ID{}) {
		return // an owner followed before
	}
	// Its socket is no longer known to be served: ask it again.
	m.owner, m.at = sockfile.ID{}, At{}
	pathChanged{}.step(m, now, o)
}

func (stopping) step(m *machine, _ time.Time, _ *output) {
	m.state, m.gen, m.due, m.claim = Stopped, 0, [timers]time.Time{}, ""
}

func (withdrew) step(m *machine, _ time.Time, o *output) {
	m.rec.Withdrawn = true
	o.record(Withdrawn{})
}

// confirmed: kubelet's acceptance counts, unless ConfirmCSINode waits for
// the CSINode to list the driver.
func (m *machine) confirmed() bool {
	return !m.cfg.ConfirmCSINode || m.csinode != nil && m.csinode.Listed
}

// watchCSINode runs csinodeTimer while CSINode misses a driver registered
// through the current publication and no other publication is due.
func (m *machine) watchCSINode(now time.Time) {
	lost := m.csinode != nil && m.csinode.Missing && m.state == Registered && m.gen != 0 && m.due[publishTimer].IsZero()
	switch {
	case !lost:
		m.due[csinodeTimer] = time.Time{}
	case m.due[csinodeTimer].IsZero():
		m.due[csinodeTimer] = now.Add(m.csinodeWait.Duration)
	}
}

// watches: path is the registration's or the claimed one.
func (m *machine) watches(path string) bool {
	return path != "" && (path == m.path || m.claim != "" && path == SocketPath(m.cfg.Dir, m.claim))
}

// startClaim claims the driver name's path, looking there first.
func (m *machine) startClaim(o *output) {
	path := SocketPath(m.cfg.Dir, m.driverName)
	if len(path) > MaxSocketPathLength {
		o.do(fail{dirError(fmt.Errorf("registration socket path %q is %d bytes long, more than the %d a Unix socket allows: use a shorter registration directory", path, len(path), MaxSocketPathLength))})
		return
	}
	m.claim = m.driverName
	m.rec.Attempts, m.due[retryTimer] = 0, time.Time{}
	o.record(Claiming{Name: m.claim, Renamed: m.name != ""})
	o.do(m.startLook(lookClaim))
}

func (m *machine) startLook(why purpose) effect {
	m.conversing = true
	return look{why}
}

// claimFound takes the socket of a registrar that can hand it over, defers
// to one that cannot, or publishes.
func (m *machine) claimFound(at At, o *output) {
	switch at.kind {
	case AtUnknown:
		o.do(fail{fmt.Errorf("cannot inspect %q: %w", at.path, at.Err)})
		return
	case AtNotSocket:
		o.do(fail{&sockfile.NotASocketError{Path: at.path, Mode: at.mode}})
		return
	case AtHandsOver:
		// A new file would make kubelet deregister the driver for a
		// reconcile period.
		m.conversing = true
		m.gens++
		o.do(takeOver{m.gens})
		return
	}
	reason := m.endClaim(o)
	if at.kind == AtLive && at.Driver == m.name && at.Endpoint == m.cfg.Endpoint {
		// Upstream's or an older build: replacing its socket deregisters the
		// driver, and its exit (it removes the path) does again; waiting for
		// it to leave costs one deregistration.
		m.standAside(Deferring, at.File)
		o.record(Deferred{})
		o.do(follow{at.File})
		return
	}
	if at.kind != AtNothing {
		found, _ := at.describe(m.name)
		o.record(Replacing{Found: found})
	}
	m.publish(o, reason)
}

// endClaim makes the claimed name the registration's; the reason of its
// publication says whether it replaces another name.
func (m *machine) endClaim(o *output) (reason string) {
	reason = ReasonStart
	if m.name != "" {
		reason = ReasonRenamed
	}
	m.name, m.path, m.claim = m.claim, SocketPath(m.cfg.Dir, m.claim), ""
	o.record(Named{Name: m.name})
	return reason
}

func (m *machine) publishedAt(now time.Time, gen uint64, reason string, file sockfile.ID, o *output) {
	m.gen, m.ours, m.handedOver, m.owner, m.kubeletRetrying = gen, file, false, sockfile.ID{}, false
	m.at = At{kind: AtOurs, path: m.path, File: file}
	m.rec.Publications[reason]++
	m.rec.LastPublished = &now
	m.due[silenceTimer] = now.Add(kubeletSilence)
	m.due[vacancyTimer], m.due[publishTimer] = time.Time{}, time.Time{}
	m.suspect = suspicion{}
	m.pending, m.rec.PublishError, m.shortBackoff = "", "", publishRetry
	o.record(Published{Reason: reason})
}

// standAside leaves the path to another instance, whose socket is owner.
func (m *machine) standAside(state State, owner sockfile.ID) {
	m.state, m.gen, m.ours, m.owner, m.handedOver, m.kubeletRetrying = state, 0, sockfile.ID{}, owner, false, false
	// A socket handed over keeps its file: ours is now the owner's.
	m.at = At{kind: AtOwner, path: m.path, File: owner}
	m.due = [timers]time.Time{}
	m.pending, m.rec.PublishError, m.failingSince = "", "", time.Time{}
	m.suspect = suspicion{}
}

func (m *machine) verdict(now time.Time, registered bool, reason string, o *output) {
	m.rec.LastVerdict = &Verdict{Registered: registered, Reason: reason, Time: now}
	m.rec.LastNotify = &now
	m.due[silenceTimer] = time.Time{}
	m.kubeletRetrying = false
	if registered {
		o.record(KubeletAccepted{Again: m.state == Registered})
		m.rec.KubeletCalls.NotifyRegistered++
		m.state, m.failingSince, m.rec.Attempts = Registered, time.Time{}, 0
		m.backoff, m.due[retryTimer] = rejectionBackoff, time.Time{}
		if m.confirmed() {
			o.record(DriverRegistered{})
		}
		return
	}
	first := m.state != Rejected
	m.rec.KubeletCalls.NotifyRejected++
	m.rec.LastFailure = &now
	m.rec.Attempts++
	if m.failingSince.IsZero() {
		// A rejection after kubelet's silence continues that failure.
		m.failingSince = now
	}
	m.state = Rejected
	switch {
	case m.cfg.OnRejection == Exit:
		o.do(fail{&RejectedError{Reason: reason}})
	case m.due[retryTimer].IsZero():
		// Not before kubelet's own retry is overdue (kubeletBackoff).
		m.due[retryTimer] = now.Add(max(m.backoff.Step(), kubeletRetryDue(m.rec.Attempts)))
	}
	// With Exit no retry is due: Retry stays zero.
	o.record(KubeletRejected{Reason: reason, Attempts: m.rec.Attempts, First: first, Retry: m.due[retryTimer]})
}

// lookedAt decides what to do about what is at the path.
func (m *machine) lookedAt(now time.Time, at At, why purpose, o *output) {
	aside := m.state == Superseded || m.state == Deferring
	if why == lookPending && (at.kind == AtNothing || at.kind == AtOurs || at.kind == AtNotSocket) {
		// Over something that is not a socket it fails, saying why.
		m.publish(o, m.pending)
		return
	}
	switch at.kind {
	case AtNothing:
		switch {
		case why == lookVacancy && aside:
			m.publish(o, ReasonVacated)
		case why == lookVacancy && m.gen != 0:
			m.publish(o, ReasonDeleted)
		case aside || m.gen != 0:
			m.lookAfterGrace(now)
		}
	case AtNotSocket:
		m.leaveAlone("Something that is not a socket replaced the registration socket; leaving it alone", at, o)
	case AtUnknown:
		m.leaveAlone("Cannot inspect the registration socket", at, o)
	case AtOwner:
		// The connection to the followed owner says whether it lives.
	case AtLive:
		m.suspect = suspicion{}
		switch {
		case at.Driver != m.name:
			m.leaveAlone("Another driver's registration socket is at our path; leaving it alone", at, o)
		case aside:
			// Another instance again (a handover between newer ones).
			m.owner = at.File
			o.do(follow{at.File})
		default:
			// Never fight back: a newer instance owns the registration.
			m.standAside(Superseded, at.File)
			o.record(SteppedAside{})
			o.do(retire{}, follow{at.File})
		}
	case AtRefused, AtSilent:
		// A refusing socket may be between its bind and its listen: one
		// more look. A silent one may be slow on a loaded node: maxStrikes.
		strikes := m.suspect.look(at.File, now)
		if strikes < 2 || strikes < maxStrikes && at.kind == AtSilent {
			m.lookAfterGrace(now)
			return
		}
		m.suspect = suspicion{}
		if aside {
			m.publish(o, ReasonVacated)
			return
		}
		m.publish(o, ReasonStale)
	}
}

func (m *machine) leaveAlone(why string, at At, o *output) {
	t := LeftAlone{Why: why, Err: at.Err}
	if at.kind != AtUnknown {
		t.Found, _ = at.describe(m.name)
	}
	o.record(t)
}

func (m *machine) lookAfterGrace(now time.Time) {
	if m.due[vacancyTimer].IsZero() {
		m.due[vacancyTimer] = now.Add(vacancyGrace)
	}
}

// canFire: during a conversation only the silence timer fires; the others
// act on the path.
func (m *machine) canFire(t timer) bool {
	return !m.conversing || t == silenceTimer
}

func (m *machine) isDue(t timer, now time.Time) bool {
	return !m.due[t].IsZero() && !m.due[t].After(now) && m.canFire(t)
}

// next is the earliest deadline of a timer that can fire, or zero.
func (m *machine) next() (at time.Time) {
	for t, due := range m.due {
		if !due.IsZero() && m.canFire(timer(t)) && (at.IsZero() || due.Before(at)) {
			at = due
		}
	}
	return at
}

// suspicion counts looks at a socket that did not answer, vacancyGrace
// apart: a socket's removal and the next one's bind are one look, or a
// registrar between bind and listen would be replaced as dead.
type suspicion struct {
	file    sockfile.ID
	strikes int
	last    time.Time // of the last look counted
}

// look counts a look at file, not answering at now, and returns its strikes.
func (s *suspicion) look(file sockfile.ID, now time.Time) int {
	if s.file != file {
		*s = suspicion{file: file}
	}
	if s.strikes == 0 || now.Sub(s.last) >= vacancyGrace {
		s.strikes++
		s.last = now
	}
	return s.strikes
}
