package nodegate

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/test/poll"
)

var zeroTime time.Time

// startGate runs a gate on f's node until the test ends, on a fake clock
// unless cfg has one: it retries only when the test steps the clock.
func startGate(t *testing.T, f *fakeAPI, cfg Config) (*Gate, context.CancelFunc, <-chan struct{}) {
	t.Helper()
	cfg.NodeName, cfg.Client = f.node, f.client()
	if cfg.Clock == nil {
		cfg.Clock = testclock.NewFakeClock(time.Now())
	}
	g := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return g, cancel, done
}

func TestRemovesTheTaintOnRegistrationOnly(t *testing.T) {
	f := newFakeAPI(t, "n1", taint{"node.kubernetes.io/not-ready", "NoSchedule"}, taint{"example.com/agent-not-ready", "NoExecute"})
	g, _, _ := startGate(t, f, Config{TaintKeys: []string{"example.com/agent-not-ready"}})

	// A rejection does not touch taints (and no condition is asked for).
	g.Rejected("example.com", "no")
	g.Registered("example.com")
	if got := f.next(); got != "GET /api/v1/nodes/n1 200" {
		t.Fatalf("first request %q", got)
	}
	if got := f.next(); got != "PATCH /api/v1/nodes/n1 200" {
		t.Fatalf("second request %q", got)
	}
	if got := f.currentTaints(); len(got) != 1 || got[0].Key != "node.kubernetes.io/not-ready" {
		t.Errorf("taints left: %v", got)
	}
	waitStatus(t, g, func(st Status) bool { return st.TaintsChecked != nil })
	st := g.Status()
	if len(st.RemovedTaints) != 1 || st.RemovedTaints[0] != "example.com/agent-not-ready:NoExecute" || st.Pending || st.LastError != "" {
		t.Errorf("status %+v", st)
	}
	if st.Requests[RequestGetNode]["200"] != 1 || st.Requests[RequestRemoveTaints]["200"] != 1 || len(st.Requests[RequestSetCondition]) != 0 {
		t.Errorf("requests %v", st.Requests)
	}
	// kubelet confirming again: the node is read again, nothing to remove.
	g.Registered("example.com")
	if got := f.next(); got != "GET /api/v1/nodes/n1 200" {
		t.Fatalf("request %q", got)
	}
	waitStatus(t, g, func(st Status) bool { return st.Requests[RequestGetNode]["200"] == 2 && !st.Pending })
	if n := g.Status().Requests[RequestRemoveTaints]["200"]; n != 1 {
		t.Errorf("%d patches, want 1", n)
	}
}

// retryNow waits until the gate waits to retry, then moves its clock to
// the retry's due time, as its status says it.
func retryNow(t *testing.T, g *Gate, clk *testclock.FakeClock) {
	t.Helper()
	poll.Until(t, "the gate waits to retry", clk.HasWaiters)
	clk.SetTime(*g.Status().NextRetry)
}

// The API server down, overloaded, then refusing: the gate tries again
// with its backoff until the update goes through, and says why meanwhile.
func TestRetriesUntilTheAPIServerAnswers(t *testing.T) {
	f := newFakeAPI(t, "n1", taint{"example.com/agent-not-ready", "NoSchedule"})
	f.fail(http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusInternalServerError)
	f.forbidden["patch nodes"] = true
	clk := testclock.NewFakeClock(time.Now())
	g, _, _ := startGate(t, f, Config{TaintKeys: []string{"example.com/agent-not-ready"}, Clock: clk})
	g.Registered("example.com")
	for i, want := range []string{"GET /api/v1/nodes/n1 503", "GET /api/v1/nodes/n1 429", "GET /api/v1/nodes/n1 500", "GET /api/v1/nodes/n1 200", "PATCH /api/v1/nodes/n1 403"} {
		if got := f.next(); got != want {
			t.Fatalf("request %q, want %q", got, want)
		}
		if i < 3 { // the failed reads
			retryNow(t, g, clk)
		}
	}
	waitStatus(t, g, func(st Status) bool { return strings.HasPrefix(st.LastError, "forbidden: ") })
	st := g.Status()
	if !st.Pending || st.LastErrorTime == nil {
		t.Errorf("status while forbidden: %+v", st)
	}
	f.mu.Lock()
	delete(f.forbidden, "patch nodes")
	f.mu.Unlock()
	retryNow(t, g, clk)
	waitStatus(t, g, func(st Status) bool { return !st.Pending })
	st = g.Status()
	if st.LastError != "" || len(f.currentTaints()) != 0 {
		t.Errorf("after the RBAC fix: %+v, taints %v", st, f.currentTaints())
	}
	if st.Requests[RequestGetNode]["503"] != 1 || st.Requests[RequestGetNode]["429"] != 1 || st.Requests[RequestGetNode]["500"] != 1 || st.Requests[RequestRemoveTaints]["403"] == 0 || st.Requests[RequestRemoveTaints]["200"] != 1 {
		t.Errorf("requests %v", st.Requests)
	}
}

// The retries wait on the gate's clock, doubling from retryBackoff's first
// step with up to 20% more, and the status says when the next one is due.
func TestRetriesBackOffOnTheClock(t *testing.T) {
	f := newFakeAPI(t, "n1", taint{"example.com/agent-not-ready", "NoSchedule"})
	f.fail(http.StatusInternalServerError, http.StatusInternalServerError)
	clk := testclock.NewFakeClock(time.Now())
	g, _, _ := startGate(t, f, Config{TaintKeys: []string{"example.com/agent-not-ready"}, Clock: clk})
	g.Registered("example.com")
	for _, wait := range []time.Duration{retryBackoff.Duration, 2 * retryBackoff.Duration} {
		if got := f.next(); got != "GET /api/v1/nodes/n1 500" {
			t.Fatalf("request %q", got)
		}
		waitStatus(t, g, func(st Status) bool { return st.NextRetry != nil && st.NextRetry.After(clk.Now()) })
		if due := g.Status().NextRetry.Sub(clk.Now()); due < wait || due > wait*6/5 {
			t.Errorf("next retry in %v, want [%v, %v]", due, wait, wait*6/5)
		}
		clk.Step(wait - time.Millisecond)
		if !clk.HasWaiters() {
			t.Fatalf("retried before %v", wait)
		}
		clk.Step(wait/5 + time.Millisecond)
	}
	for _, want := range []string{"GET /api/v1/nodes/n1 200", "PATCH /api/v1/nodes/n1 200"} {
		if got := f.next(); got != want {
			t.Fatalf("request %q, want %q", got, want)
		}
	}
	waitStatus(t, g, func(st Status) bool { return !st.Pending && st.NextRetry == nil })
}

// A test operation that fails (the list changed between the read and the
// patch) removes nothing; the gate reads the node again.
func TestReadsAgainWhenTheTaintsChanged(t *testing.T) {
	f := newFakeAPI(t, "n1", taint{"a", "NoSchedule"}, taint{"example.com/agent-not-ready", "NoSchedule"})
	f.beforePatch = func() { f.taints = append([]taint{{"added-meanwhile", "NoSchedule"}}, f.taints...) }
	clk := testclock.NewFakeClock(time.Now())
	g, _, _ := startGate(t, f, Config{TaintKeys: []string{"example.com/agent-not-ready"}, Clock: clk})
	g.Registered("example.com")
	for _, want := range []string{"GET /api/v1/nodes/n1 200", "PATCH /api/v1/nodes/n1 422", "GET /api/v1/nodes/n1 200", "PATCH /api/v1/nodes/n1 200"} {
		if got := f.next(); got != want {
			t.Fatalf("request %q, want %q", got, want)
		}
		if want == "PATCH /api/v1/nodes/n1 422" {
			retryNow(t, g, clk)
		}
	}
	waitStatus(t, g, func(st Status) bool { return !st.Pending && st.TaintsChecked != nil })
	got := f.currentTaints()
	if len(got) != 2 || got[0].Key != "added-meanwhile" || got[1].Key != "a" {
		t.Errorf("taints %v", got)
	}
}

func TestConditionFollowsKubeletsVerdicts(t *testing.T) {
	f := newFakeAPI(t, "n1")
	g, cancel, done := startGate(t, f, Config{Condition: true})
	const typ = "example.com/NodePluginRegistered"

	g.Registered("example.com")
	if got := f.next(); got != "PATCH /api/v1/nodes/n1/status 200" {
		t.Fatalf("request %q", got)
	}
	c := f.condition(typ)
	if c["status"] != "True" || c["reason"] != ReasonRegistered || c["lastTransitionTime"] == nil || c["lastHeartbeatTime"] == nil {
		t.Errorf("condition after acceptance %v", c)
	}

	g.Rejected("example.com", "plugin example.com: validation failed")
	if got := f.next(); got != "PATCH /api/v1/nodes/n1/status 200" {
		t.Fatalf("request %q", got)
	}
	c = f.condition(typ)
	if c["status"] != "False" || c["reason"] != ReasonRejected || c["message"] != "kubelet rejected the CSI driver example.com: plugin example.com: validation failed" {
		t.Errorf("condition after rejection %v", c)
	}

	// --confirm-csinode: CSINode lost the driver kubelet has registered.
	g.Registered("example.com")
	if got := f.next(); got != "PATCH /api/v1/nodes/n1/status 200" {
		t.Fatalf("request %q", got)
	}
	g.Unconfirmed("example.com", "kubelet registered the driver, but CSINode n1 does not exist")
	if got := f.next(); got != "PATCH /api/v1/nodes/n1/status 200" {
		t.Fatalf("request %q", got)
	}
	c = f.condition(typ)
	if c["status"] != "False" || c["reason"] != ReasonNotInCSINode || c["message"] != "kubelet registered the driver, but CSINode n1 does not exist" {
		t.Errorf("condition after CSINode lost the driver %v", c)
	}

	// A clean stop: the registration withdraws the socket, then the
	// gate's context ends; its last attempt still sets False.
	g.Registered("example.com")
	if got := f.next(); got != "PATCH /api/v1/nodes/n1/status 200" {
		t.Fatalf("request %q", got)
	}
	f.mu.Lock()
	f.hold = make(chan struct{})
	hold := f.hold
	f.mu.Unlock()
	g.Withdrawn("example.com")
	cancel()
	close(hold)
	<-done
	for got := f.next(); got != "PATCH /api/v1/nodes/n1/status 200"; got = f.next() {
		t.Logf("request %q", got)
	}
	c = f.condition(typ)
	if c["status"] != "False" || c["reason"] != ReasonUnregistered {
		t.Errorf("condition after the stop %v", c)
	}
}

// The event methods return at once, whatever the API server does.
func TestEventsNeverBlock(t *testing.T) {
	f := newFakeAPI(t, "n1", taint{"example.com/agent-not-ready", "NoSchedule"})
	f.mu.Lock()
	f.hold = make(chan struct{})
	hold := f.hold
	f.mu.Unlock()
	g, cancel, done := startGate(t, f, Config{Condition: true, TaintKeys: []string{"example.com/agent-not-ready"}})
	for range 100 {
		g.Registered("example.com")
		g.Rejected("example.com", "r")
		g.Withdrawn("example.com")
	}
	if st := g.Status(); st.Condition != nil {
		t.Errorf("condition applied while the API server holds every request: %+v", st)
	}
	cancel()
	close(hold)
	<-done
}

func TestOffWithoutOptions(t *testing.T) {
	f := newFakeAPI(t, "n1")
	g, cancel, done := startGate(t, f, Config{})
	g.Registered("example.com")
	g.Withdrawn("example.com")
	cancel()
	<-done
	select {
	case r := <-f.requests:
		t.Errorf("request %q with nothing to do", r)
	default:
	}
}

// waitStatus polls the gate's status until ok, for at most 10 s.
func waitStatus(t *testing.T, g *Gate, ok func(Status) bool) {
	t.Helper()
	if !poll.Wait(poll.Timeout, func() bool { return ok(g.Status()) }) {
		t.Fatalf("status never as expected: %+v", g.Status())
	}
}
