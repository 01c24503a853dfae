package registration

import (
	"fmt"
	"maps"
	"time"

	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
)

// State is where the registration stands.
type State string

const (
	WaitingForDriver  State = "waiting-for-driver"
	WaitingForKubelet State = "waiting-for-kubelet"
	// KubeletSilent: kubelet has not called GetInfo in the time it takes to.
	KubeletSilent State = "kubelet-silent"
	// Registered: kubelet accepted the current socket (and, with
	// ConfirmCSINode, CSINode lists the driver).
	Registered State = "registered"
	// Unconfirmed: kubelet accepted, but CSINode does not confirm it.
	Unconfirmed State = "unconfirmed"
	// Rejected stays until kubelet accepts, through the retries.
	Rejected State = "rejected"
	// Superseded: another instance of the driver owns the registration.
	Superseded State = "superseded"
	// Deferring: a registrar that cannot hand its socket over serves the
	// path; this one publishes its own when that one leaves.
	Deferring State = "deferring"
	Stopped   State = "stopped"
)

// States lists every State, for metrics.
var States = []State{WaitingForDriver, WaitingForKubelet, KubeletSilent, Registered, Unconfirmed, Rejected, Superseded, Deferring, Stopped}

// Verdict is kubelet's last NotifyRegistrationStatus.
type Verdict = handover.Verdict

// KubeletCalls counts kubelet's calls on the registration sockets.
type KubeletCalls struct {
	GetInfo          uint64 `json:"getInfo"`
	NotifyRegistered uint64 `json:"notifyRegistered"`
	NotifyRejected   uint64 `json:"notifyRejected"`
}

// Status is a snapshot of the registration for /status, /readyz and /metrics.
type Status struct {
	DriverName      string `json:"driverName"`
	DriverReachable bool   `json:"driverReachable"`
	// DriverError is why the driver could not be asked; empty once it answered.
	DriverError string `json:"driverError,omitempty"`
	Endpoint    string `json:"endpoint"`
	SocketPath  string `json:"socketPath"`
	State       State  `json:"state"`
	// Ready: kubelet confirmed the current socket and it is still ours.
	Ready                bool              `json:"ready"`
	Reason               string            `json:"reason"`
	LastVerdict          *Verdict          `json:"lastKubeletVerdict,omitempty"`
	LastGetInfo          *time.Time        `json:"lastGetInfoTime,omitempty"`
	LastNotify           *time.Time        `json:"lastNotifyTime,omitempty"`
	LastFailure          *time.Time        `json:"lastRegistrationFailureTime,omitempty"`
	NextRetry            *time.Time        `json:"nextRetryTime,omitempty"`
	RegistrationFailures uint64            `json:"registrationFailures"`
	Publications         map[string]uint64 `json:"socketPublications"`
	KubeletCalls         KubeletCalls      `json:"kubeletCalls"`
	// Attempts counts kubelet's rejections since it last accepted.
	Attempts uint64 `json:"attempts,omitempty"`
	// FailingSince is set while the registration fails.
	FailingSince *time.Time `json:"failingSince,omitempty"`
	// PublishError: publishing failed for want of a resource.
	PublishError     string     `json:"publishError,omitempty"`
	NextPublishRetry *time.Time `json:"nextPublishRetryTime,omitempty"`
	// LastPublished includes a takeover.
	LastPublished *time.Time `json:"lastPublishTime,omitempty"`
	KubeletSilent bool       `json:"kubeletSilent,omitempty"`
	// Withdrawn: Run removed the socket on its way out.
	Withdrawn bool `json:"withdrawn,omitempty"`
}

// Status returns a snapshot of the registration.
func (s *Server) Status() Status {
	return s.shared.Load().m.status()
}

func (m *machine) status() Status {
	out := m.rec
	out.Publications = maps.Clone(m.rec.Publications)
	out.DriverName = m.name
	out.SocketPath = m.path
	out.State = m.state
	out.RegistrationFailures = m.rec.KubeletCalls.NotifyRejected
	out.NextRetry = timeOrNil(m.due[retryTimer])
	out.FailingSince = timeOrNil(m.failingSince)
	out.NextPublishRetry = timeOrNil(m.due[publishTimer])
	out.KubeletSilent = m.state == KubeletSilent

	switch m.state {
	case WaitingForDriver:
		out.Reason = "waiting for the CSI driver"
		if out.DriverError != "" {
			out.Reason += ": " + out.DriverError
		}
	case WaitingForKubelet:
		out.Reason = "waiting for kubelet to register the driver"
	case KubeletSilent:
		out.Reason = "kubelet has not called GetInfo on the registration socket: it does not watch the registration directory (is it the host's <kubelet --root-dir>/plugins_registry?), or is not running, or waits out its backoff (up to 2m2s) after failures at this path"
	case Registered:
		// Ready while the last look found our socket at the path.
		out.Ready, out.Reason = m.at.kind == AtOurs, "registered"
		switch {
		case !out.Ready:
			out.Reason, _ = m.at.describe(m.name)
		case !m.confirmed():
			out.State, out.Ready = Unconfirmed, false
			out.Reason = "kubelet registered the driver, but this node's CSINode has not been read yet"
			if m.csinode != nil {
				out.Reason = "kubelet registered the driver, but " + m.csinode.Reason
			}
			if due := m.due[csinodeTimer]; !due.IsZero() {
				out.Reason += "; the registration socket is published again at " + due.UTC().Format(time.RFC3339) + ", so that kubelet registers the driver again"
			}
		}
	case Rejected:
		times := "once, at"
		if m.rec.Attempts != 1 {
			times = fmt.Sprintf("%d times since", m.rec.Attempts)
		}
		out.Reason = fmt.Sprintf("rejected by kubelet: %s (%s %s", m.rec.LastVerdict.Reason, times, m.failingSince.UTC().Format(time.RFC3339))
		if retry := m.due[retryTimer]; !retry.IsZero() {
			out.Reason += "; the socket is published again at " + retry.UTC().Format(time.RFC3339) + " unless kubelet tries again by itself first"
		}
		if m.kubeletRetrying {
			out.Reason += "; kubelet tries again by itself on this socket"
		}
		out.Reason += ")"
	case Superseded:
		out.Reason = "superseded: another instance of the driver owns the registration socket"
		if m.handedOver {
			out.Reason += " (this instance handed it over)"
		}
	case Deferring:
		// Ready: the driver is registered, through the other instance, and
		// a rolling update removes the older pod only once this one is ready.
		out.Ready = true
		out.Reason = "deferring: a registrar that cannot hand its socket over (upstream's, or an older build) serves the driver's registration socket; this instance publishes its own when that one leaves"
	case Stopped:
		out.Reason = "stopped"
	}
	if m.claim != "" {
		// The driver's new name is not registered yet.
		out.Ready = false
		out.Reason = "claiming the registration socket for " + m.claim + ": conversing the instance serving it, if any, to hand it over"
	}
	if m.rec.PublishError != "" {
		out.Ready = false
		out.Reason = "cannot publish the registration socket, trying again: " + m.rec.PublishError
	}
	return out
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// FailureLimit decides when the registration has failed too long, for
// /healthz and the exit code alike.
type FailureLimit struct {
	// After zero or less: never too long.
	After time.Duration
	// Clock is the real one when nil.
	Clock clock.PassiveClock
}

// Failure is a registration that has failed for too long.
type Failure struct {
	Since  time.Time
	Lasted time.Duration
	// Reason includes the driver's last error when it never answered.
	Reason string
}

// Exceeded returns st's failure once it has lasted After.
func (f FailureLimit) Exceeded(st Status) (Failure, bool) {
	if f.After <= 0 || st.FailingSince == nil {
		return Failure{}, false
	}
	clk := f.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	lasted := clk.Since(*st.FailingSince)
	if lasted < f.After {
		return Failure{}, false
	}
	reason := st.Reason
	if st.State == WaitingForDriver {
		reason = "waiting for the CSI driver; the CSI driver did not answer GetPluginInfo"
		if st.DriverError != "" {
			reason += ": " + st.DriverError
		}
	}
	return Failure{Since: *st.FailingSince, Lasted: lasted, Reason: reason}, true
}
