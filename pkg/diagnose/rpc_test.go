package diagnose

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// The diagnosis asks the running registrar's socket for GetInfo: the
// registrar must not count that as a call of kubelet's.
func TestRegistrationInfoIsNotCountedAsKubelets(t *testing.T) {
	dir, err := os.MkdirTemp("", "diag")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	srv, err := registration.New(registration.Config{Endpoint: "/var/lib/kubelet/plugins/x/csi.sock", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	srv.DriverFound("diag.csi.example.com")
	path := registration.SocketPath(dir, "diag.csi.example.com")

	deadline := time.Now().Add(10 * time.Second)
	for srv.Health(ctx).State != registration.SocketServing {
		if time.Now().After(deadline) {
			t.Fatal("the registration socket was not published")
		}
		time.Sleep(2 * time.Millisecond)
	}
	info, err := registrationInfo(ctx, path, 5*time.Second)
	if err != nil || info.Name != "diag.csi.example.com" {
		t.Fatalf("registrationInfo = %v, %v", info, err)
	}
	if n := srv.Status().KubeletCalls.GetInfo; n != 0 {
		t.Errorf("kubelet's GetInfo calls after the diagnosis's = %d, want 0", n)
	}
}
