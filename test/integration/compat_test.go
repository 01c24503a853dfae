package integration

import (
	"context"
	"net/http"
	"os"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/test/poll"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// previousRegistrarBinEnv points TestHandsOverBetweenBuilds at a registrar
// of an earlier build: make handover-compat builds the last one whose
// handover messages carry no version.
const previousRegistrarBinEnv = "PREVIOUS_REGISTRAR_BIN"

// An upgrade from the previous build and a rollback to it hand the
// registration socket over, as between two instances of one build: the
// file at the path never changes, and the newer instance is registered
// through the older one's socket.
func TestHandsOverBetweenBuilds(t *testing.T) {
	previous := os.Getenv(previousRegistrarBinEnv)
	if previous == "" {
		t.Skipf("%s is not set: make handover-compat sets it", previousRegistrarBinEnv)
	}
	this := registrarBin
	t.Cleanup(func() { registrarBin = this })
	for _, tc := range []struct{ name, older, newer string }{
		{"upgrade", previous, this},
		{"rollback", this, previous},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const name = "builds.csi.example.com"
			registrarBin = tc.older
			n, older := published(t, name)
			path := n.socketPath(name)
			if _, err := kubeletClient(t, path).NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
				t.Fatal(err)
			}
			poll.UntilWithin(t, slowTimeout, "the older instance is ready", func() bool { code, _ := get(n.httpAddr, "/readyz"); return code == http.StatusOK })
			before, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}

			// The newer instance on an address of its own, as two pods on a
			// pod network: the HTTP port's release between hostNetwork
			// instances changed after the previous build (an abstract socket
			// marks the waiting instance instead of the PortWanted call), and
			// is not what this test checks.
			n.httpAddr = freeAddress(t)
			registrarBin = tc.newer
			newer := n.startRegistrar(t)
			poll.UntilWithin(t, slowTimeout, "the newer instance took the socket over", func() bool { return registeredByHandover(n.httpAddr) })
			if after, err := os.Lstat(path); err != nil || !os.SameFile(before, after) {
				t.Errorf("the socket at the path changed (%v): kubelet would see a new plugin", err)
			}
			if !newer.running() || !older.running() {
				t.Fatal("an instance exited")
			}
			if _, err := kubeletClient(t, path).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
				t.Errorf("GetInfo through the socket handed over: %v", err)
			}
		})
	}
}
