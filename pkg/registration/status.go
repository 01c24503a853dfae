package registration

import (
	"fmt"
	"os"
	"time"

	"github.com/csi-registrar/node-driver-registrar/internal/selinuxcheck"
)

// State is where the registration stands.
type State string

const (
	// WaitingForDriver: the driver's name is not known yet.
	WaitingForDriver State = "waiting-for-driver"
	// WaitingForKubelet: the socket is published, kubelet has not given
	// its verdict on it yet.
	WaitingForKubelet State = "waiting-for-kubelet"
	// Registered: kubelet accepted the plugin through the current socket.
	Registered State = "registered"
	// Rejected: kubelet did not accept the plugin; with the Retry policy
	// the socket is published again after a backoff.
	Rejected State = "rejected"
	// Superseded: another instance of the driver published the socket and
	// owns the registration; this one steps aside.
	Superseded State = "superseded"
	// Deferring: a live registrar for the same driver and endpoint that
	// cannot hand its socket over (upstream's, or an older build) serves
	// the path; this one publishes its own when that one leaves.
	Deferring State = "deferring"
	// Stopped: Run has returned.
	Stopped State = "stopped"
)

// States lists every State, for metrics.
var States = []State{WaitingForDriver, WaitingForKubelet, Registered, Rejected, Superseded, Deferring, Stopped}

// standsAside tells whether another instance serves the path in this
// one's place, and this one publishes when the path is left empty.
func (s State) standsAside() bool { return s == Superseded || s == Deferring }

// Verdict is kubelet's last NotifyRegistrationStatus.
type Verdict struct {
	Registered bool      `json:"registered"`
	Reason     string    `json:"reason,omitempty"`
	Time       time.Time `json:"time"`
}

// KubeletCalls counts kubelet's calls on the registration sockets.
type KubeletCalls struct {
	GetInfo          uint64 `json:"getInfo"`
	NotifyRegistered uint64 `json:"notifyRegistered"`
	NotifyRejected   uint64 `json:"notifyRejected"`
}

// Status is a snapshot of the registration for /status, /readyz and
// /metrics.
type Status struct {
	DriverName      string `json:"driverName"`
	DriverReachable bool   `json:"driverReachable"`
	Endpoint        string `json:"endpoint"`
	SocketPath      string `json:"socketPath"`
	State           State  `json:"state"`
	// Ready: kubelet confirmed the current socket and it is still ours.
	Ready bool `json:"ready"`
	// Reason explains State and Ready in one line.
	Reason               string            `json:"reason"`
	LastVerdict          *Verdict          `json:"lastKubeletVerdict,omitempty"`
	LastGetInfo          *time.Time        `json:"lastGetInfoTime,omitempty"`
	LastNotify           *time.Time        `json:"lastNotifyTime,omitempty"`
	LastFailure          *time.Time        `json:"lastRegistrationFailureTime,omitempty"`
	NextRetry            *time.Time        `json:"nextRetryTime,omitempty"`
	RegistrationFailures uint64            `json:"registrationFailures"`
	Publications         map[string]uint64 `json:"socketPublications"`
	KubeletCalls         KubeletCalls      `json:"kubeletCalls"`
	// PublishError: publishing the registration socket failed for want of
	// a resource (file descriptors, inodes, memory); it is tried again at
	// NextPublishRetry.
	PublishError     string     `json:"publishError,omitempty"`
	NextPublishRetry *time.Time `json:"nextPublishRetryTime,omitempty"`
	// LastPublished is when the current socket was published (or taken
	// over): kubelet calls GetInfo within a second or two of that.
	LastPublished *time.Time `json:"lastPublishTime,omitempty"`
	// KubeletSilent: kubelet has not called GetInfo on the current socket
	// in the time it takes to (10 s).
	KubeletSilent bool `json:"kubeletSilent,omitempty"`
	// SELinux is what SELinux says of the current socket: its labels, and
	// whether the policy lets kubelet reach it. Absent where SELinux is
	// off.
	SELinux *selinuxcheck.Report `json:"selinux,omitempty"`
}

// status is the registration behind Status, owned by the loop; readers get
// copies (snapshot).
type status struct {
	driverName      string
	driverReachable bool
	endpoint        string
	socketPath      string
	generation      uint64
	state           State
	lastVerdict     *Verdict
	lastGetInfo     time.Time
	lastNotify      time.Time
	lastPublish     time.Time
	lastFailure     time.Time
	nextRetry       time.Time
	failures        uint64
	publications    map[string]uint64
	calls           KubeletCalls
	// handedOver: superseded because this instance handed its socket over.
	handedOver bool
	// publishError: the last publication failed for want of a resource
	// and is tried again at nextPublish.
	publishError string
	nextPublish  time.Time
	// kubeletSilent: kubelet has not called GetInfo on the current socket
	// in Config.KubeletSilence.
	kubeletSilent bool
	// selinux is what SELinux said of the current publication; nil where
	// it is off, or not asked yet.
	selinux *selinuxcheck.Report
}

func newStatus(endpoint string) status {
	return status{endpoint: endpoint, state: WaitingForDriver, publications: map[string]uint64{}}
}

func (st *status) published(reason string) {
	st.selinux = nil
	st.publications[reason]++
	st.lastPublish = time.Now()
	st.kubeletSilent = false
	st.state = WaitingForKubelet
	st.handedOver = false
	st.clearPublishError()
}

func (st *status) superseded() {
	st.state, st.handedOver = Superseded, false
	st.clearPublishError()
}

func (st *status) deferring() {
	st.state, st.handedOver = Deferring, false
	st.clearPublishError()
}

// handedOverTo records that a newer instance took this one's socket over.
func (st *status) handedOverTo() { st.state, st.handedOver = Superseded, true }

func (st *status) clearPublishError() { st.publishError, st.nextPublish = "", time.Time{} }

// adopted records a socket taken over from the previous instance, with
// kubelet's verdict on it when kubelet had registered it.
func (st *status) adopted(registered *Verdict) {
	st.published(ReasonHandover)
	if registered != nil {
		v := *registered
		st.lastVerdict = &v
		st.state = Registered
	}
}

func (st *status) stopped() { st.state = Stopped }

func (st *status) calledGetInfo() {
	st.calls.GetInfo++
	st.lastGetInfo = time.Now()
	st.kubeletSilent = false
}

func (st *status) calledNotify(registered bool) {
	if registered {
		st.calls.NotifyRegistered++
	} else {
		st.calls.NotifyRejected++
	}
	st.lastNotify = time.Now()
}

// verdict records kubelet's verdict on the current socket and tells
// whether it changes what an operator should know.
func (st *status) verdict(registered bool, reason string) (changed bool) {
	now := time.Now()
	previous := st.lastVerdict
	st.lastVerdict = &Verdict{Registered: registered, Reason: reason, Time: now}
	if registered {
		changed = st.state != Registered
		st.state = Registered
		return changed
	}
	st.failures++
	st.lastFailure = now
	changed = st.state != Rejected || previous == nil || previous.Reason != reason
	st.state = Rejected
	return changed
}

// Status returns a snapshot of the registration.
func (s *Server) Status() Status {
	shared := s.shared.Load()
	st, pub := shared.st, shared.pub
	out := Status{
		DriverName:           st.driverName,
		DriverReachable:      st.driverReachable,
		Endpoint:             st.endpoint,
		SocketPath:           st.socketPath,
		State:                st.state,
		RegistrationFailures: st.failures,
		Publications:         make(map[string]uint64, len(st.publications)),
		KubeletCalls:         st.calls,
		LastGetInfo:          timeOrNil(st.lastGetInfo),
		LastNotify:           timeOrNil(st.lastNotify),
		LastFailure:          timeOrNil(st.lastFailure),
		NextRetry:            timeOrNil(st.nextRetry),
		PublishError:         st.publishError,
		NextPublishRetry:     timeOrNil(st.nextPublish),
		LastPublished:        timeOrNil(st.lastPublish),
		SELinux:              st.selinux,
	}
	for reason, n := range st.publications {
		out.Publications[reason] = n
	}
	if st.lastVerdict != nil {
		v := *st.lastVerdict
		out.LastVerdict = &v
	}

	switch st.state {
	case WaitingForDriver:
		out.Reason = "waiting for the CSI driver"
	case WaitingForKubelet:
		out.Reason = "waiting for kubelet to register the driver"
		if st.kubeletSilent {
			out.KubeletSilent = true
			out.Reason += ": kubelet has not called GetInfo on the socket; it does not watch the registration directory (is it the host's <kubelet --root-dir>/plugins_registry?), or is not running"
			switch {
			case st.selinux.Problem():
				out.Reason += "; or SELinux does not let it: " + st.selinux.Summary()
			case st.selinux != nil && st.selinux.Unchecked != "":
				out.Reason += "; or SELinux does not let it, which this registrar cannot tell (see selinux)"
			}
		}
	case Registered:
		out.Ready, out.Reason = socketStillOurs(pub)
	case Rejected:
		out.Reason = "rejected by kubelet: " + st.lastVerdict.Reason
		if st.selinux.Problem() {
			out.Reason += "; SELinux may be why: " + st.selinux.Summary()
		}
	case Superseded:
		out.Reason = "superseded: another instance of the driver owns the registration socket"
		if st.handedOver {
			out.Reason += " (this instance handed it over)"
		}
	case Deferring:
		// Ready: the driver is registered on the node, through the other
		// instance. The older pod of a rolling update (maxSurge) is removed
		// only once this one is ready, and this one publishes when it goes.
		out.Ready = true
		out.Reason = "deferring: a registrar that cannot hand its socket over (upstream's, or an older build) serves the driver's registration socket; this instance publishes its own when that one leaves"
	case Stopped:
		out.Reason = "stopped"
	}
	if st.publishError != "" {
		out.Ready = false
		out.Reason = "cannot publish the registration socket, trying again: " + st.publishError
	}
	return out
}

func socketStillOurs(pub *publication) (bool, string) {
	if pub == nil {
		return false, "no registration socket is published"
	}
	fi, err := os.Lstat(pub.path)
	switch {
	case err != nil:
		return false, fmt.Sprintf("the registration socket is gone: %v", err)
	case !pub.sock.isOurs(fi):
		return false, "the registration socket was replaced"
	}
	return true, "registered"
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
