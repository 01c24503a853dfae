package registration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/poll"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	testingclock "k8s.io/utils/clock/testing"
)

func TestPublishesADeletedSocketAgain(t *testing.T) {
	r := start(t, shortTempDir(t))
	path := r.srv.SocketPathForTest()
	for i := 1; i <= 3; i++ {
		before, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, "the socket is back", func() bool {
			now, err := os.Lstat(path)
			return err == nil && !os.SameFile(before, now) && servesOwn(r.srv)
		})
		if n := r.srv.Status().Publications[ReasonDeleted]; n != uint64(i) {
			t.Errorf("publications after deletion %d = %d", i, n)
		}
		if _, err := client(t, path).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
			t.Fatalf("GetInfo on the new socket: %v", err)
		}
	}
	// One hidden name per publication, the old ones gone.
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 2 {
		t.Errorf("registry directory holds %v, want the socket and one hidden name", entries)
	}
}

func TestStepsAsideForANewerInstanceAndReturnsWhenItLeaves(t *testing.T) {
	dir := shortTempDir(t)
	older := start(t, dir)
	newer := start(t, dir)
	poll.Until(t, "the older instance steps aside", func() bool { return older.srv.Status().State == Superseded })

	st := older.srv.Status()
	if st.Ready || !strings.Contains(st.Reason, "superseded") {
		t.Errorf("older Status = ready %v %q, want not ready, superseded", st.Ready, st.Reason)
	}
	// Nothing can start a ping-pong: neither instance has a timer that
	// would make it publish, and the older one follows the newer one's
	// socket, so that a change at the path leaves it where it is.
	poll.Until(t, "both instances settle", func() bool {
		return older.srv.timersForTest() == "" && newer.srv.timersForTest() == "silence"
	})
	if o, n := older.srv.Status().Publications, newer.srv.Status().Publications; o[ReasonStart] != 1 || n[ReasonStart] != 1 || len(o) != 1 || len(n) != 1 {
		t.Fatalf("publications: older %v, newer %v; want one each", o, n)
	}
	if !older.srv.followsForTest() {
		t.Fatal("the older instance does not follow the socket at the path")
	}

	// The newer instance goes away (its pod failed): the node must not be
	// left without a registration.
	if err := newer.stop(t); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the older instance publishes again", func() bool {
		return servesOwn(older.srv)
	})
	if n := older.srv.Status().Publications[ReasonVacated]; n != 1 {
		t.Errorf("vacated publications = %d, want 1", n)
	}
	if st := older.srv.Status(); st.State != WaitingForKubelet {
		t.Errorf("older state = %v, want waiting for kubelet", st.State)
	}
}

func TestReplacesADeadSocketAtThePath(t *testing.T) {
	r := start(t, shortTempDir(t))
	path := r.srv.SocketPathForTest()
	tmp := filepath.Join(filepath.Dir(path), "dead.sock")
	leaveSocket(t, tmp, false)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "a live socket of ours replaces the dead one", func() bool {
		return r.srv.Status().Publications[ReasonStale] == 1 && servesOwn(r.srv)
	})
}

func TestRetriesAfterRejection(t *testing.T) {
	fake := testingclock.NewFakeClock(time.Now())
	srv := newServer(t, shortTempDir(t), func(c *Config) {
		c.Clock = fake
	})
	var mu sync.Mutex
	var observed []string
	srv.Observe(func(_ Status, happened []Transition) {
		for _, t := range happened {
			if r, ok := t.(KubeletRejected); ok {
				mu.Lock()
				observed = append(observed, r.Reason)
				mu.Unlock()
			}
		}
	})
	r := runServer(t, srv)
	srv.DriverFound(testDriver)
	r.waitServing(t)
	path := srv.SocketPathForTest()
	ctx := context.Background()

	for i := 0; i < 3; i++ {
		before, _ := os.Lstat(path)
		reason := "NodeGetInfo failed " + string(rune('a'+i))
		if _, err := client(t, path).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{Error: reason}); err != nil {
			t.Fatalf("NotifyRegistrationStatus(false) got no reply: %v", err)
		}
		var st Status
		poll.Until(t, "the rejection is recorded", func() bool { st = srv.Status(); return st.RegistrationFailures == uint64(i+1) })
		if st.State != Rejected || st.NextRetry == nil || st.Attempts != uint64(i+1) {
			t.Fatalf("after rejection %d: %+v", i+1, st)
		}
		fake.SetTime(*st.NextRetry)
		poll.Until(t, "the socket is published again", func() bool {
			now, err := os.Lstat(path)
			return err == nil && !os.SameFile(before, now) && srv.Status().Publications[ReasonRetry] == uint64(i+1)
		})
		// kubelet's verdict stands until it gives another.
		st = srv.Status()
		if st.State != Rejected || st.Ready || !strings.Contains(st.Reason, reason) {
			t.Errorf("after the retry's publication: %s %q, want still rejected with kubelet's reason", st.State, st.Reason)
		}
		if st.LastVerdict == nil || st.LastVerdict.Registered || st.LastVerdict.Reason != reason {
			t.Errorf("last verdict = %+v, want the rejection %q", st.LastVerdict, reason)
		}
	}

	// Accepted through the current socket: ready, and the backoff starts over.
	if _, err := client(t, path).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the registration is confirmed", func() bool { ready := srv.Status().Ready; return ready })
	if st := srv.Status(); st.Attempts != 0 || st.FailingSince != nil {
		t.Errorf("once registered: attempts %d, failing since %v; want neither", st.Attempts, st.FailingSince)
	}
	mu.Lock()
	if len(observed) != 3 {
		t.Errorf("observers saw %d rejections (%q), want 3", len(observed), observed)
	}
	mu.Unlock()
}

// A rejection schedules the next publication once kubelet's own retry is
// overdue (its first: 500 ms and 2 s for its reconciler), and a second
// rejection does not push it back.
func TestRetryAfterARejectionIsScheduledOnce(t *testing.T) {
	// The clock does not move: the retry does not happen during the test.
	r := start(t, shortTempDir(t), func(c *Config) { c.Clock = testingclock.NewFakeClock(time.Now()) })
	path := r.srv.SocketPathForTest()
	if _, err := client(t, path).NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{Error: "no"}); err != nil {
		t.Fatal(err)
	}
	var st Status
	poll.Until(t, "the retry is scheduled", func() bool { st = r.srv.Status(); return st.NextRetry != nil })
	if wait := st.NextRetry.Sub(*st.LastFailure); wait != 2500*time.Millisecond {
		t.Errorf("first retry after %v, want 2.5s", wait)
	}
	if ready, reason := r.ready(); ready || !strings.Contains(reason, "rejected by kubelet: no") {
		t.Errorf("Ready() = %v %q, want not ready with kubelet's reason", ready, reason)
	}
	// A second rejection while a retry is pending does not push it back.
	if _, err := client(t, path).NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{Error: "no"}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the second rejection is recorded", func() bool { return r.srv.Status().RegistrationFailures == 2 })
	if again := r.srv.Status(); !again.NextRetry.Equal(*st.NextRetry) {
		t.Errorf("the pending retry moved from %v to %v", st.NextRetry, again.NextRetry)
	}
}

func TestRegistersUnderTheDriversNewName(t *testing.T) {
	r := start(t, shortTempDir(t))
	oldPath := r.srv.SocketPathForTest()
	r.srv.DriverFound("renamed.csi.example.com")
	newPath := SocketPath(filepath.Dir(oldPath), "renamed.csi.example.com")
	poll.Until(t, "the new socket is published and the old one removed", func() bool {
		_, errOld := os.Lstat(oldPath)
		return os.IsNotExist(errOld) && servesOwn(r.srv) && r.srv.SocketPathForTest() == newPath
	})
	info, err := client(t, newPath).GetInfo(context.Background(), &registerapi.InfoRequest{})
	if err != nil || info.Name != "renamed.csi.example.com" {
		t.Fatalf("GetInfo = %+v, %v; want the new name", info, err)
	}
	if st := r.srv.Status(); st.Publications[ReasonRenamed] != 1 || st.DriverName != "renamed.csi.example.com" {
		t.Errorf("Status = %+v", st)
	}
}

func TestReadiness(t *testing.T) {
	r := startWaiting(t, shortTempDir(t))
	if ready, reason := r.ready(); ready || reason != "waiting for the CSI driver" {
		t.Errorf("before the driver: Ready() = %v %q", ready, reason)
	}
	// Why the driver cannot be asked is the reason, and in the status.
	const why = "cannot connect to /csi/csi.sock (permission denied): ..."
	r.srv.DriverUnreachable(why)
	poll.Until(t, "the reason names why the driver cannot be asked", func() bool {
		_, reason := r.ready()
		return reason == "waiting for the CSI driver: "+why
	})
	if st := r.srv.Status(); st.DriverError != why || st.DriverReachable {
		t.Errorf("Status = %+v, want the driver's error and not reachable", st)
	}
	r.srv.DriverFound(testDriver)
	r.waitServing(t)
	if st := r.srv.Status(); st.DriverError != "" {
		t.Errorf("the driver answered, yet DriverError = %q", st.DriverError)
	}
	if ready, reason := r.ready(); ready || !strings.Contains(reason, "waiting for kubelet") {
		t.Errorf("before kubelet's verdict: Ready() = %v %q", ready, reason)
	}
	path := r.srv.SocketPathForTest()
	if _, err := client(t, path).NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "ready", func() bool { ready := r.srv.Status().Ready; return ready })
	if st := r.srv.Status(); st.State != Registered || st.LastVerdict == nil || !st.LastVerdict.Registered || st.LastNotify == nil || st.KubeletCalls.NotifyRegistered != 1 {
		t.Errorf("Status = %+v", st)
	}
	// A new socket needs kubelet's verdict again.
	os.Remove(path)
	poll.Until(t, "not ready until kubelet confirms the new socket", func() bool {
		ready, reason := r.ready()
		return !ready && strings.Contains(reason, "waiting for kubelet")
	})
}

func TestDriverReachability(t *testing.T) {
	r := start(t, shortTempDir(t))
	if !r.srv.Status().DriverReachable {
		t.Error("driver not reachable after it was found")
	}
	r.srv.DriverGone()
	poll.Until(t, "driver not reachable after DriverGone", func() bool { return !r.srv.Status().DriverReachable })
	r.srv.DriverFound(testDriver)
	// The name and the reachability arrive together.
	poll.Until(t, "driver reachable again", func() bool { return r.srv.Status().DriverReachable })
	if st := r.srv.Status(); !st.DriverReachable || st.Publications[ReasonStart] != 1 || len(st.Publications) != 1 {
		t.Errorf("the same name again: Status = %+v, want reachable and no new publication", st)
	}
}

func TestRemovesHiddenSocketsLeftByAKilledRegistrar(t *testing.T) {
	dir := shortTempDir(t)
	dead := filepath.Join(dir, "."+testDriver+".abcdef")
	live := filepath.Join(dir, "."+testDriver+".123456")
	other := filepath.Join(dir, ".other.example.com.abcdef")
	notOurs := filepath.Join(dir, "."+testDriver+".notes")
	leaveSocket(t, dead, false)
	leaveSocket(t, live, true)
	leaveSocket(t, other, false)
	if err := os.WriteFile(notOurs, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	start(t, dir)
	if _, err := os.Lstat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead hidden socket is still there (%v)", err)
	}
	for _, keep := range []string{live, other, notOurs} {
		if _, err := os.Lstat(keep); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(keep), err)
		}
	}
}

// kubelet that never calls GetInfo (it does not watch the directory, a
// relocated --root-dir) makes the registration kubelet-silent once the
// silence has lasted, until kubelet's first call.
func TestSaysWhenKubeletNeverCalls(t *testing.T) {
	fake := testingclock.NewFakeClock(time.Now())
	r := start(t, shortTempDir(t), func(c *Config) { c.Clock = fake })
	if st := r.srv.Status(); st.State != WaitingForKubelet {
		t.Fatalf("before the silence: %s", st.State)
	}
	stepWhenArmed(t, fake, 10*time.Second)
	poll.Until(t, "the status says kubelet did not call", func() bool { return r.srv.Status().KubeletSilent })
	if st := r.srv.Status(); st.State != KubeletSilent || st.Ready || !strings.Contains(st.Reason, "plugins_registry") || st.FailingSince == nil {
		t.Errorf("Status = %+v, want kubelet-silent, naming the registry directory as a cause", st)
	}
	if _, err := client(t, r.srv.SocketPathForTest()).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the silence is forgotten at kubelet's call", func() bool {
		st := r.srv.Status()
		return st.State == WaitingForKubelet && !st.KubeletSilent && !strings.Contains(st.Reason, "plugins_registry") && st.FailingSince == nil
	})
}
