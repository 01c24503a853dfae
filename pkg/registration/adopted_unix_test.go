//go:build unix

package registration

import (
	"sync/atomic"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/internal/poll"
)

// An instance that takes a registered socket over is registered without a
// word from kubelet: Registered tells it so (the node gate of a new pod in
// a rolling update relies on it).
func TestRegisteredOnTakingARegisteredSocketOver(t *testing.T) {
	dir := shortTempDir(t)
	startRegistered(t, dir)
	var registered atomic.Int32
	var name atomic.Value
	newer := start(t, dir, func(c *Config) {
		c.Registered = func(driverName string) {
			name.Store(driverName)
			registered.Add(1)
		}
	})
	if st := newer.srv.Status(); st.Publications[ReasonHandover] != 1 {
		t.Fatalf("newer publications = %v, want one handover", st.Publications)
	}
	poll.Until(t, "Registered called", func() bool { return registered.Load() == 1 })
	// The name as the loop knows it, before any snapshot of it is shared.
	if got := name.Load(); got != testDriver {
		t.Errorf("Registered(%v), want the driver's name %q", got, testDriver)
	}
}
