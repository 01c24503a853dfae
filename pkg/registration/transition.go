package registration

import "time"

// A Transition is one thing a step of the registration did or learned, as
// the machine decided it: the log, the observers and the termination
// message consume these, and never compare two snapshots to find them.
type Transition interface{ transition() }

type (
	// Claiming: the driver named itself Name, and its path is claimed;
	// Renamed when it had registered under another name.
	Claiming struct {
		Name    string
		Renamed bool
	}
	// Named: the registration now stands under the driver's name Name.
	Named struct{ Name string }
	// Replacing: the claim found a socket it replaces (Found says what).
	Replacing struct{ Found string }
	// Published: a new socket serves the path, for Reason; ReasonHandover
	// when it is the previous instance's, taken over.
	Published struct{ Reason string }
	// PublishFailed: publishing for Reason failed for want of a resource;
	// it is tried again at Retry. Repeated: it failed so last time too.
	PublishFailed struct {
		Reason   string
		Err      string
		Retry    time.Time
		Repeated bool
	}
	// KubeletAccepted: kubelet registered the driver; Again when it had
	// already (it confirms after each of its restarts).
	KubeletAccepted struct{ Again bool }
	// DriverRegistered: the registration counts as registered from now on, or
	// once more: kubelet accepted it (and, with Config.ConfirmCSINode, the
	// CSINode lists the driver), or a socket kubelet registered was taken
	// over.
	DriverRegistered struct{}
	// CSINodeUnconfirmed: kubelet has the driver registered, but this node's
	// CSINode no longer lists it (Config.ConfirmCSINode).
	CSINodeUnconfirmed struct{ Reason string }
	// KubeletRejected: kubelet rejected the plugin. First: the registration was
	// not rejected before. Retry is when the socket is published again
	// unless kubelet tries again by itself first; zero with the Exit
	// policy or while kubelet retries.
	KubeletRejected struct {
		Reason   string
		Attempts uint64
		First    bool
		Retry    time.Time
	}
	// VerdictIgnored: kubelet's verdict came through a socket since
	// replaced.
	VerdictIgnored struct {
		Registered bool
		Reason     string
	}
	// KubeletRetrying: kubelet called GetInfo again on the socket it
	// rejected: it tries again by itself, and the socket stays.
	KubeletRetrying struct{ Attempts uint64 }
	// KubeletWentSilent: kubelet has not called GetInfo within ten
	// seconds of the publication.
	KubeletWentSilent struct{}
	// SteppedAside: another instance of the driver owns the registration
	// now; HandedOver when this one handed its socket over.
	SteppedAside struct{ HandedOver bool }
	// Deferred: a registrar that cannot hand its socket over serves the
	// path; this instance publishes once it leaves.
	Deferred struct{}
	// LeftAlone: something at the path is not the registration's to
	// replace; Why says what, Found what is there.
	LeftAlone struct {
		Why, Found string
		Err        error
	}
	// ServeEnded: the current socket stopped accepting connections.
	ServeEnded struct{ Err error }
	// Withdrawn: the socket was removed on the way out, so that kubelet
	// deregisters the driver.
	Withdrawn struct{}
)

func (Claiming) transition()           {}
func (Named) transition()              {}
func (Replacing) transition()          {}
func (Published) transition()          {}
func (PublishFailed) transition()      {}
func (KubeletAccepted) transition()    {}
func (DriverRegistered) transition()   {}
func (CSINodeUnconfirmed) transition() {}
func (KubeletRejected) transition()    {}
func (VerdictIgnored) transition()     {}
func (KubeletRetrying) transition()    {}
func (KubeletWentSilent) transition()  {}
func (SteppedAside) transition()       {}
func (Deferred) transition()           {}
func (LeftAlone) transition()          {}
func (ServeEnded) transition()         {}
func (Withdrawn) transition()          {}
