package nodegate

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestInClusterConfig(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	cfg, err := InClusterConfig("ua")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://[fd00::1]:443" || cfg.TokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" || cfg.CAFile != "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt" {
		t.Errorf("got %+v", cfg)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := InClusterConfig("ua"); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("without the environment: %v", err)
	}
}

func TestNewClientNamesMissingFiles(t *testing.T) {
	f := newFakeAPI(t, "n1")
	cfg := f.cfg
	cfg.CAFile += ".missing"
	if _, err := NewClient(cfg); err == nil || !strings.Contains(err.Error(), cfg.CAFile) || !strings.Contains(err.Error(), "automountServiceAccountToken") {
		t.Errorf("missing CA: %v", err)
	}
	cfg = f.cfg
	cfg.TokenFile += ".missing"
	if _, err := NewClient(cfg); err == nil || !strings.Contains(err.Error(), cfg.TokenFile) {
		t.Errorf("missing token: %v", err)
	}
}

// kubelet rotates a bound token in the file: after a 401 the client reads
// it again and repeats the request once.
func TestClientReadsTheRotatedTokenAfter401(t *testing.T) {
	f := newFakeAPI(t, "n1", taint{"startup", "NoSchedule"})
	c := f.client()
	f.mu.Lock()
	f.token = "token-2"
	f.mu.Unlock()
	f.writeToken("token-2")
	if _, err := c.getTaints(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	if got := f.next(); got != "GET /api/v1/nodes/n1 401" {
		t.Errorf("first answer %q", got)
	}
	if got := f.next(); got != "GET /api/v1/nodes/n1 200" {
		t.Errorf("second answer %q", got)
	}
}

func TestForbiddenNamesTheMissingRule(t *testing.T) {
	f := newFakeAPI(t, "n1", taint{"startup", "NoSchedule"})
	f.forbidden["patch nodes/status"] = true
	f.forbidden["patch nodes"] = true
	c := f.client()
	patch := conditionPatch(Condition{Type: "d/NodePluginRegistered", Status: "True"}, zeroTime, zeroTime)
	err := c.setCondition(context.Background(), "n1", patch)
	want := `forbidden: the registrar's service account may not patch nodes/status: its ClusterRole needs the rule {apiGroups: [""], resources: ["nodes/status"], verbs: ["patch"]} (deploy/node-gate has it); the API server said: nodes "n1" is forbidden: User "system:serviceaccount:kube-system:csi" cannot patch resource "nodes/status" in API group "" at the cluster scope`
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}
	_, err = c.removeTaints(context.Background(), "n1", []string{"startup"}, func(string, error) {})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != http.StatusForbidden || !strings.Contains(err.Error(), `resources: ["nodes"], verbs: ["patch"]`) {
		t.Errorf("taint removal: %v", err)
	}
}

func TestNodeNotFound(t *testing.T) {
	f := newFakeAPI(t, "n1")
	_, err := f.client().getTaints(context.Background(), "n2")
	if err == nil || !strings.HasPrefix(err.Error(), `node "n2" not found: the registrar must be given its own node's name`) {
		t.Errorf("got %v", err)
	}
}

// A refusal by a ValidatingAdmissionPolicy names the policy and says what
// it said, rather than asking for an RBAC rule that is there.
func TestPolicyRefusal(t *testing.T) {
	for _, tc := range []struct {
		name, message      string
		policy, policySaid string
	}{
		{"with a binding", `nodes "b" is forbidden: ValidatingAdmissionPolicy 'csi-node-gate' with binding 'csi-node-gate' denied request: a registrar on node a may change only that Node, not node b`,
			"csi-node-gate", "a registrar on node a may change only that Node, not node b"},
		{"without a binding", `nodes "b" is forbidden: ValidatingAdmissionPolicy 'p' denied request: no`, "p", "no"},
		{"RBAC", `nodes "b" is forbidden: User "u" cannot patch resource "nodes" in API group "" at the cluster scope`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy, said := refusingPolicy(tc.message)
			if policy != tc.policy || said != tc.policySaid {
				t.Errorf("refusingPolicy = %q, %q; want %q, %q", policy, said, tc.policy, tc.policySaid)
			}
			err := &APIError{Code: http.StatusForbidden, Verb: "patch", Resource: "nodes", Node: "b", Message: tc.message, Policy: policy, PolicyMessage: said}
			want := `patch nodes of node "b" refused by the ValidatingAdmissionPolicy ` + tc.policy + ": " + tc.policySaid + " ("
			if tc.policy == "" {
				want = "forbidden: the registrar's service account may not patch nodes: its ClusterRole needs the rule"
			}
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q, want it to start with %q", err.Error(), want)
			}
		})
	}
}
