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
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/pkg/httpport"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
	"github.com/csi-registrar/node-driver-registrar/test/poll"
)

// runPort runs a real port on addr until the test ends.
func runPort(t *testing.T, addr string) *httpport.Port {
	t.Helper()
	p := httpport.New(addr, net.ListenConfig{}, clock.RealClock{})
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

func nextListener(t *testing.T, p *httpport.Port) net.Listener {
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
// older one, stepping aside, stops listening on the HTTP address the newer
// one waits for on the same network, and only then; the newer one then
// listens on it.
func TestReleasesTheHTTPPortOnSteppingAside(t *testing.T) {
	for _, tc := range []struct {
		name       string
		registered bool
		// otherAddress: the newer instance waits for another address, as
		// on a pod network of its own, where nobody waits for this one.
		otherAddress bool
	}{
		{"handover", true, false},
		{"replaced", false, false},
		{"another network", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "port")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			// steppedAside is closed by an observer after
			// releaseOnStepAside: that one has run then.
			steppedAside := make(chan struct{})
			var closeOnce sync.Once
			run := func(p *httpport.Port) *registration.Server {
				return startRegistration(t, dir, func(srv *registration.Server) {
					srv.Observe(releaseOnStepAside(klog.Background(), p))
					srv.Observe(func(_ registration.Status, happened []registration.Transition) {
						for _, t := range happened {
							if _, ok := t.(registration.SteppedAside); ok {
								closeOnce.Do(func() { close(steppedAside) })
							}
						}
					})
				})
			}
			free, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			free.Close()
			olderPort := runPort(t, free.Addr().String())
			held := nextListener(t, olderPort)
			older := run(olderPort)
			if tc.registered {
				kubeletRegisters(t, older.Status().SocketPath)
				poll.Until(t, "the older instance is registered", func() bool { return older.Status().State == registration.Registered })
			}

			wanted := held.Addr().String()
			if tc.otherAddress {
				other, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { other.Close() })
				wanted = other.Addr().String()
			}
			newerPort := runPort(t, wanted)
			run(newerPort)
			select {
			case <-steppedAside:
			case <-time.After(30 * time.Second):
				t.Fatal("the older instance did not step aside")
			}
			if tc.otherAddress {
				c, err := net.Dial("tcp", held.Addr().String())
				if err != nil {
					t.Fatalf("the older instance stopped listening though nobody on its network waits for its address: %v", err)
				}
				c.Close()
				return
			}
			if l := nextListener(t, newerPort); l.Addr().String() != held.Addr().String() {
				t.Errorf("the newer instance listens on %s, want %s", l.Addr(), held.Addr())
			}
			if _, err := held.Accept(); err == nil {
				t.Error("the older instance's listener still accepts")
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

// startRegistration runs a real registration in dir, set up by setup
// before it runs, until the test ends. It returns once the registration
// serves the socket at its path.
func startRegistration(t *testing.T, dir string, setup func(*registration.Server)) *registration.Server {
	t.Helper()
	srv, err := registration.New(registration.Config{Endpoint: "/csi.sock", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	setup(srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	srv.DriverFound("test.csi.example.com")
	poll.Until(t, "the registration serves its socket", func() bool {
		return srv.Status().Ready || srv.Status().State == registration.WaitingForKubelet
	})
	return srv
}
