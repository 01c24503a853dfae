package diagnose

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/status"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/test/poll"
)

// lines is an Output that hands each line written to the test as it comes.
type lines chan string

func (l lines) Write(p []byte) (int, error) {
	l <- string(p)
	return len(p), nil
}

// next is the next line written, or a failure once the diagnosis has
// stayed silent for testTimeout: a safety net, never a measurement.
func (l lines) next(t *testing.T) string {
	t.Helper()
	select {
	case line := <-l:
		return line
	case <-time.After(testTimeout):
		t.Fatal("no line written")
		return ""
	}
}

// A driver that hangs in NodeGetInfo: once the check has waited SlowCheck,
// the diagnosis says what it waits for and how long it will, before the
// check's result; the result names the delay kubelet's registration has.
func TestSlowNodeGetInfoSaysWhatItWaitsFor(t *testing.T) {
	called, release := make(chan struct{}), make(chan struct{})
	e := nodeInfoEnv(func(ctx context.Context) (*csi.NodeGetInfoResponse, error) {
		close(called)
		select {
		case <-release:
			return &csi.NodeGetInfoResponse{NodeId: "node-1"}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})(t)
	clock := testingclock.NewFakeClock(time.Now())
	out := make(lines, 2*numChecks)
	e.cfg.Clock, e.cfg.Output = clock, out

	result := make(chan []Check, 1)
	go func() { result <- Run(context.Background(), e.cfg) }()
	for _, name := range []string{"registry directory", "driver socket", "driver GetPluginInfo"} {
		if line := out.next(t); !strings.Contains(line, "] "+name) {
			t.Fatalf("line %q, want the result of %q first", line, name)
		}
	}
	select {
	case <-called:
	case <-time.After(testTimeout):
		t.Fatal("the diagnosis did not call NodeGetInfo")
	}

	// The timer is armed before the call; a timer's function runs within
	// Step.
	clock.Step(SlowCheck - time.Millisecond)
	select {
	case line := <-out:
		t.Fatalf("before %v: %q", SlowCheck, line)
	default:
	}
	clock.Step(time.Millisecond)
	select {
	case line := <-out:
		for _, want := range []string{"[WAIT] driver NodeGetInfo: no answer after 3s", "waiting up to 2m0s, as long as kubelet waits for it"} {
			if !strings.Contains(line, want) {
				t.Errorf("progress line %q does not say %q", line, want)
			}
		}
	default:
		t.Fatalf("after %v NodeGetInfo is still waited for in silence", SlowCheck)
	}

	clock.Step(2 * time.Second)
	close(release)
	line := out.next(t)
	checks := <-result
	c := checks[checkNodeInfo]
	if !strings.HasPrefix(line, "[WARN] driver NodeGetInfo:") || c.Outcome != Warn {
		t.Fatalf("result line %q (%v), want a warning", line, c.Outcome)
	}
	for _, want := range []string{`node ID "node-1"`, "answered after 5s", "kubelet's registration of the driver waits that long"} {
		if !strings.Contains(c.Detail, want) {
			t.Errorf("detail %q does not say %q", c.Detail, want)
		}
	}
}

// A driver that hangs in NodeGetInfo fails the check once kubelet's wait
// is over on the clock, and not before; the result says what kubelet's
// registration of the driver then does.
func TestHangingNodeGetInfoFailsAfterKubeletsWait(t *testing.T) {
	called := make(chan struct{})
	e := nodeInfoEnv(func(ctx context.Context) (*csi.NodeGetInfoResponse, error) {
		close(called)
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	})(t)
	clock := testingclock.NewFakeClock(time.Now())
	e.cfg.Clock = clock
	before := listDir(t, e.cfg.RegistrationDir)
	result := make(chan []Check, 1)
	go func() { result <- Run(context.Background(), e.cfg) }()
	select {
	case <-called:
	case <-time.After(testTimeout):
		t.Fatal("the diagnosis did not call NodeGetInfo")
	}

	poll.StepThrough(t, clock, KubeletNodeGetInfoTimeout)
	var checks []Check
	select {
	case checks = <-result:
	case <-time.After(testTimeout):
		t.Fatal("the diagnosis still waits for NodeGetInfo after kubelet's wait")
	}
	checkRun(t, e, before, checks, map[int]Outcome{checkNodeInfo: Fail}, map[int][]string{checkNodeInfo: {
		"no answer within 2m0s, as long as kubelet waits for it", "kubelet's registration of the driver would wait 2m0s, then fail",
		"likely cause of a registration that kubelet never completes", "driver's node service"}})
}

// A fast check says nothing but its result, and nothing is written once
// its wait is over, however the clock moves afterwards.
func TestFastCheckSaysOnlyItsResult(t *testing.T) {
	e := healthyEnv(t)
	clock := testingclock.NewFakeClock(time.Now())
	out := make(lines, 2*numChecks)
	e.cfg.Clock, e.cfg.Output = clock, out
	checks := Run(context.Background(), e.cfg)
	clock.Step(time.Hour)
	close(out)
	var got []string
	for line := range out {
		got = append(got, line)
	}
	if len(got) != len(checks) {
		t.Fatalf("%d lines for %d checks:\n%s", len(got), len(checks), strings.Join(got, ""))
	}
	if clock.HasWaiters() {
		t.Error("a check left its timer armed")
	}
}
