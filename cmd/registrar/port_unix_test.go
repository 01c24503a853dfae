//go:build unix

package main

import (
	"context"
	"os"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/csi-registrar/node-driver-registrar/internal/poll"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// fakePort is a sharedPort that records what sharePort asks of it.
type fakePort struct {
	mu            sync.Mutex
	wanted, netns string // what this instance waits for, if anything
	listening     string // the address it listens on, if any
	released      []string
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
func (p *fakePort) Claim()  {}

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
			dir, err := os.MkdirTemp("", "port")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			run := func(p *fakePort) *registration.Server {
				return startRegistration(t, dir, nil, func(srv *registration.Server) {
					sharePort(context.Background(), srv, p, registration.DefaultCheckTimeout)
				})
			}
			olderPort := &fakePort{listening: addr, netns: netns}
			older := run(olderPort)
			if tc.registered {
				kubeletRegisters(t, older.Status().SocketPath)
				poll.Until(t, "the older instance is registered", func() bool { return older.Status().State == registration.Registered })
			}
			newerPort := &fakePort{wanted: addr, netns: tc.newerNetNS}
			run(newerPort)
			poll.Until(t, "the older instance steps aside", func() bool { return older.Status().State == registration.Superseded })
			// The older one asks the newer one what it waits for, once.
			poll.Until(t, "the older instance asks", func() bool { return newerPort.timesAsked() == 1 })
			poll.Until(t, "the release, if any", func() bool { return len(olderPort.releases()) == tc.want })
			if r := olderPort.releases(); len(r) != tc.want || (tc.want == 1 && r[0] != addr) {
				t.Errorf("released %v, want %d release of %s", r, tc.want, addr)
			}
		})
	}
}

// kubeletRegisters tells the registration socket at path that kubelet
// accepted the plugin.
func kubeletRegisters(t *testing.T, path string) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := registerapi.NewRegistrationClient(conn).NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
}
