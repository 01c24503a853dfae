package registration

// The registration's decisions, in one place: machine.step is a function
// from (state, event) to (state, effects). It does no I/O and reads no
// clock; the loop (loop.go) gives it each event with the time it is handled,
// carries out the effects it returns, and feeds their outcomes back as
// events. Every timer is a deadline in the state (due), which the loop
// turns into one timer of its clock.
//
// State by state (the events not named change nothing):
//
//	waiting-for-driver  named                  -> claim the path (start); the name
//	                                              and path are the claim's until
//	                                              claimOver takes them
//	waiting-for-kubelet calledGetInfo          -> (silence timer stops)
//	                    silence timer          -> kubelet-silent
//	kubelet-silent      calledGetInfo          -> waiting-for-kubelet
//	any published       verdict accepted       -> registered
//	                    verdict rejected       -> rejected, retry timer (or fail: Exit policy)
//	rejected            calledGetInfo          -> (retry timer stops: kubelet tries
//	                                              again by itself, on this socket)
//	                    retry timer            -> rejected, publish again (retry)
//	                    published              -> rejected until kubelet's next verdict
//	any publishing      path empty             -> vacancy timer; then publish (deleted)
//	                    dead socket at path    -> publish (stale), after the looks it is due
//	                    live instance at path  -> superseded, step aside and follow it
//	                    publication short of a resource -> shortage timer; then publish
//	superseded/deferring path empty, owner dead -> publish (vacated)
//	registered          handed off             -> superseded (handed over)
//	any                 stop                   -> stopped

import (
	"io/fs"
	"os"
	"time"
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
	// shortageTimer: a publication that failed for want of a resource is
	// due again.
	shortageTimer
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
const (
	kubeletBackoffInitial = 500 * time.Millisecond
	kubeletBackoffMax     = 2*time.Minute + 2*time.Second
	// kubeletRetryLate is what kubelet's retry may take beyond its backoff:
	// its reconciler's period (1 s), and a second to spare on a loaded node.
	kubeletRetryLate = 2 * time.Second
)

// kubeletRetryDue is when kubelet >= 1.36, after its rejections'th
// rejection in a row, has called GetInfo again at the latest.
func kubeletRetryDue(rejections uint64) time.Duration {
	backoff := kubeletBackoffInitial
	for i := uint64(1); i < rejections && backoff < kubeletBackoffMax; i++ {
		backoff *= 2
	}
	return min(backoff, kubeletBackoffMax) + kubeletRetryLate
}

// Backoff of a publication that failed for want of a resource: the same as
// the registrar's other transient faults (the calls to the driver).
const (
	publishRetryInitial = 100 * time.Millisecond
	publishRetryMax     = 5 * time.Second
)

// machine is the registration: the loop's only state, and what readers
// see of it (a copy, in each snapshot).
type machine struct {
	cfg   Config
	state State
	// name is the driver's, "" until it named itself; path follows it.
	name, path string
	// gen is the current publication, 0 when none is served.
	gen uint64
	// claim is the name the driver gave itself while the loop claims its
	// path (claim): name and path stay those of the registration that
	// stands until the claim is over; "" when none runs.
	claim string
	// handedOver: superseded because this instance handed its socket over.
	handedOver bool
	// due holds each timer's deadline; zero when it is not running.
	due [timers]time.Time
	// backoff is the wait after kubelet's next rejection; shortBackoff
	// after the next failed publication.
	backoff, shortBackoff time.Duration
	// pending is the reason of a publication that failed for want of a
	// resource, publishError why.
	pending, publishError string
	suspect               suspicion
	// owner is the file of the socket served by the instance this one
	// follows while standing aside.
	owner fs.FileInfo
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
	log       history
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
		backoff: cfg.Retry.Initial, shortBackoff: publishRetryInitial,
		log: history{publications: map[string]uint64{}},
	}
}

// Events: the inputs of step.
type (
	// named: the driver named itself (again).
	named struct{ name string }
	// claimOver: the conversation about the path claimed is over; the
	// loop takes its socket over, defers or publishes, under the name
	// claimed.
	claimOver struct{}
	// published: publication gen is served at the path.
	published struct {
		gen    uint64
		reason string
	}
	// adopted: publication gen is a socket taken over from the previous
	// instance, with kubelet's verdict on it.
	adopted struct {
		gen     uint64
		verdict *Verdict
	}
	// deferred: a registrar that cannot hand its socket over serves the
	// path (its socket is owner); this one waits for it to leave.
	deferred struct{ owner fs.FileInfo }
	// publishFailed: publishing for reason failed for want of a resource.
	publishFailed struct {
		reason string
		err    error
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
	// looked: what is at the path, looked at for purpose.
	looked struct {
		at      At
		purpose purpose
	}
	// serveEnded: the gRPC server of publication gen stopped serving.
	serveEnded struct {
		gen uint64
		err error
	}
	// handedOff: this instance handed its socket (owner) over.
	handedOff struct{ owner fs.FileInfo }
	// pathChanged: the directory changed at the path, or its watch lost
	// events.
	pathChanged struct{}
	// ownerLost: the connection to the instance followed ended.
	ownerLost struct{}
	// stopping: Run is returning.
	stopping struct{}
)

// purpose says why the path is looked at.
type purpose int

const (
	// lookChange: something changed at the path.
	lookChange purpose = iota
	// lookVacancy: vacancyGrace has passed since the path was found empty
	// or silent.
	lookVacancy
	// lookPending: a publication that failed for want of a resource is
	// due again.
	lookPending
)

// Effects: what step asks the loop to do.
type (
	// claim: the driver named itself: take the socket at its path over,
	// defer to a live registrar there, or publish for reason.
	claim struct{ reason string }
	// publish: put a new socket at the path, for reason.
	publish struct{ reason string }
	// look: look at the path, for purpose, and answer with looked.
	look struct{ purpose purpose }
	// stepAside: retire the current publication without touching the
	// path, and follow the instance whose socket is owner.
	stepAside struct{ owner fs.FileInfo }
	// follow: hold a connection to the instance whose socket is owner.
	follow struct{ owner fs.FileInfo }
	// warn: something at the path is left alone; tell the operator.
	warn struct {
		msg string
		at  At
	}
	// fail: Run returns err.
	fail struct{ err error }
)

type effect any

// step applies ev, which happens at now, and returns what to do about it.
func (m *machine) step(now time.Time, ev any) []effect {
	switch ev := ev.(type) {
	case named:
		if ev.name == m.name {
			return nil
		}
		reason := ReasonStart
		if m.name != "" {
			reason = ReasonRenamed
		}
		m.claim = ev.name
		m.attempts, m.due[retryTimer] = 0, time.Time{}
		return []effect{claim{reason}}

	case claimOver:
		if m.claim != "" {
			m.name, m.path, m.claim = m.claim, SocketPath(m.cfg.Dir, m.claim), ""
		}

	case published:
		m.publishedAt(now, ev.gen, ev.reason)
		if m.state != Rejected || ev.reason == ReasonStart || ev.reason == ReasonRenamed {
			// After a rejection kubelet's verdict stands until it gives
			// another.
			m.state, m.failingSince = WaitingForKubelet, time.Time{}
		}

	case adopted:
		m.publishedAt(now, ev.gen, ReasonHandover)
		m.state, m.failingSince = WaitingForKubelet, time.Time{}
		if ev.verdict != nil {
			v := *ev.verdict
			m.log.lastVerdict = &v
			if v.Registered {
				m.state = Registered
				m.due[silenceTimer] = time.Time{}
			}
		}

	case deferred:
		m.standAside(Deferring, ev.owner)
		return []effect{follow(ev)}

	case publishFailed:
		m.publishError, m.pending = ev.err.Error(), ev.reason
		m.due[shortageTimer] = now.Add(m.shortBackoff)
		m.shortBackoff = min(2*m.shortBackoff, publishRetryMax)

	case kubeletCall:
		if ev.gen != m.gen || m.gen == 0 {
			return nil // about a socket since replaced
		}
		if !ev.notify {
			m.log.calls.GetInfo++
			m.log.lastGetInfo = now
			m.due[silenceTimer] = time.Time{}
			if m.state == Rejected && !m.due[retryTimer].IsZero() {
				// kubelet came back to the socket it rejected: it
				// retries by itself, and a new socket now would be
				// one under the name it may be about to accept.
				m.due[retryTimer], m.kubeletRetrying = time.Time{}, true
			}
			if m.state == KubeletSilent {
				m.state, m.failingSince = WaitingForKubelet, time.Time{}
			}
			return nil
		}
		return m.verdict(now, ev.registered, ev.reason)

	case fired:
		m.due[ev.timer] = time.Time{}
		switch ev.timer {
		case silenceTimer:
			if m.state == WaitingForKubelet {
				m.state, m.failingSince = KubeletSilent, now
			}
		case retryTimer:
			if m.state == Rejected && m.gen != 0 {
				return []effect{publish{ReasonRetry}}
			}
		case vacancyTimer:
			return []effect{look{lookVacancy}}
		case shortageTimer:
			return []effect{look{lookPending}}
		}

	case looked:
		return m.lookedAt(now, ev.at, ev.purpose)

	case serveEnded:
		if ev.gen == m.gen && m.gen != 0 {
			return []effect{publish{ReasonStale}}
		}

	case handedOff:
		m.standAside(Superseded, ev.owner)
		m.handedOver = true
		return []effect{follow(ev)}

	case pathChanged:
		if m.path != "" {
			return []effect{look{lookChange}}
		}

	case ownerLost:
		// Its socket is no longer known to be served: ask it again.
		m.owner = nil
		return []effect{look{lookChange}}

	case stopping:
		m.state, m.gen, m.due, m.claim = Stopped, 0, [timers]time.Time{}, ""
	}
	return nil
}

// publishedAt records that publication gen serves the path since now.
func (m *machine) publishedAt(now time.Time, gen uint64, reason string) {
	m.gen, m.handedOver, m.owner, m.kubeletRetrying = gen, false, nil, false
	m.log.publications[reason]++
	m.log.lastPublish = now
	m.due[silenceTimer] = now.Add(m.cfg.KubeletSilence)
	m.due[vacancyTimer], m.due[shortageTimer] = time.Time{}, time.Time{}
	m.suspect = suspicion{}
	m.pending, m.publishError, m.shortBackoff = "", "", publishRetryInitial
}

// standAside leaves the path to another instance, whose socket is owner.
func (m *machine) standAside(state State, owner fs.FileInfo) {
	m.state, m.gen, m.owner, m.handedOver, m.kubeletRetrying = state, 0, owner, false, false
	m.due = [timers]time.Time{}
	m.pending, m.publishError, m.failingSince = "", "", time.Time{}
	m.suspect = suspicion{}
}

// verdict records kubelet's verdict on the current publication.
func (m *machine) verdict(now time.Time, registered bool, reason string) []effect {
	m.log.lastVerdict = &Verdict{Registered: registered, Reason: reason, Time: now}
	m.log.lastNotify = now
	m.due[silenceTimer] = time.Time{}
	m.kubeletRetrying = false
	if registered {
		m.log.calls.NotifyRegistered++
		m.state, m.failingSince, m.attempts = Registered, time.Time{}, 0
		m.backoff, m.due[retryTimer] = m.cfg.Retry.Initial, time.Time{}
		return nil
	}
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
		return []effect{fail{&RejectedError{Reason: reason}}}
	}
	if m.due[retryTimer].IsZero() {
		// Published again only after kubelet's own retry is overdue: a
		// kubelet that retries by itself calls GetInfo before then.
		m.due[retryTimer] = now.Add(max(m.backoff, kubeletRetryDue(m.attempts)))
		m.backoff = min(2*m.backoff, m.cfg.Retry.Max)
	}
	return nil
}

// lookedAt decides what to do about what is at the path.
func (m *machine) lookedAt(now time.Time, at At, why purpose) []effect {
	aside := m.state == Superseded || m.state == Deferring
	switch at.kind {
	case atNothing:
		switch {
		case why == lookPending:
			return []effect{publish{m.pending}}
		case why == lookVacancy && aside:
			return []effect{publish{ReasonVacated}}
		case why == lookVacancy && m.gen != 0:
			return []effect{publish{ReasonDeleted}}
		case aside || m.gen != 0:
			m.await(now)
		}
	case atOurs:
		if why == lookPending {
			return []effect{publish{m.pending}}
		}
	case atNotSocket:
		if why == lookPending {
			return []effect{publish{m.pending}} // fails, saying why
		}
		return []effect{warn{"Something that is not a socket replaced the registration socket; leaving it alone", at}}
	case atUnknown:
		return []effect{warn{"Cannot inspect the registration socket", at}}
	case atOwner:
		// The connection to the owner this instance follows says whether
		// it lives, without another call.
	case atOtherDriver:
		m.suspect = suspicion{}
		return []effect{warn{"Another driver's registration socket is at our path; leaving it alone", at}}
	case atLive:
		m.suspect = suspicion{}
		if aside {
			// Another instance again, e.g. after a handover between two
			// newer ones: follow the current owner.
			m.owner = at.File
			return []effect{follow{at.File}}
		}
		// Never fight back: a newer instance (a rolling update with
		// maxSurge) owns the registration now.
		m.standAside(Superseded, at.File)
		return []effect{stepAside{at.File}}
	case atRefused, atSilent:
		// A socket that refuses connections is dead, or was bound a moment
		// ago and is not listening yet (another registrar between its bind
		// and its listen): one more look after the grace. One that accepts
		// and does not answer in time is slow, perhaps only on a loaded
		// node: it is replaced only after maxStrikes looks.
		strikes := m.suspect.look(at.File, now)
		if strikes < 2 || strikes < maxStrikes && at.kind == atSilent {
			m.await(now)
			return nil
		}
		m.suspect = suspicion{}
		if aside {
			return []effect{publish{ReasonVacated}}
		}
		return []effect{publish{ReasonStale}}
	}
	return nil
}

// await looks at the path again after vacancyGrace.
func (m *machine) await(now time.Time) {
	if m.due[vacancyTimer].IsZero() {
		m.due[vacancyTimer] = now.Add(vacancyGrace)
	}
}

// next returns the earliest deadline, zero when no timer runs.
func (m *machine) next() (at time.Time) {
	for _, due := range m.due {
		if !due.IsZero() && (at.IsZero() || due.Before(at)) {
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
	file    fs.FileInfo
	strikes int
	last    time.Time // of the last look counted
}

// look records a look at file that found it not answering, at now, and
// returns how many looks count against it.
func (s *suspicion) look(file fs.FileInfo, now time.Time) int {
	if s.file == nil || !os.SameFile(s.file, file) {
		*s = suspicion{file: file}
	}
	if s.strikes == 0 || now.Sub(s.last) >= vacancyGrace {
		s.strikes++
		s.last = now
	}
	return s.strikes
}
