package registration

import (
	"time"

	"k8s.io/utils/clock"
)

// FailureLimit is the one place that decides when the registration has
// failed for too long (--unhealthy-after): /healthz answers 503 with its
// answer, and after a stop the registrar exits 1 with it and leaves its
// reason in the termination message.
type FailureLimit struct {
	// After is how long a failure may last; zero or less: never too long.
	After time.Duration
	// Clock tells the time; the real one when nil.
	Clock clock.PassiveClock
}

// Failure is a registration that has failed for too long.
type Failure struct {
	// Since is when it started to fail (Status.FailingSince).
	Since time.Time
	// Lasted is how long it has failed, at the time of the question.
	Lasted time.Duration
	// Reason is why: the status's reason, and for a driver that never
	// answered, the driver's last error.
	Reason string
}

// Exceeded returns st's failure when it has lasted at least After, and
// false while it has not, or st does not fail (a registered driver never
// does).
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
