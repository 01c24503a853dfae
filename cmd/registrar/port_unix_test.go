//go:build unix

package main

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/csi-registrar/node-driver-registrar/internal/poll"
	"github.com/csi-registrar/node-driver-registrar/pkg/httpport"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// countedPort is a real *httpport.Port that counts what sharePort asks of
// it, and records the outcome of each Release.
type countedPort struct {
	*httpport.Port
	mu       sync.Mutex
	asked    int
	releases []bool
}

func (p *countedPort) Want() httpport.Wanted {
	p.mu.Lock()
	p.asked++
	p.mu.Unlock()
	return p.Port.Want()
}

func (p *countedPort) Release(to httpport.Wanted) bool {
	released := p.Port.Release(to)
	p.mu.Lock()
	p.releases = append(p.releases, released)
	p.mu.Unlock()
	return released
}

func (p *countedPort) counts() (asked int, releases []bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked, append([]bool(nil), p.releases...)
}

// runPort runs a real port on addr, in the network namespace netns as far
// as Release is concerned, until the test ends.
func runPort(t *testing.T, addr, netns string) *countedPort {
	t.Helper()
	p := &countedPort{Port: httpport.New(addr, net.ListenConfig{})}
	p.NetNS = netns
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
	return p
}

func nextListener(t *testing.T, p *countedPort) net.Listener {
	t.Helper()
	select {
	case l := <-p.Listeners():
		t.Cleanup(func() { l.Close() })
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("no listener")
		return nil
	}
}

// Whether the newer instance takes the socket over or replaces it, the
// older one, stepping aside, releases the HTTP address the newer one waits
// for on the same network, and only that; the newer one then listens on it.
func TestReleasesTheHTTPPortToTheNewOwner(t *testing.T) {
	const netns = "net:[4026531840]"
	for _, tc := range []struct {
		name       string
		registered bool
		newerNetNS string
	}{
		{"handover", true, netns},
		{"replaced", false, netns},
		{"another network", true, "net:[4026532000]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "port")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			run := func(p *countedPort) *registration.Server {
				return startRegistration(t, dir, nil, func(srv *registration.Server) {
					sharePort(context.Background(), srv, p, registration.DefaultCheckTimeout)
				})
			}
			free, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			free.Close()
			olderPort := runPort(t, free.Addr().String(), netns)
			held := nextListener(t, olderPort)
			older := run(olderPort)
			if tc.registered {
				kubeletRegisters(t, older.Status().SocketPath)
				poll.Until(t, "the older instance is registered", func() bool { return older.Status().State == registration.Registered })
			}

			newerPort := runPort(t, held.Addr().String(), tc.newerNetNS)
			poll.Until(t, "the newer instance waits for the address", func() bool { return newerPort.Port.Want().Address != "" })
			run(newerPort)
			poll.Until(t, "the older instance steps aside", func() bool { return older.Status().State == registration.Superseded })
			// The older one asks the newer one what it waits for, once,
			// and tries to release its port to it.
			poll.Until(t, "the older instance tries to release its port", func() bool {
				_, releases := olderPort.counts()
				return len(releases) > 0
			})
			asked, _ := newerPort.counts()
			_, releases := olderPort.counts()
			otherNetwork := tc.newerNetNS != netns
			if asked != 1 || len(releases) != 1 || releases[0] == otherNetwork {
				t.Fatalf("asked %d times, releases %v; want one question and one release unless on another network", asked, releases)
			}
			if otherNetwork {
				return
			}
			if _, err := held.Accept(); err == nil {
				t.Error("the released listener still accepts")
			}
			if l := nextListener(t, newerPort); l.Addr().String() != held.Addr().String() {
				t.Errorf("the newer instance listens on %s, want %s", l.Addr(), held.Addr())
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
