//go:build unix

package registration

import (
	"sync"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/internal/poll"
)

// fakePort is a PortSharing that records what the registration asks of it.
type fakePort struct {
	mu            sync.Mutex
	wanted, netns string // what this instance waits for, if anything
	listening     string // the address it listens on, if any
	released      []string
	claims        int
	asked         int // calls of Wanted
}

func (p *fakePort) Wanted() (string, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked++
	return p.wanted, p.netns
}

func (p *fakePort) timesAsked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked
}

func (p *fakePort) Release(address, netns string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if address != p.listening || netns != p.netns {
		return false
	}
	p.released = append(p.released, address)
	p.listening = ""
	return true
}

func (p *fakePort) Expect() {}

func (p *fakePort) Claim() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.claims++
}

func (p *fakePort) releases() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.released...)
}

// Whether the newer instance takes the socket over or replaces it, the
// older one, stepping aside, releases the HTTP address the newer one waits
// for on the same network, and only that.
func TestReleasesTheHTTPPortToTheNewOwner(t *testing.T) {
	const addr, netns = "127.0.0.1:9809", "net:[4026531840]"
	for _, tc := range []struct {
		name       string
		registered bool
		newerNetNS string
		want       int
	}{
		{"handover", true, netns, 1},
		{"replaced", false, netns, 1},
		{"another network", true, "net:[4026532000]", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortTempDir(t)
			olderPort := &fakePort{listening: addr, netns: netns}
			withPort := func(p PortSharing) func(*Config) { return func(c *Config) { c.HTTPPort = p } }
			var older *running
			if tc.registered {
				older = startRegistered(t, dir, withPort(olderPort))
			} else {
				older = start(t, dir, withPort(olderPort))
			}
			newerPort := &fakePort{wanted: addr, netns: tc.newerNetNS}
			start(t, dir, withPort(newerPort))
			poll.Until(t, "the older instance steps aside", func() bool { return older.srv.Status().State == Superseded })
			// The older one asks the newer one what it waits for, once.
			poll.Until(t, "the older instance asks", func() bool { return newerPort.timesAsked() == 1 })
			poll.Until(t, "the release, if any", func() bool { return len(olderPort.releases()) == tc.want })
			if r := olderPort.releases(); len(r) != tc.want || (tc.want == 1 && r[0] != addr) {
				t.Errorf("released %v, want %d release of %s", r, tc.want, addr)
			}
		})
	}
}
