// Package poll is the tests' one way to wait for a state that no event
// announces: another process's file, a server's status, an HTTP answer.
package poll

import (
	"testing"
	"time"
)

// Timeout is how long Until waits: far longer than anything it waits for
// takes on a loaded machine.
const Timeout = 10 * time.Second

// Until checks cond every 2 ms until it holds, and fails the test, naming
// what it waited for, when it still does not after Timeout.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	UntilWithin(t, Timeout, what, cond)
}

// UntilWithin is Until with another timeout, for what runs slower (a
// binary under emulation).
func UntilWithin(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
