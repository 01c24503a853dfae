package registration

import (
	"time"

	"k8s.io/utils/clock"
)

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
