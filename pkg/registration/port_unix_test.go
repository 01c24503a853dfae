//go:build unix

package registration

import (
	"context"
	"sync"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/internal/poll"
)

// fakePort is an HTTPPort that records what the registration asks of it.
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
			run := func(p *fakePort) *running {
				srv := newServer(t, dir)
				srv.SharePort(context.Background(), p)
				r := runServer(t, srv)
				srv.DriverFound(testDriver)
				r.waitServing(t)
				return r
			}
			older := run(olderPort)
			if tc.registered {
				notify(t, older.srv.SocketPathForTest(), true)
				poll.Until(t, "the older instance is registered", func() bool { return older.srv.Status().State == Registered })
			}
			newerPort := &fakePort{wanted: addr, netns: tc.newerNetNS}
			run(newerPort)
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
