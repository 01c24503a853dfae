package registration

// The registration's decisions, in one place: machine.step is a function
// from (state, event) to (state, transitions, effects): what happened, for
// the log and the observers, and what the loop is to do. It does no I/O and
// reads no clock; the loop (loop.go) gives it each event with the time it is handled
// and carries out the effects it returns. An effect never steps the
// machine: what it found or did comes back as the next event, through the
// loop. Effects that talk to another process (a look at a socket another
// process published, a claim, a takeover, an offer) are conversations: one
// runs at a time (conversing), and meanwhile only kubelet's calls and the
// silence timer are acted on; a change at the path (or at the path
// claimed) is looked at, and a handover asked meanwhile decided, once it is
// over. Every timer is a deadline in the state (due), which the loop turns
// into one timer of its clock. The transitions, state by state, are the
// table of "The registration's states" in docs/architecture.md.

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
	// silenceTimer: kubelet's first GetInfo on a publication is due.
	silenceTimer timer = iota
	// retryTimer: the backoff after kubelet's rejection has elapsed.
	retryTimer
	// vacancyTimer: the path has stayed empty, or its socket silent, for
	// vacancyGrace.
	vacancyTimer
	// publishTimer: a publication that could not be made when it was
	// decided (short of a resource, or during a conversation) is due.
	publishTimer
	// csinodeTimer: this node's CSINode has not listed the driver again
	// since it lost it while kubelet had the driver registered.
	csinodeTimer
	timers
)

// vacancyGrace is how long an empty path, or a socket there that does not
// answer, is left alone before this instance publishes its socket there
// again. Another registrar that takes the path over may remove the socket
// there first and bind its own next (upstream's does, at start), and its
// new socket refuses connections between its bind and its listen: a
// socket published in between would either make its bind fail or replace
// its socket with ours while it serves an unlinked one. The wait is far
// shorter than kubelet's reconcile period (1 s), so kubelet sees the same
// events.
const vacancyGrace = 100 * time.Millisecond

// maxStrikes is how many looks, vacancyGrace apart, a socket at the path
// that accepts connections and does not answer GetInfo within the check
// timeout gets before it is replaced as dead.
const maxStrikes = 4

// kubelet >= 1.36 tries a rejected registration again by itself, on the
// same socket: its plugin manager's backoff for the socket's path (500 ms,
// doubling after each failure in a row, at most 2m2s) has to elapse, then
// its reconciler's next pass (every second) calls GetInfo. Older kubelets
// never do; only a socket created again makes them try again, and a socket
// created again while kubelet >= 1.36 retries is a new socket under the name
// kubelet may just have accepted: kubelet deregisters the driver and
// registers it again. So after a rejection the socket is published again
// only once kubelet's own retry is overdue; a GetInfo on the rejected socket
// before that means kubelet retries by itself, and the socket stays.
var kubeletBackoff = doubling(500*time.Millisecond, 2*time.Minute+2*time.Second)

const (
	// kubeletRetryLate is what kubelet's retry may take beyond its backoff:
	// its reconciler's period (1 s), and a second to spare on a loaded node.
	kubeletRetryLate = 2 * time.Second
)

// kubeletRetryDue is when kubelet >= 1.36, after its rejections'th
// rejection in a row, has called GetInfo again at the latest.
func kubeletRetryDue(rejections uint64) time.Duration {
	b := kubeletBackoff
	for i := uint64(1); i < rejections && b.Steps > 0; i++ {
		b.Step()
	}
	return b.Duration + kubeletRetryLate
}

// doubling is a wait that starts at initial and doubles up to max.
func doubling(initial, max time.Duration) wait.Backoff {
	return wait.Backoff{Duration: initial, Factor: 2, Cap: max, Steps: math.MaxInt32}
}

// Backoff of a publication that failed for want of a resource: the same as
// the registrar's other transient faults (the calls to the driver).
var publishRetry = doubling(100*time.Millisecond, 5*time.Second)

// With Config.ConfirmCSINode, a CSINode that lost the driver while kubelet
// has it registered (deleted, by hand or by the garbage collector after the
// Node was replaced) is restored by a registration made again: kubelet
// creates or updates the CSINode when it registers a driver, and nothing
// else does. The socket is published again once the loss has lasted
// a second (a watch may deliver kubelet's own update a moment after its
// verdict); losses in a row wait twice as long each time, up to five
// minutes, since a kubelet that creates the CSINode under a Node
// that no longer exists (kubelet >= 1.35 after a Node replacement, until
// it restarts) sees it deleted again.
var csinodeBackoff = doubling(time.Second, 5*time.Minute)

// machine is the registration: the loop's only state, and what readers
// see of it (a copy, in each snapshot).
type machine struct {
	cfg   Config
	state State
	// name is the driver's, "" until it named itself; path follows it.
	name, path string
	// driverName is the name the driver gave itself last: a claim of its
	// path starts when it is not name. driverReachable: its socket
	// answers; driverError is why it could not be asked last, "" once it
	// answered.
	driverName      string
	driverReachable bool
	driverError     string
	// claim is the name whose path is claimed, for claimReason; name and
	// path stay those of the registration that stands until the claim
	// ends. "" when none runs.
	claim, claimReason string
	// gen is the current publication, 0 when none is served; ours is its
	// socket file. gens counts the publications decided.
	gen, gens uint64
	ours      sockfile.ID
	// at is what was last found at the path: the current publication's
	// socket since it was published, then what each look found.
	at At
	// conversing: a conversation about the path runs. lookAgain: the path
	// changed meanwhile, and is looked at once it is over.
	conversing, lookAgain bool
	// heldHandover: a handover asked during a conversation, decided once
	// it is over. Refused, it would make the newer instance replace the
	// socket, and kubelet deregister the driver in a rolling update.
	heldHandover *handoverAsked
	// handedOver: superseded because this instance handed its socket over.
	handedOver bool
	// due holds each timer's deadline; zero when it is not running.
	due [timers]time.Time
	// backoff is the wait after kubelet's next rejection; shortBackoff
	// after the next failed publication.
	backoff, shortBackoff wait.Backoff
	// pending is the reason of a publication due at the publish timer,
	// publishError why the last attempt failed.
	pending, publishError string
	suspect               suspicion
	// owner is the socket file of the instance this one follows while
	// standing aside.
	owner sockfile.ID
	// failingSince is when the registration last started to fail: the
	// start while the driver has not named itself, kubelet's first
	// rejection, or the moment kubelet was due to call and did not; zero
	// while it does not fail.
	failingSince time.Time
	// attempts counts kubelet's rejections since it last accepted.
	attempts uint64
	// kubeletRetrying: kubelet called GetInfo on the socket it rejected
	// after its last rejection: it tries again by itself.
	kubeletRetrying bool
	// withdrawn: Run removed the socket on its way out.
	withdrawn bool
	// csinode is what was last found of the driver in this node's CSINode
	// (Config.ConfirmCSINode), nil until then; csinodeWait is the wait
	// before the next publication for its loss.
	csinode     *CSINodeReport
	csinodeWait wait.Backoff
	log         history
}

// history is what the registration records of kubelet and of its own
// publications, for Status.
type history struct {
	lastVerdict  *Verdict
	lastGetInfo  time.Time
	lastNotify   time.Time
	lastPublish  time.Time
	lastFailure  time.Time
	failures     uint64
	publications map[string]uint64
	calls        KubeletCalls
}

// newMachine is the registration started at now: it waits for the
// driver, which counts as failing from the start.
func newMachine(cfg Config, now time.Time) machine {
	return machine{
		cfg: cfg, state: WaitingForDriver, failingSince: now,
		backoff: rejectionBackoff, shortBackoff: publishRetry,
		csinodeWait: csinodeBackoff,
		log:         history{publications: map[string]uint64{}},
	}
}

// An event is an input of step; each handles itself on the machine.
type event interface {
	step(m *machine, now time.Time, o *output)
}

// output is what a step decided: the transitions it made, in order, and
// the effects for the loop to carry out.
type output struct {
	transitions []Transition
	effects     []effect
}

func (o *output) record(t ...Transition) { o.transitions = append(o.transitions, t...) }
func (o *output) do(e ...effect)         { o.effects = append(o.effects, e...) }

// publishing tells whether the step decided a publication, which will
// replace the current one.
func (o *output) publishing() bool {
	for _, e := range o.effects {
		if _, ok := e.(publish); ok {
			return true
		}
	}
	return false
}

// publish decides a new publication for reason.
func (m *machine) publish(reason string) publish {
	m.gens++
	return publish{reason, m.gens}
}

// Events: the inputs of step.
type (
	// looked: what a look for purpose found at the path (the claimed one
	// for lookClaim).
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
	// adopted: publication gen is the socket (file) taken over from the
	// previous instance, with kubelet's verdict on it.
	adopted struct {
		gen     uint64
		file    sockfile.ID
		verdict *Verdict
	}
	// notTaken: the instance at the claimed path did not hand its socket
	// over.
	notTaken struct{}
	// handoverAsked: another instance asks for publication gen's socket;
	// call is the loop's, passed on untouched.
	handoverAsked struct {
		gen  uint64
		call *handoverCall
	}
	// offered: the offer for call ended; nil: the socket is the other
	// instance's now.
	offered struct {
		call *handoverCall
		err  error
	}
	// kubeletCall is one of kubelet's calls on publication gen: GetInfo,
	// or NotifyRegistrationStatus (notify) with its verdict.
	kubeletCall struct {
		gen        uint64
		notify     bool
		registered bool
		reason     string
	}
	// fired: a timer's deadline has passed.
	fired struct{ timer timer }
	// serveEnded: the gRPC server of publication gen stopped serving.
	serveEnded struct {
		gen uint64
		err error
	}
	// pathChanged: the directory changed at the path, or its watch lost
	// events.
	pathChanged struct{}
	// ownerLost: the connection to the instance whose socket is owner
	// ended.
	ownerLost struct{ owner sockfile.ID }
	// stopping: Run is returning.
	stopping struct{}
	// withdrew: Run removed the socket on its way out.
	withdrew struct{}
)

// purpose says why the path is looked at.
type purpose int

const (
	// lookChange: something changed at the path.
	lookChange purpose = iota
	// lookVacancy: vacancyGrace has passed since the path was found empty
	// or silent.
	lookVacancy
	// lookPending: a publication that could not be made is due.
	lookPending
	// lookClaim: the driver named itself: its path is claimed, and a
	// registrar there is asked whether it can hand its socket over.
	lookClaim
)

// An effect is what step asks the loop to do; loop.go carries each out.
type effect interface {
	carryOut(l *loop) error
}

// Effects.
type (
	// look: look at the path, for purpose, and answer with looked.
	look struct{ purpose purpose }
	// takeOver: ask the registrar at the claimed path for its socket, to
	// serve it as publication gen; adopted or notTaken.
	takeOver struct{ gen uint64 }
	// publish: put a new socket at the path as publication gen, for
	// reason; published or publishFailed.
	publish struct {
		reason string
		gen    uint64
	}
	// stepAside: retire the current publication and follow the instance
	// whose socket is owner; the socket file stays when it was handed
	// over (it is the other instance's).
	stepAside struct {
		owner      sockfile.ID
		handedOver bool
	}
	// follow: hold a connection to the instance whose socket is owner;
	// ownerLost when it ends.
	follow struct{ owner sockfile.ID }
	// offer: hand the current publication over to call; offered.
	offer struct{ call *handoverCall }
	// answer: reply to call, once the snapshot shows what it changed.
	answer struct {
		call *handoverCall
		err  error
	}
	// fail: Run returns err.
	fail struct{ err error }
)

// step applies ev, which happens at now, and returns what happened and
// what to do about it. Between conversations it decides the handover
// asked meanwhile, then starts the claim the driver's name asks for, or
// the look that changes at the path asked for meanwhile.
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
	case m.driverName != "" && m.driverName != m.name && m.claim == "":
		m.startClaim(&o)
	case m.lookAgain && m.path != "":
		m.lookAgain = false
		o.do(m.startLook(lookChange))
	}
	return o
}

func (ev driverReport) step(m *machine, _ time.Time, _ *output) {
	m.driverReachable, m.driverError = ev.reachable, ev.err
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

func (notTaken) step(m *machine, _ time.Time, o *output) {
	m.conversing = false
	if m.state != Stopped {
		o.do(m.publish(m.endClaim(o)))
	}
}

func (ev adopted) step(m *machine, now time.Time, o *output) {
	m.conversing = false
	if m.state == Stopped {
		return // the stop withdraws it like any other
	}
	m.endClaim(o)
	m.publishedAt(now, ev.gen, ReasonHandover, ev.file, o)
	m.state, m.failingSince = WaitingForKubelet, time.Time{}
	if ev.verdict != nil {
		v := *ev.verdict
		m.log.lastVerdict = &v
		if v.Registered {
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
		// After a rejection kubelet's verdict stands until it gives
		// another.
		m.state, m.failingSince = WaitingForKubelet, time.Time{}
	}
}

func (ev publishFailed) step(m *machine, now time.Time, o *output) {
	err, retry := ev.err.Error(), now.Add(m.shortBackoff.Step())
	o.record(PublishFailed{Reason: ev.reason, Err: err, Retry: retry, Repeated: m.publishError == err})
	m.publishError = err
	m.publishLater(ev.reason, retry)
}

func (ev handoverAsked) step(m *machine, _ time.Time, o *output) {
	switch {
	case m.conversing && m.heldHandover == nil:
		m.heldHandover = &ev
	case m.conversing:
		o.do(answer{ev.call, errors.New("this instance is busy with another handover of the registration socket")})
	case ev.gen != m.gen || m.gen == 0 || o.publishing():
		o.do(answer{ev.call, errors.New("this instance no longer serves the registration socket")})
	case m.state != Registered:
		o.do(answer{ev.call, fmt.Errorf("kubelet has not registered the driver through this instance's socket (state %s)", m.state)})
	default:
		m.conversing = true
		o.do(offer{ev.call})
	}
}

func (ev offered) step(m *machine, _ time.Time, o *output) {
	m.conversing = false
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
	o.do(stepAside{owner, true}, answer{ev.call, nil})
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
		m.log.calls.GetInfo++
		m.log.lastGetInfo = now
		m.due[silenceTimer] = time.Time{}
		if m.state == Rejected && !m.due[retryTimer].IsZero() {
			// kubelet came back to the socket it rejected: it retries by
			// itself, and a new socket now would be one under the name it
			// may be about to accept.
			m.due[retryTimer], m.kubeletRetrying = time.Time{}, true
			o.record(KubeletRetrying{Attempts: m.attempts})
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
			o.do(m.publish(ReasonRetry))
		}
	case vacancyTimer:
		o.do(m.startLook(lookVacancy))
	case publishTimer:
		o.do(m.startLook(lookPending))
	case csinodeTimer:
		m.csinodeWait.Step()
		o.do(m.publish(ReasonCSINodeLost))
	}
}

func (ev serveEnded) step(m *machine, now time.Time, o *output) {
	if ev.gen != m.gen || m.gen == 0 {
		return
	}
	o.record(ServeEnded{Err: ev.err})
	if m.conversing {
		m.publishLater(ReasonStale, now)
		return
	}
	o.do(m.publish(ReasonStale))
}

func (pathChanged) step(m *machine, _ time.Time, _ *output) {
	// A change at a path being claimed counts too: another instance may
	// publish there while this one takes the socket over, and the socket
	// taken would then be served unlinked.
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
	m.withdrawn = true
	o.record(Withdrawn{})
}

// confirmed tells whether kubelet's acceptance counts: always, unless
// Config.ConfirmCSINode asks for this node's CSINode to list the driver.
func (m *machine) confirmed() bool {
	return !m.cfg.ConfirmCSINode || m.csinode != nil && m.csinode.Listed
}

// watchCSINode runs the wait after which the socket is published again for
// a CSINode that lost the driver, while it has, kubelet has the driver
// registered through the current publication and no other publication is
// due; it stops it otherwise.
func (m *machine) watchCSINode(now time.Time) {
	lost := m.csinode != nil && m.csinode.Missing && m.state == Registered && m.gen != 0 && m.due[publishTimer].IsZero()
	switch {
	case !lost:
		m.due[csinodeTimer] = time.Time{}
	case m.due[csinodeTimer].IsZero():
		m.due[csinodeTimer] = now.Add(m.csinodeWait.Duration)
	}
}

// watches tells whether a change at path in the registry directory is
// the machine's: the path of the registration, or the path it claims.
func (m *machine) watches(path string) bool {
	return path != "" && (path == m.path || m.claim != "" && path == SocketPath(m.cfg.Dir, m.claim))
}

// startClaim claims the path of the driver's name: it looks at what is
// there (lookClaim) before it decides.
func (m *machine) startClaim(o *output) {
	path := SocketPath(m.cfg.Dir, m.driverName)
	if len(path) > MaxSocketPathLength {
		o.do(fail{dirError(fmt.Errorf("registration socket path %q is %d bytes long, more than the %d a Unix socket allows: use a shorter registration directory", path, len(path), MaxSocketPathLength))})
		return
	}
	m.claim, m.claimReason = m.driverName, ReasonStart
	if m.name != "" {
		m.claimReason = ReasonRenamed
	}
	m.attempts, m.due[retryTimer] = 0, time.Time{}
	o.record(Claiming{Name: m.claim, Renamed: m.name != ""})
	o.do(m.startLook(lookClaim))
}

// startLook starts a conversation: a look at the path for purpose.
func (m *machine) startLook(why purpose) effect {
	m.conversing = true
	return look{why}
}

// claimFound decides what to do with the claimed path, given what is
// there: the claim takes the socket of a registrar that can hand it over,
// defers to one that cannot, or publishes.
func (m *machine) claimFound(at At, o *output) {
	switch at.kind {
	case AtUnknown:
		o.do(fail{fmt.Errorf("cannot inspect %q: %w", at.path, at.Err)})
		return
	case AtNotSocket:
		o.do(fail{&sockfile.NotASocketError{Path: at.path, Mode: at.mode}})
		return
	case AtHandsOver:
		// Most likely the older pod of a rolling update: take its socket
		// over rather than replace the file, which kubelet would see as a
		// new plugin and deregister the driver for a reconcile period.
		m.conversing = true
		m.gens++
		o.do(takeOver{m.gens})
		return
	}
	reason := m.endClaim(o)
	if at.kind == AtLive && at.Driver == m.name && at.Endpoint == m.cfg.Endpoint {
		// A registrar of the same driver and endpoint that cannot hand
		// its socket over (upstream's, or an older build): replacing its
		// socket would make kubelet deregister the driver, and its exit
		// would do it a second time, as upstream's removes the path when
		// it stops. Waiting for it to leave costs one deregistration only.
		m.standAside(Deferring, at.File)
		o.record(Deferred{})
		o.do(follow{at.File})
		return
	}
	if at.kind != AtNothing {
		found, _ := at.describe(m.name)
		o.record(Replacing{Found: found})
	}
	o.do(m.publish(reason))
}

// endClaim makes the claimed name and path the registration's, and
// returns the claim's reason.
func (m *machine) endClaim(o *output) (reason string) {
	m.name, m.path, m.claim = m.claim, SocketPath(m.cfg.Dir, m.claim), ""
	o.record(Named{Name: m.name})
	return m.claimReason
}

// publishLater makes a publication for reason due at the publish timer.
func (m *machine) publishLater(reason string, at time.Time) {
	m.pending, m.due[publishTimer] = reason, at
}

// publishedAt records that publication gen, socket file, serves the path
// since now.
func (m *machine) publishedAt(now time.Time, gen uint64, reason string, file sockfile.ID, o *output) {
	m.gen, m.ours, m.handedOver, m.owner, m.kubeletRetrying = gen, file, false, sockfile.ID{}, false
	m.at = At{kind: AtOurs, path: m.path, File: file}
	m.log.publications[reason]++
	m.log.lastPublish = now
	m.due[silenceTimer] = now.Add(kubeletSilence)
	m.due[vacancyTimer], m.due[publishTimer] = time.Time{}, time.Time{}
	m.suspect = suspicion{}
	m.pending, m.publishError, m.shortBackoff = "", "", publishRetry
	o.record(Published{Reason: reason})
}

// standAside leaves the path to another instance, whose socket is owner.
func (m *machine) standAside(state State, owner sockfile.ID) {
	m.state, m.gen, m.ours, m.owner, m.handedOver, m.kubeletRetrying = state, 0, sockfile.ID{}, owner, false, false
	// A socket handed over keeps its file: what was known of it as ours
	// is now known of the owner's.
	m.at = At{kind: AtOwner, path: m.path, File: owner}
	m.due = [timers]time.Time{}
	m.pending, m.publishError, m.failingSince = "", "", time.Time{}
	m.suspect = suspicion{}
}

// verdict records kubelet's verdict on the current publication.
func (m *machine) verdict(now time.Time, registered bool, reason string, o *output) {
	m.log.lastVerdict = &Verdict{Registered: registered, Reason: reason, Time: now}
	m.log.lastNotify = now
	m.due[silenceTimer] = time.Time{}
	m.kubeletRetrying = false
	if registered {
		o.record(KubeletAccepted{Again: m.state == Registered})
		m.log.calls.NotifyRegistered++
		m.state, m.failingSince, m.attempts = Registered, time.Time{}, 0
		m.backoff, m.due[retryTimer] = rejectionBackoff, time.Time{}
		if m.confirmed() {
			o.record(DriverRegistered{})
		}
		return
	}
	first := m.state != Rejected
	m.log.calls.NotifyRejected++
	m.log.failures++
	m.log.lastFailure = now
	m.attempts++
	if m.failingSince.IsZero() {
		// A rejection after kubelet's silence continues that failure.
		m.failingSince = now
	}
	m.state = Rejected
	if m.cfg.OnRejection == Exit {
		o.record(KubeletRejected{Reason: reason, Attempts: m.attempts, First: first})
		o.do(fail{&RejectedError{Reason: reason}})
		return
	}
	if m.due[retryTimer].IsZero() {
		// Published again only after kubelet's own retry is overdue: a
		// kubelet that retries by itself calls GetInfo before then.
		m.due[retryTimer] = now.Add(max(m.backoff.Step(), kubeletRetryDue(m.attempts)))
	}
	o.record(KubeletRejected{Reason: reason, Attempts: m.attempts, First: first, Retry: m.due[retryTimer]})
}

// lookedAt decides what to do about what is at the path.
func (m *machine) lookedAt(now time.Time, at At, why purpose, o *output) {
	aside := m.state == Superseded || m.state == Deferring
	switch at.kind {
	case AtNothing:
		switch {
		case why == lookPending:
			o.do(m.publish(m.pending))
		case why == lookVacancy && aside:
			o.do(m.publish(ReasonVacated))
		case why == lookVacancy && m.gen != 0:
			o.do(m.publish(ReasonDeleted))
		case aside || m.gen != 0:
			m.lookAfterGrace(now)
		}
	case AtOurs:
		if why == lookPending {
			o.do(m.publish(m.pending))
		}
	case AtNotSocket:
		if why == lookPending {
			o.do(m.publish(m.pending)) // fails, saying why
			return
		}
		m.leaveAlone("Something that is not a socket replaced the registration socket; leaving it alone", at, o)
	case AtUnknown:
		m.leaveAlone("Cannot inspect the registration socket", at, o)
	case AtOwner:
		// The connection to the owner this instance follows says whether
		// it lives, without another call.
	case AtLive:
		m.suspect = suspicion{}
		switch {
		case at.Driver != m.name:
			m.leaveAlone("Another driver's registration socket is at our path; leaving it alone", at, o)
		case aside:
			// Another instance again, e.g. after a handover between two
			// newer ones: follow the current owner.
			m.owner = at.File
			o.do(follow{at.File})
		default:
			// Never fight back: a newer instance (a rolling update with
			// maxSurge) owns the registration now.
			m.standAside(Superseded, at.File)
			o.record(SteppedAside{})
			o.do(stepAside{owner: at.File})
		}
	case AtRefused, AtSilent:
		// A socket that refuses connections is dead, or was bound a moment
		// ago and is not listening yet (another registrar between its bind
		// and its listen): one more look after the grace. One that accepts
		// and does not answer in time is slow, perhaps only on a loaded
		// node: it is replaced only after maxStrikes looks.
		strikes := m.suspect.look(at.File, now)
		if strikes < 2 || strikes < maxStrikes && at.kind == AtSilent {
			m.lookAfterGrace(now)
			return
		}
		m.suspect = suspicion{}
		if aside {
			o.do(m.publish(ReasonVacated))
			return
		}
		o.do(m.publish(ReasonStale))
	}
}

// leaveAlone records that what is at the path is left alone, and why.
func (m *machine) leaveAlone(why string, at At, o *output) {
	t := LeftAlone{Why: why, Err: at.Err}
	if at.kind != AtUnknown {
		t.Found, _ = at.describe(m.name)
	}
	o.record(t)
}

// lookAfterGrace looks at the path again after vacancyGrace.
func (m *machine) lookAfterGrace(now time.Time) {
	if m.due[vacancyTimer].IsZero() {
		m.due[vacancyTimer] = now.Add(vacancyGrace)
	}
}

// canFire tells whether timer t may fire. During a conversation only the
// silence timer does: the others act on the path, and fire once it is
// over.
func (m *machine) canFire(t timer) bool {
	return !m.conversing || t == silenceTimer
}

// isDue tells whether timer t fires at now.
func (m *machine) isDue(t timer, now time.Time) bool {
	return !m.due[t].IsZero() && !m.due[t].After(now) && m.canFire(t)
}

// next returns the earliest deadline of a timer that can fire, zero when
// none can.
func (m *machine) next() (at time.Time) {
	for t, due := range m.due {
		if !due.IsZero() && m.canFire(timer(t)) && (at.IsZero() || due.Before(at)) {
			at = due
		}
	}
	return at
}

// suspicion counts the looks at a socket at the path that did not answer,
// vacancyGrace apart at least: two events in quick succession (the
// removal of a socket and the creation of the next, between its bind and
// its listen) are one look, or a registrar that binds and then listens
// would have its new socket replaced as dead.
type suspicion struct {
	file    sockfile.ID
	strikes int
	last    time.Time // of the last look counted
}

// look records a look at file that found it not answering, at now, and
// returns how many looks count against it.
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
