package registration

import (
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// FailureLimit answers from the status alone, on its clock: a failure
// counts from FailingSince, reaches the limit at exactly After, and names
// the driver's last error when the driver never answered.
func TestFailureLimit(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := testingclock.NewFakePassiveClock(start.Add(3 * time.Minute))
	rejected := Status{State: Rejected, Reason: "rejected by kubelet: no such file", FailingSince: &start}
	cases := []struct {
		name       string
		limit      time.Duration
		st         Status
		wantFailed bool
		wantReason []string
	}{
		{"kubelet rejects it, at the limit", 3 * time.Minute, rejected, true, []string{"rejected by kubelet: no such file"}},
		{"kubelet rejects it, a second before the limit", 3*time.Minute + time.Second, rejected, false, nil},
		{"no limit", 0, rejected, false, nil},
		{"a registered driver", time.Second, Status{State: Registered, Reason: "registered"}, false, nil},
		{"the driver never answers", time.Minute, Status{State: WaitingForDriver, Reason: "waiting for the CSI driver: refused", DriverError: "cannot connect to /csi/csi.sock (ECONNREFUSED): nothing listens", FailingSince: &start}, true,
			[]string{"waiting for the CSI driver", "the CSI driver did not answer GetPluginInfo: cannot connect to /csi/csi.sock (ECONNREFUSED): nothing listens"}},
		{"the driver's socket never appears", time.Minute, Status{State: WaitingForDriver, Reason: "waiting for the CSI driver", FailingSince: &start}, true,
			[]string{"the CSI driver did not answer GetPluginInfo"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, failed := FailureLimit{After: tc.limit, Clock: clock}.Exceeded(tc.st)
			if failed != tc.wantFailed {
				t.Fatalf("Exceeded = %v, want %v", failed, tc.wantFailed)
			}
			if !failed {
				return
			}
			if !f.Since.Equal(start) || f.Lasted != 3*time.Minute {
				t.Errorf("failing since %v for %v, want since %v for 3m", f.Since, f.Lasted, start)
			}
			for _, want := range tc.wantReason {
				if !strings.Contains(f.Reason, want) {
					t.Errorf("reason %q, want it to say %q", f.Reason, want)
				}
			}
		})
	}
}
