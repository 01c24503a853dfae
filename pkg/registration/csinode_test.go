package registration

import (
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// confirming is a machine with Config.ConfirmCSINode serving publication
// 1, brought to state as publishedIn does.
func confirming(state State) machine {
	m := testMachine()
	m.cfg.ConfirmCSINode = true
	m.step(t0, driverReport{name: testDriver, reachable: true})
	m.step(t0, looked{At{kind: AtNothing}, lookClaim})
	m.step(t0, published{1, ReasonStart, ours})
	if state == Registered {
		m.step(t0, kubeletCall{gen: 1, notify: true, registered: true})
	}
	return m
}

var (
	listed  = CSINodeReport{Listed: true}
	missing = CSINodeReport{Missing: true, Reason: "CSINode node-1 does not exist"}
	stale   = CSINodeReport{Reason: "CSINode node-1 is owned by Node UID old, not by the current Node (UID new)"}
)

func TestCSINodeConfirmsTheRegistration(t *testing.T) {
	m := confirming(Registered)
	st := m.status()
	if st.State != Unconfirmed || st.Ready || st.Reason != "kubelet registered the driver, but this node's CSINode has not been read yet" {
		t.Fatalf("registered, CSINode not read: state %s, ready %v, reason %q; want unconfirmed, not ready, saying CSINode has not been read", st.State, st.Ready, st.Reason)
	}
	m.step(t0, stale)
	if st := m.status(); st.State != Unconfirmed || st.Ready || st.Reason != "kubelet registered the driver, but "+stale.Reason {
		t.Fatalf("stale owner: state %s, ready %v, reason %q; want unconfirmed with the report's reason", st.State, st.Ready, st.Reason)
	}
	if !m.due[csinodeTimer].IsZero() {
		t.Fatal("a CSINode owned by a replaced Node is published again for; only its loss is (kubelet's update keeps the owner)")
	}
	m.step(t0, listed)
	if st := m.status(); st.State != Registered || !st.Ready || st.Reason != "registered" {
		t.Fatalf("listed: state %s, ready %v, reason %q; want registered and ready", st.State, st.Ready, st.Reason)
	}
}

func TestCSINodeReportsBeforeTheVerdictDoNothing(t *testing.T) {
	m := confirming(WaitingForKubelet)
	if effects := m.step(t0, missing).effects; effects != nil || !m.due[csinodeTimer].IsZero() {
		t.Fatalf("a CSINode without the driver before kubelet's verdict: effects %v, csinode timer %v; want nothing (kubelet has not registered it yet)", effects, m.due[csinodeTimer])
	}
	// kubelet registers the driver, but the watch has not delivered its
	// update of CSINode yet: the loss is acted on only after the grace.
	m.step(t0, kubeletCall{gen: 1, notify: true, registered: true})
	if want := t0.Add(csinodeBackoff.Duration); !m.due[csinodeTimer].Equal(want) {
		t.Fatalf("registered while the last report says missing: csinode timer due %v, want %v", m.due[csinodeTimer], want)
	}
	m.step(t0.Add(csinodeBackoff.Duration/2), listed)
	if !m.due[csinodeTimer].IsZero() || m.status().State != Registered {
		t.Fatalf("kubelet's update arrives within the grace: csinode timer %v, state %s; want stopped, registered", m.due[csinodeTimer], m.status().State)
	}
}

func TestCSINodeLossIsHealedByPublishingAgain(t *testing.T) {
	m := confirming(Registered)
	m.step(t0, listed)
	lost := t0.Add(time.Minute)
	if effects := m.step(lost, missing).effects; effects != nil {
		t.Fatalf("loss: effects %v, want none before the grace", effects)
	}
	st := m.status()
	if st.State != Unconfirmed || st.Ready || !strings.HasPrefix(st.Reason, "kubelet registered the driver, but CSINode node-1 does not exist; the registration socket is published again at ") {
		t.Fatalf("loss: state %s, ready %v, reason %q; want unconfirmed, saying when it publishes again", st.State, st.Ready, st.Reason)
	}
	if effects := m.step(lost.Add(csinodeBackoff.Duration), fired{csinodeTimer}).effects; !reflect.DeepEqual(effects, []effect{publish{ReasonCSINodeLost, 2}}) {
		t.Fatalf("the grace is over: effects %v, want a publication for %s", effects, ReasonCSINodeLost)
	}
	m.step(lost.Add(csinodeBackoff.Duration), published{2, ReasonCSINodeLost, fileA})
	if m.state != WaitingForKubelet || !m.due[csinodeTimer].IsZero() || m.rec.Publications[ReasonCSINodeLost] != 1 {
		t.Fatalf("published again: state %s, csinode timer %v, %s publications %d; want waiting for kubelet, no timer, 1", m.state, m.due[csinodeTimer], ReasonCSINodeLost, m.rec.Publications[ReasonCSINodeLost])
	}
	// kubelet registers the driver again, and creates the CSINode.
	m.step(lost.Add(2*time.Second), kubeletCall{gen: 2, notify: true, registered: true})
	m.step(lost.Add(2*time.Second), listed)
	if st := m.status(); st.State != Registered || !st.Ready || m.csinodeWait != csinodeBackoff {
		t.Fatalf("healed: state %s, ready %v, next wait %v; want registered, ready, the wait back to %v", st.State, st.Ready, m.csinodeWait.Duration, csinodeBackoff.Duration)
	}
}

// A kubelet that creates the CSINode under a Node that no longer exists
// (kubelet >= 1.35 after a Node replacement) sees it deleted again by the
// garbage collector: each publication for the loss waits twice as long as
// the one before, up to csinodeBackoff.Cap.
func TestCSINodeLossesInARowBackOff(t *testing.T) {
	m := confirming(Registered)
	now, gen := t0, uint64(1)
	var waits []time.Duration
	for range 12 {
		m.step(now, missing)
		due := m.due[csinodeTimer]
		if due.IsZero() {
			t.Fatalf("after %d publications: a loss while registered starts no wait", len(waits))
		}
		waits = append(waits, due.Sub(now))
		now = due
		if effects := m.step(now, fired{csinodeTimer}).effects; !reflect.DeepEqual(effects, []effect{publish{ReasonCSINodeLost, gen + 1}}) {
			t.Fatalf("wait %d over: effects %v, want a publication", len(waits), effects)
		}
		gen++
		m.step(now, published{gen, ReasonCSINodeLost, fileA})
		m.step(now, kubeletCall{gen: gen, notify: true, registered: true})
		m.step(now, stale) // created under the old Node's UID
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 64 * time.Second, 128 * time.Second, 256 * time.Second, csinodeBackoff.Cap, csinodeBackoff.Cap, csinodeBackoff.Cap}
	if !reflect.DeepEqual(waits, want) {
		t.Fatalf("waits before each publication = %v, want %v", waits, want)
	}
}

func TestCSINodeLossWhileNotServingDoesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    machine
	}{
		{"rejected", then(confirming(WaitingForKubelet), t0, kubeletCall{gen: 1, notify: true, reason: "no"})},
		{"superseded", func() machine { m := confirming(Registered); m.standAside(Superseded, fileA); return m }()},
		{"publication due", then(confirming(Registered), t0, publishFailed{ReasonStale, syscall.EMFILE})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			if effects := m.step(t0, missing).effects; effects != nil || !m.due[csinodeTimer].IsZero() {
				t.Fatalf("effects %v, csinode timer %v; want nothing", effects, m.due[csinodeTimer])
			}
		})
	}
}

func TestCSINodeIgnoredWithoutTheOption(t *testing.T) {
	m := publishedIn(Registered)
	m.step(t0, missing)
	if st := m.status(); st.State != Registered || !st.Ready || !m.due[csinodeTimer].IsZero() {
		t.Fatalf("without ConfirmCSINode: state %s, ready %v, csinode timer %v; want registered, ready, none", st.State, st.Ready, m.due[csinodeTimer])
	}
}
