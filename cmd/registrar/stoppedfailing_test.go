package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
	"github.com/csi-registrar/node-driver-registrar/test/removeall"
)

// After a stop, a failure that lasted the limit ends in failedTooLong, and
// a driver that never answered leaves its last error in the termination
// message; kubelet's rejection, written when it came, is not written again.
func TestStoppedFailing(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	limit := registration.FailureLimit{After: time.Minute, Clock: testingclock.NewFakePassiveClock(start.Add(time.Minute))}
	cases := []struct {
		name        string
		st          *registration.Status
		limit       registration.FailureLimit
		wantErr     string
		wantMessage string
	}{
		{"never ran", nil, limit, "", ""},
		{"the driver never answered", &registration.Status{State: registration.WaitingForDriver, DriverError: "cannot connect to /csi/csi.sock (ENOENT)", FailingSince: &start}, limit,
			"the registration had failed for 1m0s", "the CSI driver did not answer GetPluginInfo: cannot connect to /csi/csi.sock (ENOENT)"},
		{"kubelet rejected it", &registration.Status{State: registration.Rejected, Reason: "rejected by kubelet: typo", FailingSince: &start}, limit,
			"the registration had failed for 1m0s: rejected by kubelet: typo", ""},
		{"a failure shorter than the limit", &registration.Status{State: registration.Rejected, FailingSince: &start}, registration.FailureLimit{After: time.Hour, Clock: limit.Clock}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			removeall.Require(t)
			path := filepath.Join(t.TempDir(), "termination-log")
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			err := stoppedFailing(tc.st, tc.limit, &terminationMessage{path: path}, klog.Background())
			var tooLong *failedTooLong
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("stoppedFailing = %v, want nil", err)
			case tc.wantErr != "" && (!errors.As(err, &tooLong) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("stoppedFailing = %v, want a failedTooLong saying %q", err, tc.wantErr)
			}
			message, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantMessage == "" && len(message) != 0 || !strings.Contains(string(message), tc.wantMessage) {
				t.Errorf("termination message %q, want %q", message, tc.wantMessage)
			}
		})
	}
}
