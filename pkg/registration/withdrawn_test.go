package registration

import (
	"sync/atomic"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/internal/poll"
)

// Withdrawn is called when Run removes its socket on the way out, and only
// then: an instance that stepped aside for a newer one leaves kubelet's
// registration in place.
func TestWithdrawnOnlyWhenTheSocketIsRemoved(t *testing.T) {
	dir := shortTempDir(t)
	var olderWithdrawn, newerWithdrawn atomic.Int32
	older := start(t, dir, func(c *Config) { c.Withdrawn = func(string) { olderWithdrawn.Add(1) } })
	newer := start(t, dir, func(c *Config) { c.Withdrawn = func(string) { newerWithdrawn.Add(1) } })
	poll.Until(t, "the older instance steps aside", func() bool { return older.srv.Status().State == Superseded })
	if err := older.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := olderWithdrawn.Load(); n != 0 {
		t.Errorf("the superseded instance reported %d withdrawals", n)
	}
	if err := newer.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := newerWithdrawn.Load(); n != 1 {
		t.Errorf("the instance that removed its socket reported %d withdrawals, want 1", n)
	}
}
