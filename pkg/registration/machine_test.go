package registration

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

// t0 is when every table case starts.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Two socket files, and the one the table's publication 1 was bound to.
var (
	fileA = sockfile.ID{Dev: 1, Ino: 10}
	fileB = sockfile.ID{Dev: 1, Ino: 11}
	ours  = sockfile.ID{Dev: 1, Ino: 1}
)

// claiming is m once the driver named itself testDriver, or renamed
// itself other.example.com: the claim's look runs.
func claiming(m machine) machine {
	name := testDriver
	if m.name != "" {
		name = "other.example.com"
	}
	m.step(t0, driverReport{name: name, reachable: true})
	return m
}

func testMachine() machine {
	m := newMachine(Config{Dir: "/reg", Endpoint: testEndpoint, OnRejection: Retry}, t0)
	return m
}

// publishedIn is a machine serving publication 1 for testDriver, brought
// to state by the events that lead there.
func publishedIn(state State) machine {
	m := testMachine()
	m.step(t0, driverReport{name: testDriver, reachable: true})
	m.step(t0, looked{At{kind: AtNothing}, lookClaim})
	m.step(t0, published{1, ReasonStart, ours})
	switch state {
	case Registered:
		m.step(t0, kubeletCall{gen: 1, notify: true, registered: true})
	case KubeletSilent:
		m.step(t0.Add(10*time.Second), fired{silenceTimer})
	}
	return m
}

// then steps m through events at, and returns it.
func then(m machine, at time.Time, events ...event) machine {
	for _, ev := range events {
		m.step(at, ev)
	}
	return m
}

func TestTransitions(t *testing.T) {
	later := t0.Add(time.Minute)
	rejected := func() machine {
		m := publishedIn(WaitingForKubelet)
		m.step(t0, kubeletCall{gen: 1, notify: true, reason: "no"})
		return m
	}
	aside := func(state State) machine {
		m := publishedIn(WaitingForKubelet)
		m.standAside(state, fileA)
		return m
	}
	type want struct {
		state   State
		effects []effect
		// due: the timers running after the step, and when they fire.
		due map[timer]time.Time
	}
	cases := []struct {
		name string
		m    machine
		at   time.Time
		ev   event
		want want
	}{
		{"the driver names itself: claim its path", testMachine(), t0, driverReport{name: testDriver, reachable: true},
			want{WaitingForDriver, []effect{look{lookClaim}}, nil}},
		{"the same name again: nothing", publishedIn(Registered), t0, driverReport{name: testDriver, reachable: true},
			want{Registered, nil, nil}},
		{"another name: claim the new path", publishedIn(Registered), t0, driverReport{name: "other.example.com", reachable: true},
			want{Registered, []effect{look{lookClaim}}, nil}},
		{"a name whose path is too long: fail", testMachine(), t0, driverReport{name: strings.Repeat("d", MaxSocketPathLength), reachable: true},
			want{WaitingForDriver, []effect{fail{dirError(fmt.Errorf("registration socket path %q is %d bytes long, more than the %d a Unix socket allows: use a shorter registration directory",
				SocketPath("/reg", strings.Repeat("d", MaxSocketPathLength)), len(SocketPath("/reg", strings.Repeat("d", MaxSocketPathLength))), MaxSocketPathLength))}}, nil}},
		{"the claimed path is empty: publish", claiming(testMachine()), t0, looked{At{kind: AtNothing}, lookClaim},
			want{WaitingForDriver, []effect{publish{ReasonStart, 1}}, nil}},
		{"the claimed path holds a registrar that can hand over: take its socket over", claiming(testMachine()), t0, looked{At{kind: AtHandsOver, File: fileA}, lookClaim},
			want{WaitingForDriver, []effect{takeOver{1}}, nil}},
		{"the claimed path holds a registrar of the driver that cannot hand over: defer to it", claiming(testMachine()), t0,
			looked{At{kind: AtLive, File: fileA, Driver: testDriver, Endpoint: testEndpoint}, lookClaim},
			want{Deferring, []effect{follow{fileA}}, nil}},
		{"the claimed path holds a registrar with another endpoint: replace it", claiming(testMachine()), t0,
			looked{At{kind: AtLive, path: "/reg/p", File: fileA, Driver: testDriver, Endpoint: "/other/csi.sock"}, lookClaim},
			want{WaitingForDriver, []effect{publish{ReasonStart, 1}}, nil}},
		{"the claimed path holds a dead socket: replace it", claiming(testMachine()), t0, looked{At{kind: AtRefused, path: "/reg/p", File: fileA, Err: syscall.ECONNREFUSED}, lookClaim},
			want{WaitingForDriver, []effect{publish{ReasonStart, 1}}, nil}},
		{"the claimed path holds something that is not a socket: fail", claiming(testMachine()), t0, looked{At{kind: AtNotSocket, path: "/reg/p", mode: fs.ModeDir}, lookClaim},
			want{WaitingForDriver, []effect{fail{&sockfile.NotASocketError{Path: "/reg/p", Mode: fs.ModeDir}}}, nil}},
		{"the publication that a change waited for is in place: look", then(claiming(publishedIn(Registered)), t0, pathChanged{}, looked{At{kind: AtNothing}, lookClaim}), t0, published{2, ReasonRenamed, fileB},
			want{WaitingForKubelet, []effect{look{lookChange}}, map[timer]time.Time{silenceTimer: t0.Add(kubeletSilence)}}},
		{"the socket was not handed over: publish", then(claiming(testMachine()), t0, looked{At{kind: AtHandsOver, File: fileA}, lookClaim}), t0, tookOver{},
			want{WaitingForDriver, []effect{publish{ReasonStart, 2}}, nil}},
		{"a handover asked during a conversation: held", then(publishedIn(Registered), t0, pathChanged{}), t0, handoverAsked{gen: 1},
			want{Registered, nil, nil}},
		{"a handover held during a conversation: offered once it is over", then(publishedIn(Registered), t0, pathChanged{}, handoverAsked{gen: 1}), t0, looked{At{kind: AtOurs, File: ours}, lookChange},
			want{Registered, []effect{offer{}}, nil}},
		{"a handover held during a look that finds a newer instance: refused", then(publishedIn(Registered), t0, pathChanged{}, handoverAsked{gen: 1}), t0,
			looked{At{kind: AtLive, File: fileA, Driver: testDriver, Endpoint: testEndpoint}, lookChange},
			want{Superseded, []effect{retire{}, follow{fileA}, answer{nil, errors.New("this instance no longer serves the registration socket")}}, nil}},
		{"a handover held during a look whose outcome is a new publication: refused",
			then(publishedIn(Registered), t0, looked{At{kind: AtNothing}, lookChange}, fired{vacancyTimer}, handoverAsked{gen: 1}), t0.Add(vacancyGrace),
			looked{At{kind: AtNothing}, lookVacancy},
			want{Registered, []effect{publish{ReasonDeleted, 2}, answer{nil, errors.New("this instance no longer serves the registration socket")}}, nil}},
		{"a second handover asked during a conversation: refused", then(publishedIn(Registered), t0, pathChanged{}, handoverAsked{gen: 1}), t0, handoverAsked{gen: 1},
			want{Registered, []effect{answer{nil, errors.New("this instance is busy with another handover of the registration socket")}}, nil}},
		{"a handover held when Run stops: refused once the conversation is over", then(publishedIn(Registered), t0, pathChanged{}, handoverAsked{gen: 1}, stopping{}), t0,
			looked{At{kind: AtOurs, File: ours}, lookChange},
			want{Stopped, []effect{answer{nil, errors.New("this instance no longer serves the registration socket")}}, nil}},
		{"a handover asked of a registered publication: offer it", publishedIn(Registered), t0, handoverAsked{gen: 1},
			want{Registered, []effect{offer{}}, nil}},
		{"a handover asked before kubelet registered: refused", publishedIn(WaitingForKubelet), t0, handoverAsked{gen: 1},
			want{WaitingForKubelet, []effect{answer{nil, errors.New("kubelet has not registered the driver through this instance's socket (state waiting-for-kubelet)")}},
				map[timer]time.Time{silenceTimer: t0.Add(10 * time.Second)}}},
		{"the path changes during a conversation that publishes: looked at once the new socket is known", then(claiming(publishedIn(Registered)), t0, pathChanged{}), t0, looked{At{kind: AtNothing}, lookClaim},
			want{Registered, []effect{publish{ReasonRenamed, 2}}, nil}},
		{"the claimed path changes during the takeover: looked at once the socket is taken", then(claiming(testMachine()), t0, looked{At{kind: AtHandsOver, File: fileA}, lookClaim}, pathChanged{}), t0,
			tookOver{gen: 1, file: fileA, verdict: &Verdict{Registered: true}},
			want{Registered, []effect{look{lookChange}}, nil}},
		{"the claimed path changes during the takeover: not taken, publish before looking", then(claiming(testMachine()), t0, looked{At{kind: AtHandsOver, File: fileA}, lookClaim}, pathChanged{}), t0,
			tookOver{},
			want{WaitingForDriver, []effect{publish{ReasonStart, 2}}, nil}},
		{"published: wait for kubelet, which is due", testMachine(), t0, published{1, ReasonStart, ours},
			want{WaitingForKubelet, nil, map[timer]time.Time{silenceTimer: t0.Add(10 * time.Second)}}},
		{"kubelet's GetInfo: the silence timer stops", publishedIn(WaitingForKubelet), t0, kubeletCall{gen: 1},
			want{WaitingForKubelet, nil, nil}},
		{"kubelet does not call in time: kubelet-silent", publishedIn(WaitingForKubelet), t0.Add(10 * time.Second), fired{silenceTimer},
			want{KubeletSilent, nil, nil}},
		{"kubelet-silent until kubelet calls", publishedIn(KubeletSilent), later, kubeletCall{gen: 1},
			want{WaitingForKubelet, nil, nil}},
		{"accepted: registered", publishedIn(WaitingForKubelet), t0, kubeletCall{gen: 1, notify: true, registered: true},
			want{Registered, nil, nil}},
		{"accepted while silent: registered", publishedIn(KubeletSilent), t0, kubeletCall{gen: 1, notify: true, registered: true},
			want{Registered, nil, nil}},
		{"a verdict on an earlier socket: ignored", publishedIn(WaitingForKubelet), t0, kubeletCall{gen: 0, notify: true, registered: true},
			want{WaitingForKubelet, nil, map[timer]time.Time{silenceTimer: t0.Add(10 * time.Second)}}},
		{"rejected: publish again once kubelet's own retry is overdue", publishedIn(WaitingForKubelet), t0, kubeletCall{gen: 1, notify: true, reason: "no"},
			want{Rejected, nil, map[timer]time.Time{retryTimer: t0.Add(2500 * time.Millisecond)}}},
		{"rejected with a registrar's backoff longer than kubelet's retry: the backoff", func() machine {
			m := publishedIn(WaitingForKubelet)
			m.backoff.Duration = 10 * time.Second
			return m
		}(), t0, kubeletCall{gen: 1, notify: true, reason: "no"},
			want{Rejected, nil, map[timer]time.Time{retryTimer: t0.Add(10 * time.Second)}}},
		{"rejected, kubelet calls GetInfo on the rejected socket: it retries by itself, the socket stays", rejected(), t0.Add(time.Second), kubeletCall{gen: 1},
			want{Rejected, nil, nil}},
		{"rejected, kubelet retried by itself and rejects again: publish once its second retry is overdue", then(rejected(), t0.Add(time.Second), kubeletCall{gen: 1}), t0.Add(time.Second),
			kubeletCall{gen: 1, notify: true, reason: "no"},
			want{Rejected, nil, map[timer]time.Time{retryTimer: t0.Add(4 * time.Second)}}},
		{"rejected, kubelet retried by itself and accepts: registered", then(rejected(), t0.Add(time.Second), kubeletCall{gen: 1}), t0.Add(time.Second),
			kubeletCall{gen: 1, notify: true, registered: true},
			want{Registered, nil, nil}},
		{"rejected with the Exit policy: fail", func() machine { m := publishedIn(WaitingForKubelet); m.cfg.OnRejection = Exit; return m }(), t0,
			kubeletCall{gen: 1, notify: true, reason: "no"},
			want{Rejected, []effect{fail{&RejectedError{Reason: "no"}}}, nil}},
		{"rejected, kubelet not back in time: publish again", rejected(), t0.Add(2500 * time.Millisecond), fired{retryTimer},
			want{Rejected, []effect{publish{ReasonRetry, 2}}, nil}},
		{"rejected, published again: still rejected", then(rejected(), t0.Add(time.Second), fired{retryTimer}), t0.Add(time.Second), published{2, ReasonRetry, ours},
			want{Rejected, nil, map[timer]time.Time{silenceTimer: t0.Add(11 * time.Second)}}},
		{"rejected, published again, kubelet's GetInfo on the new socket: nothing", then(rejected(), t0.Add(time.Second), fired{retryTimer}, published{2, ReasonRetry, ours}), t0.Add(2 * time.Second),
			kubeletCall{gen: 2},
			want{Rejected, nil, nil}},
		{"rejected, kubelet silent after the retry: still rejected", rejected(), later, fired{silenceTimer},
			want{Rejected, nil, map[timer]time.Time{retryTimer: t0.Add(2500 * time.Millisecond)}}},
		{"rejected, then accepted: registered", rejected(), later, kubeletCall{gen: 1, notify: true, registered: true},
			want{Registered, nil, nil}},
		{"rejected, the driver renamed: waiting for kubelet again", func() machine {
			m := rejected()
			m.step(later, driverReport{name: "other.example.com", reachable: true})
			m.step(later, looked{At{kind: AtNothing}, lookClaim})
			return m
		}(), later, published{2, ReasonRenamed, ours},
			want{WaitingForKubelet, nil, map[timer]time.Time{silenceTimer: later.Add(10 * time.Second)}}},
		{"our socket deleted: look again after the grace", publishedIn(Registered), t0, looked{At{kind: AtNothing}, lookChange},
			want{Registered, nil, map[timer]time.Time{vacancyTimer: t0.Add(vacancyGrace)}}},
		{"still empty after the grace: publish", publishedIn(Registered), t0, looked{At{kind: AtNothing}, lookVacancy},
			want{Registered, []effect{publish{ReasonDeleted, 2}}, nil}},
		{"our own socket: nothing", publishedIn(Registered), t0, looked{At{kind: AtOurs}, lookChange},
			want{Registered, nil, nil}},
		{"a live instance of the driver at the path: step aside", publishedIn(Registered), t0, looked{At{kind: AtLive, File: fileA, Driver: testDriver}, lookChange},
			want{Superseded, []effect{retire{}, follow{fileA}}, nil}},
		{"another driver's socket: left alone", publishedIn(Registered), t0, looked{At{kind: AtLive, path: "/reg/p", File: fileA, Driver: "other.example.com"}, lookChange},
			want{Registered, nil, nil}},
		{"not a socket: left alone", publishedIn(Registered), t0, looked{At{kind: AtNotSocket, path: "/reg/p", File: fileA, mode: fs.ModeDir}, lookChange},
			want{Registered, nil, nil}},
		{"a socket that refuses: one more look", publishedIn(Registered), t0, looked{At{kind: AtRefused, File: fileA}, lookChange},
			want{Registered, nil, map[timer]time.Time{vacancyTimer: t0.Add(vacancyGrace)}}},
		{"a socket that still refuses a grace later: replace it",
			then(then(publishedIn(Registered), t0, looked{At{kind: AtRefused, File: fileA}, lookChange}), t0.Add(vacancyGrace), fired{vacancyTimer}),
			t0.Add(vacancyGrace), looked{At{kind: AtRefused, File: fileA}, lookVacancy},
			want{Registered, []effect{publish{ReasonStale, 2}}, nil}},
		{"a slow socket at its second look: one more",
			then(then(publishedIn(Registered), t0, looked{At{kind: AtSilent, File: fileA}, lookChange}), t0.Add(vacancyGrace), fired{vacancyTimer}),
			t0.Add(vacancyGrace), looked{At{kind: AtSilent, File: fileA}, lookVacancy},
			want{Registered, nil, map[timer]time.Time{vacancyTimer: t0.Add(2 * vacancyGrace)}}},
		{"superseded, the owner followed: nothing", aside(Superseded), t0, looked{At{kind: AtOwner, File: fileA}, lookChange},
			want{Superseded, nil, nil}},
		{"superseded, another owner: follow it", aside(Superseded), t0, looked{At{kind: AtLive, File: fileB, Driver: testDriver}, lookChange},
			want{Superseded, []effect{follow{fileB}}, nil}},
		{"superseded, the path left empty: look again after the grace", aside(Superseded), t0, looked{At{kind: AtNothing}, lookChange},
			want{Superseded, nil, map[timer]time.Time{vacancyTimer: t0.Add(vacancyGrace)}}},
		{"deferring, the path still empty: publish", aside(Deferring), t0, looked{At{kind: AtNothing}, lookVacancy},
			want{Deferring, []effect{publish{ReasonVacated, 2}}, nil}},
		{"superseded, published again: waiting for kubelet", aside(Superseded), t0, published{2, ReasonVacated, ours},
			want{WaitingForKubelet, nil, map[timer]time.Time{silenceTimer: t0.Add(10 * time.Second)}}},
		{"the owner's connection ended: look", aside(Superseded), t0, ownerLost{fileA},
			want{Superseded, []effect{look{lookChange}}, nil}},
		{"an earlier owner's connection ended: nothing", aside(Superseded), t0, ownerLost{fileB},
			want{Superseded, nil, nil}},
		{"a publication short of file descriptors: try again", publishedIn(Registered), t0, publishFailed{ReasonDeleted, syscall.EMFILE},
			want{Registered, nil, map[timer]time.Time{publishTimer: t0.Add(publishRetry.Duration)}}},
		{"the shortage's retry finds the path empty: publish",
			then(publishedIn(Registered), t0, publishFailed{ReasonDeleted, syscall.EMFILE}, fired{publishTimer}),
			t0.Add(publishRetry.Duration), looked{At{kind: AtNothing}, lookPending},
			want{Registered, []effect{publish{ReasonDeleted, 2}}, nil}},
		{"handed over: superseded, following the new owner on our socket file", then(publishedIn(Registered), t0, handoverAsked{gen: 1}), t0, offered{},
			want{Superseded, []effect{retire{handedOver: true}, follow{ours}, answer{}}, nil}},
		{"the offer failed: registered still", then(publishedIn(Registered), t0, handoverAsked{gen: 1}), t0, offered{err: errors.New("refused")},
			want{Registered, []effect{answer{err: errors.New("refused")}}, nil}},
		{"adopted with kubelet's acceptance: registered", claiming(testMachine()), t0, tookOver{1, fileA, &Verdict{Registered: true}},
			want{Registered, nil, nil}},
		{"the serving socket stopped accepting: publish", publishedIn(Registered), t0, serveEnded{gen: 1, err: errors.New("closed")},
			want{Registered, []effect{publish{ReasonStale, 2}}, nil}},
		{"the serving socket stopped accepting during a conversation: publish once it is over", then(publishedIn(Registered), t0, pathChanged{}), t0, serveEnded{gen: 1, err: errors.New("closed")},
			want{Registered, nil, map[timer]time.Time{publishTimer: t0}}},
		{"the offer closed the serving socket: no failure, publish only if the offer fails", then(publishedIn(Registered), t0, handoverAsked{gen: 1}), t0, serveEnded{gen: 1, err: errors.New("closed")},
			want{Registered, nil, map[timer]time.Time{publishTimer: t0}}},
		{"stopping: stopped, no timer", rejected(), t0, stopping{},
			want{Stopped, nil, nil}},
	}
	// happened: the transitions of the cases that make any.
	happened := map[string][]Transition{
		"the driver names itself: claim its path":                                                       {Claiming{Name: testDriver}},
		"another name: claim the new path":                                                              {Claiming{Name: "other.example.com", Renamed: true}},
		"the claimed path is empty: publish":                                                            {Named{testDriver}},
		"the claimed path holds a registrar of the driver that cannot hand over: defer to it":           {Named{testDriver}, Deferred{}},
		"the claimed path holds a registrar with another endpoint: replace it":                          {Named{testDriver}, Replacing{"/reg/p was published by another instance of " + testDriver}},
		"the claimed path holds a dead socket: replace it":                                              {Named{testDriver}, Replacing{"/reg/p was published by another process and does not answer GetInfo: connection refused"}},
		"the socket was not handed over: publish":                                                       {Named{testDriver}},
		"a handover held during a look that finds a newer instance: refused":                            {SteppedAside{}},
		"the path changes during a conversation that publishes: looked at once the new socket is known": {Named{"other.example.com"}},
		"the claimed path changes during the takeover: looked at once the socket is taken":              {Named{testDriver}, Published{ReasonHandover}, DriverRegistered{}},
		"the claimed path changes during the takeover: not taken, publish before looking":               {Named{testDriver}},
		"published: wait for kubelet, which is due":                                                     {Published{ReasonStart}},
		"kubelet does not call in time: kubelet-silent":                                                 {KubeletWentSilent{}},
		"accepted: registered":                                                                            {KubeletAccepted{}, DriverRegistered{}},
		"accepted while silent: registered":                                                               {KubeletAccepted{}, DriverRegistered{}},
		"a verdict on an earlier socket: ignored":                                                         {VerdictIgnored{Registered: true}},
		"rejected: publish again once kubelet's own retry is overdue":                                     {KubeletRejected{Reason: "no", Attempts: 1, First: true, Retry: t0.Add(2500 * time.Millisecond)}},
		"rejected with a registrar's backoff longer than kubelet's retry: the backoff":                    {KubeletRejected{Reason: "no", Attempts: 1, First: true, Retry: t0.Add(10 * time.Second)}},
		"rejected, kubelet calls GetInfo on the rejected socket: it retries by itself, the socket stays":  {KubeletRetrying{Attempts: 1}},
		"rejected, kubelet retried by itself and rejects again: publish once its second retry is overdue": {KubeletRejected{Reason: "no", Attempts: 2, Retry: t0.Add(4 * time.Second)}},
		"rejected, kubelet retried by itself and accepts: registered":                                     {KubeletAccepted{}, DriverRegistered{}},
		"rejected with the Exit policy: fail":                                                             {KubeletRejected{Reason: "no", Attempts: 1, First: true}},
		"rejected, published again: still rejected":                                                       {Published{ReasonRetry}},
		"rejected, then accepted: registered":                                                             {KubeletAccepted{}, DriverRegistered{}},
		"rejected, the driver renamed: waiting for kubelet again":                                         {Published{ReasonRenamed}},
		"a live instance of the driver at the path: step aside":                                           {SteppedAside{}},
		"another driver's socket: left alone": {LeftAlone{Why: "Another driver's registration socket is at our path; leaving it alone",
			Found: `/reg/p was published by another process for driver "other.example.com", not "` + testDriver + `"`}},
		"not a socket: left alone":                                                            {LeftAlone{Why: "Something that is not a socket replaced the registration socket; leaving it alone", Found: "/reg/p is a directory, not a socket"}},
		"superseded, published again: waiting for kubelet":                                    {Published{ReasonVacated}},
		"a publication short of file descriptors: try again":                                  {PublishFailed{Reason: ReasonDeleted, Err: "too many open files", Retry: t0.Add(publishRetry.Duration)}},
		"handed over: superseded, following the new owner on our socket file":                 {SteppedAside{HandedOver: true}},
		"adopted with kubelet's acceptance: registered":                                       {Named{testDriver}, Published{ReasonHandover}, DriverRegistered{}},
		"the publication that a change waited for is in place: look":                          {Published{ReasonRenamed}},
		"the serving socket stopped accepting: publish":                                       {ServeEnded{errors.New("closed")}},
		"the serving socket stopped accepting during a conversation: publish once it is over": {ServeEnded{errors.New("closed")}},
	}
	unused := maps.Clone(happened)
	for _, tc := range cases {
		delete(unused, tc.name)
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			out := m.step(tc.at, tc.ev)
			effects := out.effects
			if !reflect.DeepEqual(out.transitions, happened[tc.name]) {
				t.Errorf("transitions = %#v, want %#v", out.transitions, happened[tc.name])
			}
			if m.state != tc.want.state {
				t.Errorf("state = %s, want %s", m.state, tc.want.state)
			}
			if !reflect.DeepEqual(effects, tc.want.effects) {
				t.Errorf("effects = %#v, want %#v", effects, tc.want.effects)
			}
			due := map[timer]time.Time{}
			for tm, at := range m.due {
				if !at.IsZero() {
					due[timer(tm)] = at
				}
			}
			if len(due) != len(tc.want.due) || len(due) > 0 && !reflect.DeepEqual(due, tc.want.due) {
				t.Errorf("timers = %v, want %v", due, tc.want.due)
			}
		})
	}
	for name := range unused {
		t.Errorf("transitions given for %q, which is no case", name)
	}
}

// After each rejection the socket is published again once the later of
// the registrar's backoff (doubling up to its cap) and kubelet's own retry
// is due; a second rejection while a retry is pending does not move it, and
// an acceptance starts both over.
func TestRejectionBackoff(t *testing.T) {
	m := publishedIn(WaitingForKubelet)
	now := t0
	var waits []time.Duration
	for gen := uint64(1); gen <= 5; gen++ {
		m.step(now, kubeletCall{gen: gen, notify: true, reason: "no"})
		due := m.due[retryTimer]
		if gen == 1 {
			m.step(now, kubeletCall{gen: gen, notify: true, reason: "again"})
			if m.due[retryTimer] != due {
				t.Fatalf("a second rejection moved the retry from %v to %v", due, m.due[retryTimer])
			}
		}
		waits = append(waits, due.Sub(now))
		now = due
		if effects := m.step(now, fired{retryTimer}).effects; !reflect.DeepEqual(effects, []effect{publish{ReasonRetry, gen + 1}}) {
			t.Fatalf("retry %d: effects %v", gen, effects)
		}
		m.step(now, published{gen + 1, ReasonRetry, ours})
	}
	// The test's backoff is 1s doubling to 4s; kubelet's retry is due 2s
	// after its backoff, 500ms doubling for each rejection counted.
	want := []time.Duration{2500 * time.Millisecond, 4 * time.Second, 6 * time.Second, 10 * time.Second, 18 * time.Second}
	if !reflect.DeepEqual(waits, want) {
		t.Errorf("waits = %v, want %v", waits, want)
	}
	if m.rec.Attempts != 6 || !m.failingSince.Equal(t0) {
		t.Errorf("attempts %d since %v, want 6 since the first rejection at %v", m.rec.Attempts, m.failingSince, t0)
	}
	m.step(now, kubeletCall{gen: 6, notify: true, registered: true})
	m.step(now, kubeletCall{gen: 6, notify: true, reason: "no"})
	if wait := m.due[retryTimer].Sub(now); wait != 2500*time.Millisecond {
		t.Errorf("after an acceptance the wait is %v, want it back at 2.5s", wait)
	}
}

// kubelet's own retry after its nth rejection in a row: its backoff
// (500ms doubling, at most 2m2s) and 2s for its reconciler's next pass.
func TestKubeletRetryDue(t *testing.T) {
	for n, want := range map[uint64]time.Duration{
		1: 2500 * time.Millisecond, 2: 3 * time.Second, 3: 4 * time.Second, 9: 124 * time.Second, 10: 124 * time.Second, 1000: 124 * time.Second,
	} {
		if got := kubeletRetryDue(n); got != want {
			t.Errorf("kubeletRetryDue(%d) = %v, want %v", n, got, want)
		}
	}
}

// The same three rejections, then an acceptance, from a kubelet that
// retries by itself (>= 1.36: GetInfo on the same socket after its
// backoff) and from one that does not (<= 1.35: it tries again only on a
// new socket). The first is never given a new socket; the second is
// given one each time its retry would have been overdue.
func TestRejectedThriceThenAccepted(t *testing.T) {
	publications := func(m machine) (n uint64) {
		for _, c := range m.rec.Publications {
			n += c
		}
		return n
	}
	t.Run("kubelet retries by itself", func(t *testing.T) {
		m := publishedIn(WaitingForKubelet)
		now := t0
		m.step(now, kubeletCall{gen: 1})
		for i, backoff := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second} {
			m.step(now, kubeletCall{gen: 1, notify: true, reason: "no"})
			if m.due[retryTimer].IsZero() {
				t.Fatalf("rejection %d: no retry timer", i+1)
			}
			// kubelet's reconciler passes after its backoff, within a second.
			now = now.Add(backoff + 900*time.Millisecond)
			if now.After(m.due[retryTimer]) {
				t.Fatalf("rejection %d: the retry is due at %v, before kubelet's own at %v", i+1, m.due[retryTimer], now)
			}
			if effects := m.step(now, kubeletCall{gen: 1}).effects; effects != nil || !m.due[retryTimer].IsZero() || !m.kubeletRetrying {
				t.Fatalf("rejection %d, kubelet's GetInfo: effects %v, retry at %v, retrying %v; want no publication pending", i+1, effects, m.due[retryTimer], m.kubeletRetrying)
			}
			if st := m.status(); !strings.Contains(st.Reason, "kubelet tries again by itself on this socket") {
				t.Errorf("rejection %d: status reason %q does not say that kubelet tries again", i+1, st.Reason)
			}
		}
		m.step(now, kubeletCall{gen: 1, notify: true, registered: true})
		if m.state != Registered || publications(m) != 1 || m.next() != (time.Time{}) {
			t.Errorf("%s after %d publications, next timer %v; want registered on the first, no timer", m.state, publications(m), m.next())
		}
	})
	t.Run("kubelet does not retry", func(t *testing.T) {
		m := publishedIn(WaitingForKubelet)
		now := t0
		for gen := uint64(1); gen <= 3; gen++ {
			m.step(now, kubeletCall{gen: gen})
			m.step(now, kubeletCall{gen: gen, notify: true, reason: "no"})
			now = m.due[retryTimer]
			if effects := m.step(now, fired{retryTimer}).effects; !reflect.DeepEqual(effects, []effect{publish{ReasonRetry, gen + 1}}) {
				t.Fatalf("rejection %d: effects %v, want a publication", gen, effects)
			}
			m.step(now, published{gen + 1, ReasonRetry, ours})
		}
		m.step(now, kubeletCall{gen: 4})
		m.step(now, kubeletCall{gen: 4, notify: true, registered: true})
		if m.state != Registered || publications(m) != 4 || m.rec.Publications[ReasonRetry] != 3 {
			t.Errorf("%s after publications %v; want registered on the fourth, three of them retries", m.state, m.rec.Publications)
		}
	})
}

// The state a reader sees, at every moment of a rejection loop: rejected
// with kubelet's reason, the attempts and the next retry, whether or not
// a socket was published again since.
func TestStatusThroughARejectionLoop(t *testing.T) {
	m := publishedIn(WaitingForKubelet)
	now := t0
	for gen := uint64(1); gen <= 3; gen++ {
		m.step(now, kubeletCall{gen: gen, notify: true, reason: "dial unix /typo/csi.sock: no such file"})
		for _, moment := range []string{"after the rejection", "after the retry's publication", "after kubelet's GetInfo"} {
			st := m.status()
			if st.State != Rejected || st.Ready || st.Attempts != gen || st.FailingSince == nil || !st.FailingSince.Equal(t0) ||
				!strings.Contains(st.Reason, "rejected by kubelet: dial unix /typo/csi.sock") {
				t.Fatalf("attempt %d, %s: Status = %+v", gen, moment, st)
			}
			times := fmt.Sprintf("(%d times since %s", gen, t0.UTC().Format(time.RFC3339))
			if gen == 1 {
				times = "(once, at " + t0.UTC().Format(time.RFC3339)
			}
			if !strings.Contains(st.Reason, times) {
				t.Errorf("attempt %d: reason %q lacks %q", gen, st.Reason, times)
			}
			switch moment {
			case "after the rejection":
				if st.NextRetry == nil || !strings.Contains(st.Reason, "published again at") {
					t.Errorf("attempt %d: no next retry in %+v", gen, st)
				}
				now = m.due[retryTimer]
				m.step(now, fired{retryTimer})
				m.step(now, published{gen + 1, ReasonRetry, ours})
			case "after the retry's publication":
				m.step(now, kubeletCall{gen: gen + 1})
			}
		}
	}
}

// A failure that goes on under another name keeps its start: kubelet
// silent, then rejecting, has been failing since the silence; a
// registration clears it.
func TestFailingSince(t *testing.T) {
	m := publishedIn(KubeletSilent)
	silentAt := t0.Add(10 * time.Second)
	if !m.failingSince.Equal(silentAt) {
		t.Fatalf("silent: failing since %v, want %v", m.failingSince, silentAt)
	}
	m.step(silentAt.Add(time.Minute), kubeletCall{gen: 1, notify: true, reason: "no"})
	if m.state != Rejected || !m.failingSince.Equal(silentAt) {
		t.Errorf("rejected after the silence: %s failing since %v, want since %v", m.state, m.failingSince, silentAt)
	}
	m.step(silentAt.Add(2*time.Minute), kubeletCall{gen: 1, notify: true, registered: true})
	if !m.failingSince.IsZero() {
		t.Errorf("registered: failing since %v", m.failingSince)
	}
	if w := testMachine(); !w.failingSince.Equal(t0) || w.state != WaitingForDriver {
		t.Errorf("a new registration: %s failing since %v, want waiting for the driver since the start", w.state, w.failingSince)
	}
}

// From the driver's name to the end of the claim, the status is the
// registration that stands, not ready, saying that the path is claimed;
// then the name and path are the new ones.
func TestClaimUntilItIsOver(t *testing.T) {
	for _, m := range []machine{testMachine(), publishedIn(Registered)} {
		name, path, state := m.name, m.path, m.state
		m.step(t0, driverReport{name: "other.example.com", reachable: true})
		st := m.status()
		if st.DriverName != name || st.SocketPath != path || st.State != state || st.Ready ||
			!strings.HasPrefix(st.Reason, "claiming the registration socket for other.example.com") {
			t.Errorf("while %q claims its path: %+v, want %q at %q %s, not ready, claiming", "other.example.com", st, name, path, state)
		}
		m.step(t0, looked{At{kind: AtNothing}, lookClaim})
		st = m.status()
		if m.claim != "" || st.DriverName != "other.example.com" || st.SocketPath != SocketPath("/reg", "other.example.com") || strings.HasPrefix(st.Reason, "claiming") {
			t.Errorf("after the claim: %+v, want the new name and path", st)
		}
	}
}

// The loop passes on the changes at the registration's path and, while a
// claim runs, at the claimed path: another instance may publish there
// while this one takes the socket over.
func TestWatchesThePathAndTheClaimedPath(t *testing.T) {
	other := SocketPath("/reg", "other.example.com")
	for _, tc := range []struct {
		name string
		m    machine
		want map[string]bool
	}{
		{"no name yet", testMachine(), map[string]bool{"": false, SocketPath("/reg", testDriver): false}},
		{"claiming the first name", claiming(testMachine()), map[string]bool{"": false, SocketPath("/reg", testDriver): true, other: false}},
		{"registered", publishedIn(Registered), map[string]bool{SocketPath("/reg", testDriver): true, other: false, "/reg/.x": false}},
		{"claiming a new name", claiming(publishedIn(Registered)), map[string]bool{SocketPath("/reg", testDriver): true, other: true}},
	} {
		for path, want := range tc.want {
			if got := tc.m.watches(path); got != want {
				t.Errorf("%s: watches(%q) = %v, want %v", tc.name, path, got, want)
			}
		}
	}
}

// Looks at a socket that does not answer count vacancyGrace apart: the
// removal of the old socket and the creation of the new one, seen in quick
// succession between the new one's bind and its listen, are one look.
func TestSuspicionCountsLooksAGraceApart(t *testing.T) {
	var s suspicion
	for _, step := range []struct {
		file sockfile.ID
		at   time.Duration
		want int
	}{
		{fileA, 0, 1},
		{fileA, time.Millisecond, 1}, // the next event at once
		{fileA, vacancyGrace / 2, 1}, // a timer armed before the first look
		{fileA, vacancyGrace, 2},     // a grace after the first look
		{fileA, vacancyGrace + time.Millisecond, 2},
		{fileA, 2 * vacancyGrace, 3},
		{fileB, 2 * vacancyGrace, 1}, // another file starts over
	} {
		if got := s.look(step.file, t0.Add(step.at)); got != step.want {
			t.Errorf("look at +%v: %d strikes, want %d", step.at, got, step.want)
		}
	}
}

// A timer that acts on the path does not fire during a conversation: it
// fires once the conversation is over; the silence timer fires meanwhile.
func TestTimersWaitForTheConversation(t *testing.T) {
	m := publishedIn(WaitingForKubelet)
	m.step(t0, looked{At{kind: AtNothing}, lookChange}) // our socket gone: vacancy timer
	if effects := m.step(t0, pathChanged{}).effects; !reflect.DeepEqual(effects, []effect{look{lookChange}}) {
		t.Fatalf("a change at the path: effects %v, want a look", effects)
	}
	late := t0.Add(time.Minute)
	if m.isDue(vacancyTimer, late) || !m.isDue(silenceTimer, late) || !m.next().Equal(t0.Add(10*time.Second)) {
		t.Errorf("during the look: vacancy due %v, silence due %v, next %v; want only the silence timer", m.isDue(vacancyTimer, late), m.isDue(silenceTimer, late), m.next())
	}
	if effects := m.step(late, fired{vacancyTimer}).effects; effects != nil || m.due[vacancyTimer].IsZero() {
		t.Errorf("the vacancy timer fired during the look: effects %v, still due %v", effects, !m.due[vacancyTimer].IsZero())
	}
	m.step(late, looked{At{kind: AtNothing}, lookChange})
	if !m.isDue(vacancyTimer, late) {
		t.Error("the look is over, and the vacancy timer is not due")
	}
	if effects := m.step(late, fired{vacancyTimer}).effects; !reflect.DeepEqual(effects, []effect{look{lookVacancy}}) {
		t.Errorf("the vacancy timer after the look: effects %v, want a look for the vacancy", effects)
	}
}

// What the driver side reports is the machine's, and Status says it: why
// the driver cannot be asked while it cannot, nothing once it answered.
func TestDriverReportInStatus(t *testing.T) {
	m := testMachine()
	m.step(t0, driverReport{err: "connection refused: start the CSI driver"})
	if st := m.status(); st.DriverReachable || st.DriverError != "connection refused: start the CSI driver" ||
		st.Reason != "waiting for the CSI driver: connection refused: start the CSI driver" {
		t.Errorf("driver unreachable: %+v", st)
	}
	m.step(t0, driverReport{name: testDriver, reachable: true})
	if st := m.status(); !st.DriverReachable || st.DriverError != "" || m.driverName != testDriver {
		t.Errorf("driver found: %+v, name %q", st, m.driverName)
	}
}

// TestHandedOverSocketIsNotOurs: the socket handed over keeps its file, and
// nothing known of it while it was ours may say so once it is the owner's,
// nor once the owner is lost (Health reads the last look).
func TestHandedOverSocketIsNotOurs(t *testing.T) {
	m := then(publishedIn(Registered), t0, handoverAsked{gen: 1})
	m.step(t0, offered{})
	if m.state != Superseded || m.at.kind != AtOwner || m.at.File != ours || m.owner != ours {
		t.Fatalf("after the handover: state %s, last look %v of %v, owner %v; want superseded, the owner's socket %v", m.state, m.at.kind, m.at.File, m.owner, ours)
	}
	m.step(t0, ownerLost{ours})
	if m.at.kind == AtOurs || m.at.File == ours {
		t.Errorf("after the owner was lost: last look %v of %v, want none until the path is looked at again", m.at.kind, m.at.File)
	}
}
