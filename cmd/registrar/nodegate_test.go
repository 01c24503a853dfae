package main

import (
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/csi-registrar/node-driver-registrar/pkg/healthz"
	"github.com/csi-registrar/node-driver-registrar/test/removeall"
)

func TestNodeGateFlags(t *testing.T) {
	t.Setenv(nodeNameEnv, "node-from-env")
	o, err := parseFlags("registrar", []string{"--kubelet-registration-path=/k",
		"--remove-node-taint=example.com/agent-not-ready,readiness.k8s.io/storage", "--remove-node-taint", "other", "--remove-node-taint=other", "--node-condition"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"example.com/agent-not-ready", "readiness.k8s.io/storage", "other"}; !slices.Equal(o.nodeGate.TaintKeys, want) {
		t.Errorf("taints %q, want %q", o.nodeGate.TaintKeys, want)
	}
	if name, from := o.node(); !o.nodeGate.Condition || !o.gatesNode() || name != "node-from-env" || from != nodeNameEnv {
		t.Errorf("got %+v, node %q from %s", o, name, from)
	}
	o, err = parseFlags("registrar", []string{"--kubelet-registration-path=/k", "--node-condition", "--node-name=n1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if name, from := o.node(); name != "n1" || from != "--node-name" {
		t.Errorf("--node-name: node %q from %s", name, from)
	}
	if o.nodeGate.ConditionType != "" {
		t.Errorf("--node-condition-type defaults to %q, want empty (<driver name>/NodePluginRegistered)", o.nodeGate.ConditionType)
	}
	o, err = parseFlags("registrar", []string{"--kubelet-registration-path=/k", "--node-condition", "--node-condition-type=node.gke.io/PDCSIReady", "--node-name=n1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err != nil || o.nodeGate.ConditionType != "node.gke.io/PDCSIReady" {
		t.Errorf("--node-condition-type=node.gke.io/PDCSIReady: %q, validate() = %v", o.nodeGate.ConditionType, err)
	}
	// Off by default: no API server needed.
	o, err = parseFlags("registrar", []string{"--kubelet-registration-path=/k"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.gatesNode() {
		t.Error("the node gate is on by default")
	}
	if g, err := newNodeGate(o); g != nil || err != nil {
		t.Errorf("newNodeGate without the flags = %v, %v", g, err)
	}
}

func TestValidateNodeGate(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"bad taint key", []string{"--remove-node-taint=Example.com/x", "--node-name=n"}, `--remove-node-taint: taint key "Example.com/x" is not valid: prefix part a lowercase RFC 1123 subdomain`},
		{"no node name", []string{"--node-condition"}, "--remove-node-taint and --node-condition need the node's name: set the environment variable NODE_NAME from the downward API"},
		{"bad condition type", []string{"--node-condition", "--node-condition-type=node.gke.io/PD CSI Ready", "--node-name=n"}, `--node-condition-type: condition type "node.gke.io/PD CSI Ready" is not valid: name part must consist of alphanumeric characters`},
		{"condition type in capitals", []string{"--node-condition", "--node-condition-type=Node.GKE.io/PDCSIReady", "--node-name=n"}, `--node-condition-type: condition type "Node.GKE.io/PDCSIReady" is not valid: prefix part a lowercase RFC 1123 subdomain`},
		{"CSINode confirmation without the node name", []string{"--confirm-csinode"}, "--confirm-csinode needs the node's name: set the environment variable NODE_NAME from the downward API"},
		{"condition type without the condition", []string{"--node-condition-type=node.gke.io/PDCSIReady", "--node-name=n"}, "--node-condition-type=node.gke.io/PDCSIReady has no effect without --node-condition: add --node-condition, or drop --node-condition-type"},
	}
	t.Setenv(nodeNameEnv, "")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags("registrar", append([]string{"--kubelet-registration-path=/k"}, tc.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if err := o.validate(); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// Outside a pod the gate cannot start, and says why.
func TestNodeGateNeedsThePodsServiceAccount(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	o, err := parseFlags("registrar", []string{"--kubelet-registration-path=/k", "--node-condition", "--node-name=n"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newNodeGate(o); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("newNodeGate = %v", err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	if _, err := newNodeGate(o); err == nil || !strings.Contains(err.Error(), "/var/run/secrets/kubernetes.io/serviceaccount/token") || !strings.Contains(err.Error(), "automountServiceAccountToken") {
		t.Errorf("newNodeGate without the service account's files = %v", err)
	}
}

// A bad condition type stops the registrar before anything starts: exit 1,
// the error naming the flag, and no registration socket.
func TestBadConditionTypeExitsBeforeStarting(t *testing.T) {
	removeall.Require(t) // before the first temporary directory
	dir := t.TempDir()
	out := runRegistrar(t, "--kubelet-registration-path=/var/lib/kubelet/plugins/x/csi.sock", "--plugin-registration-path="+dir,
		"--node-condition", "--node-name=n1", "--node-condition-type=node.gke.io/")
	if out.code != exitError || !strings.Contains(out.stderr, `--node-condition-type: condition type \"node.gke.io/\" is not valid`) {
		t.Errorf("exit code %d, stderr:\n%s\nwant 1 and the flag's error", out.code, out.stderr)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("the registry directory holds %v (%v), want nothing", entries, err)
	}
}

// --confirm-csinode, too, needs the pod's service account, and says so.
func TestCSINodeConfirmationNeedsThePodsServiceAccount(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	o, err := parseFlags("registrar", []string{"--kubelet-registration-path=/k", "--confirm-csinode", "--node-name=n"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	var reports []healthz.Feature
	if err := startCSINode(t.Context(), o, nil, nil, &reports); err == nil || !strings.HasPrefix(err.Error(), "--confirm-csinode: ") || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("startCSINode outside a pod = %v, want the flag and KUBERNETES_SERVICE_HOST named", err)
	}
	o, err = parseFlags("registrar", []string{"--kubelet-registration-path=/k"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := startCSINode(t.Context(), o, nil, nil, &reports); len(reports) > 0 || err != nil {
		t.Errorf("startCSINode without the flag = %v, reports %v; want nothing started", err, reports)
	}
}
