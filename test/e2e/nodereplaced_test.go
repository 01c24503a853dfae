package e2e_test

import (
	"testing"

	"github.com/csi-registrar/node-driver-registrar/test/e2e/harness"
	"github.com/csi-registrar/node-driver-registrar/test/kubelet/report"
)

// The Node is replaced while the driver is registered (deleted and created
// again under its name with a new UID, as node repair does; the CSINode
// that the old Node owned deleted, as the garbage collector does), then the
// driver registers again (a new registrar, as after a container restart).
// Which Node kubelet's CSINode names then is kubelet's own doing, and what
// make e2e-node's check 13b and the registrar's --confirm-csinode reason
// expect of each version: kubelet v1.34 and earlier read the Node when they
// create CSINode, v1.35 to v1.37 take the UID they read at their start (the
// deleted Node's, whose CSINode the garbage collector deletes again),
// v1.38 and later read the Node's UID again.
func TestNodeReplacedThenRegisteredAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "node-replaced.e2e.example.com")
	// Registered on /readyz: kubelet's verdict follows its CSINode write,
	// so nothing of this registration is still being written.
	k, r := e.registered("registrar")
	before := k.State()
	if before.NodeUID == "" || before.CSINodeOwner != before.NodeUID {
		t.Fatalf("before the replacement: CSINode owned by the Node of UID %q, the Node's UID %q; want the same UID:\n%s", before.CSINodeOwner, before.NodeUID, k.Summary())
	}

	replaced, err := k.ReplaceNode(waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	newUID := replaced.State.NodeUID
	if newUID == "" || newUID == before.NodeUID || replaced.State.CSINodeOwner != "" {
		t.Fatalf("after the replacement: Node UID %q (was %q), CSINode owned by %q; want a new UID and no CSINode:\n%s", newUID, before.NodeUID, replaced.State.CSINodeOwner, k.Summary())
	}

	e.stop(r.Process)
	registrations := k.CountEvents(e.driver, report.Register, true)
	e.startRegistrar("registrar-again")
	again, err := k.WaitForEvents(waitTimeout, e.driver, report.Register, true, registrations+1)
	if err != nil {
		t.Fatalf("%v:\n%s", err, k.Summary())
	}
	if _, ok := again.State.Driver(e.driver); !ok {
		t.Fatalf("kubelet registered the driver again, but CSINode does not list it:\n%s", k.Summary())
	}
	want, why := newUID, "reads the Node again"
	if keepsStartNodeUID(t, k) {
		want, why = before.NodeUID, "keeps the UID it read at its start"
	}
	if again.State.CSINodeOwner != want {
		t.Errorf("kubelet %s: CSINode written again is owned by the Node of UID %q; want %q (a kubelet that %s); the Node's UID is %s:\n%s",
			k.Version(), again.State.CSINodeOwner, want, why, newUID, k.Summary())
	}
	t.Logf("kubelet %s: after the Node's replacement (UID %s, was %s), the driver registered again in a CSINode owned by %s",
		k.Version(), newUID, before.NodeUID, again.State.CSINodeOwner)
}

// keepsStartNodeUID says whether k's kubelet code writes CSINode under the
// Node UID it read at its start: v1.35 to v1.37.
func keepsStartNodeUID(t *testing.T, k *harness.Kubelet) bool {
	t.Helper()
	minor := kubeletMinor(t, k)
	return minor >= 35 && minor <= 37
}
