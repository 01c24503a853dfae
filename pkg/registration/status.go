package registration

import (
	"fmt"
	"maps"
	"time"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
)

// State is where the registration stands.
type State string

const (
	// WaitingForDriver: the driver's name is not known yet.
	WaitingForDriver State = "waiting-for-driver"
	// WaitingForKubelet: the socket is published, kubelet has not given
	// its verdict on it yet.
	WaitingForKubelet State = "waiting-for-kubelet"
	// KubeletSilent: kubelet has not called GetInfo on the socket in the
	// time it takes to, until it calls.
	KubeletSilent State = "kubelet-silent"
	// Registered: kubelet accepted the plugin through the current socket
	// (and, with Config.ConfirmCSINode, this node's CSINode lists the
	// driver).
	Registered State = "registered"
	// Unconfirmed (Config.ConfirmCSINode): kubelet accepted the plugin, but
	// this node's CSINode does not list the driver, or belongs to a Node
	// that was replaced, or has not been read yet.
	Unconfirmed State = "unconfirmed"
	// Rejected: kubelet did not accept the plugin; with the Retry policy
	// the socket is published again after a backoff unless kubelet tries
	// again by itself (kubelet >= 1.36), and the registration
	// stays rejected until kubelet accepts it.
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
var States = []State{WaitingForDriver, WaitingForKubelet, KubeletSilent, Registered, Unconfirmed, Rejected, Superseded, Deferring, Stopped}

// Verdict is kubelet's last NotifyRegistrationStatus; it travels with a
// socket handed over.
type Verdict = handover.Verdict

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
	// DriverError is why the last attempt to ask the driver failed, with
	// what to do; empty once it answered.
	DriverError string `json:"driverError,omitempty"`
	Endpoint    string `json:"endpoint"`
	SocketPath  string `json:"socketPath"`
	State       State  `json:"state"`
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
	// Attempts counts kubelet's rejections since it last accepted the
	// plugin.
	Attempts uint64 `json:"attempts,omitempty"`
	// FailingSince is when the registration started to fail, while it
	// does: the start, while the driver has not named itself; kubelet's
	// first rejection; or the moment kubelet was due to call and did not.
	FailingSince *time.Time `json:"failingSince,omitempty"`
	// PublishError: publishing the registration socket failed for want of
	// a resource (file descriptors, inodes, memory); it is tried again at
	// NextPublishRetry.
	PublishError     string     `json:"publishError,omitempty"`
	NextPublishRetry *time.Time `json:"nextPublishRetryTime,omitempty"`
	// LastPublished is when the current socket was published (or taken
	// over): kubelet calls GetInfo within a second or two of that.
	LastPublished *time.Time `json:"lastPublishTime,omitempty"`
	// KubeletSilent: State is KubeletSilent.
	KubeletSilent bool `json:"kubeletSilent,omitempty"`
	// Withdrawn: Run removed the registration socket on its way out, so
	// kubelet unregisters the driver.
	Withdrawn bool `json:"withdrawn,omitempty"`
}

// Status returns a snapshot of the registration.
func (s *Server) Status() Status {
	return s.shared.Load().m.status()
}

// status is what readers see of m: computed from the machine alone.
func (m *machine) status() Status {
	out := Status{
		DriverName:           m.name,
		DriverReachable:      m.driverReachable,
		DriverError:          m.driverError,
		Endpoint:             m.cfg.Endpoint,
		SocketPath:           m.path,
		State:                m.state,
		RegistrationFailures: m.log.failures,
		Publications:         maps.Clone(m.log.publications),
		KubeletCalls:         m.log.calls,
		LastGetInfo:          timeOrNil(m.log.lastGetInfo),
		LastNotify:           timeOrNil(m.log.lastNotify),
		LastFailure:          timeOrNil(m.log.lastFailure),
		NextRetry:            timeOrNil(m.due[retryTimer]),
		Attempts:             m.attempts,
		FailingSince:         timeOrNil(m.failingSince),
		PublishError:         m.publishError,
		NextPublishRetry:     timeOrNil(m.due[publishTimer]),
		LastPublished:        timeOrNil(m.log.lastPublish),
		KubeletSilent:        m.state == KubeletSilent,
		Withdrawn:            m.withdrawn,
	}
	if m.log.lastVerdict != nil {
		v := *m.log.lastVerdict
		out.LastVerdict = &v
	}

	switch m.state {
	case WaitingForDriver:
		out.Reason = "waiting for the CSI driver"
		if m.driverError != "" {
			out.Reason += ": " + m.driverError
		}
	case WaitingForKubelet:
		out.Reason = "waiting for kubelet to register the driver"
	case KubeletSilent:
		out.Reason = "kubelet has not called GetInfo on the registration socket: it does not watch the registration directory (is it the host's <kubelet --root-dir>/plugins_registry?), or is not running, or waits out its backoff (up to 2m2s) after failures at this path"
	case Registered:
		// Registered through the socket at the path, while it is ours:
		// as the last look found it.
		out.Ready, out.Reason = m.at.kind == AtOurs, "registered"
		switch {
		case !out.Ready:
			out.Reason, _ = m.at.describe(m.name)
		case m.cfg.ConfirmCSINode && (m.csinode == nil || !m.csinode.Listed):
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
		if m.attempts != 1 {
			times = fmt.Sprintf("%d times since", m.attempts)
		}
		out.Reason = fmt.Sprintf("rejected by kubelet: %s (%s %s", m.log.lastVerdict.Reason, times, m.failingSince.UTC().Format(time.RFC3339))
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
		// Ready: the driver is registered on the node, through the other
		// instance. The older pod of a rolling update (maxSurge) is removed
		// only once this one is ready, and this one publishes when it goes.
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
	if m.publishError != "" {
		out.Ready = false
		out.Reason = "cannot publish the registration socket, trying again: " + m.publishError
	}
	return out
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
