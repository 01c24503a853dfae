// Package poll is the tests' one way to wait for a state that no event
// announces: another process's file, a server's status, an HTTP answer.
package poll

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// Timeout is how long Until waits: far longer than anything it waits for
// takes on a loaded machine.
const Timeout = 10 * time.Second

// interval is how often a condition is checked.
const interval = 2 * time.Millisecond

// Until checks cond until it holds, and fails the test, naming what it
// waited for, when it still does not after Timeout.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	UntilWithin(t, Timeout, what, cond)
}

// UntilWithin is Until with another timeout, for what runs slower (a
// binary under emulation).
func UntilWithin(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Wait(timeout, cond) {
		t.Fatalf("timed out waiting until %s", what)
	}
}

// Wait checks cond until it holds or timeout has passed, and tells which:
// for callers that say more than Until when it never holds.
func Wait(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
}

// StepThrough waits until something waits on clock, then steps clock to
// the end of wait, failing the test if that wait ends earlier.
func StepThrough(t testing.TB, clock *clocktesting.FakeClock, wait time.Duration) {
	t.Helper()
	Until(t, "something waits on the clock", clock.HasWaiters)
	clock.Step(wait - time.Millisecond)
	if !clock.HasWaiters() {
		t.Fatalf("the wait ended before %v", wait)
	}
	clock.Step(time.Millisecond)
}
