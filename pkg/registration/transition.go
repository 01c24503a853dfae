package registration

import "time"

// A Transition is one thing a step did or learned, for the log and the
// observers, which never compare snapshots to find it.
type Transition interface{ transition() }

type (
	// Claiming: the driver named itself Name; Renamed after another name.
	Claiming struct {
		Name    string
		Renamed bool
	}
	// Named: the registration now stands under Name.
	Named struct{ Name string }
	// Replacing: the claim found a socket it replaces (Found says what).
	Replacing struct{ Found string }
	// Published: a new socket, or one taken over, serves the path.
	Published struct{ Reason string }
	// PublishFailed: short of a resource; Repeated: the same error as before.
	PublishFailed struct {
		Reason   string
		Err      string
		Retry    time.Time
		Repeated bool
	}
	// KubeletAccepted: Again after each of kubelet's restarts.
	KubeletAccepted struct{ Again bool }
	// DriverRegistered: registered (confirmed by CSINode, if asked) from now.
	DriverRegistered struct{}
	// CSINodeUnconfirmed: kubelet has the driver, CSINode no longer lists it.
	CSINodeUnconfirmed struct{ Reason string }
	// KubeletRejected: Retry is when the socket is published again unless
	// kubelet retries first; zero with Exit.
	KubeletRejected struct {
		Reason   string
		Attempts uint64
		First    bool
		Retry    time.Time
	}
	// VerdictIgnored: the verdict came through a socket since replaced.
	VerdictIgnored struct {
		Registered bool
		Reason     string
	}
	// KubeletRetrying: kubelet retries the socket it rejected, which stays.
	KubeletRetrying struct{ Attempts uint64 }
	// KubeletWentSilent: no GetInfo within kubeletSilence of the publication.
	KubeletWentSilent struct{}
	// SteppedAside: another instance of the driver owns the registration.
	SteppedAside struct{ HandedOver bool }
	// Deferred: publishing once the registrar that cannot hand over leaves.
	Deferred struct{}
	// LeftAlone: what is at the path is not the registration's to replace.
	LeftAlone struct {
		Why, Found string
		Err        error
	}
	// ServeEnded: the current socket stopped accepting connections.
	ServeEnded struct{ Err error }
	// Withdrawn: the socket was removed on the way out.
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
