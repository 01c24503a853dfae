package nodegate

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/apiserver"
)

// This file runs the gate against a real kube-apiserver (v1.37.1, built
// from test/node's go.mod as make e2e-node builds it) on a real etcd
// (Debian's etcd-server), with RBAC and the rules of deploy/node-gate.
// Without them the tests are skipped, saying why; with CI set they fail.

// apiserverFixture is a running etcd and kube-apiserver.
type apiserverFixture struct {
	*apiserver.Server
	dir string
}

const (
	// gateToken authenticates as the service account that deploy/node-gate
	// binds (its binding names the namespace default until kustomize sets
	// the overlay's).
	gateToken = "gate-token"
	gateUser  = "system:serviceaccount:default:csi-node"
	// narrowToken's user may only patch nodes, not nodes/status.
	narrowToken = "narrow-token"
	narrowUser  = "system:serviceaccount:default:narrow"
)

// skipOrFail skips, or fails under CI, where the test cannot run.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
		t.Fatalf("cannot run against a real kube-apiserver (CI is set, so this fails): "+format, args...)
	}
	t.Skipf("cannot run against a real kube-apiserver: "+format, args...)
}

func startAPIServer(t *testing.T) *apiserverFixture {
	t.Helper()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		skipOrFail(t, "no etcd on PATH (apt-get install etcd-server)")
	}
	if bin := apiserver.BinaryPath(repo); os.Getenv("KUBE_APISERVER") == "" {
		if _, err := os.Stat(bin); err != nil {
			if testing.Short() {
				skipOrFail(t, "no %s, and -short: not building it (make e2e-node builds it, or set KUBE_APISERVER)", bin)
			}
			t.Logf("building %s from test/node/go.mod (k8s.io/kubernetes v1.37.1): a few minutes the first time", bin)
			if err := apiserver.Build(repo); err != nil {
				skipOrFail(t, "%v", err)
			}
		}
	}
	etcd, kubeAPIServer, err := apiserver.Binaries(repo)
	if err != nil {
		skipOrFail(t, "%v", err)
	}
	dir := t.TempDir()
	s, err := apiserver.Start(context.Background(), dir, etcd, kubeAPIServer,
		apiserver.User{Token: gateToken, Name: gateUser, Groups: []string{"system:serviceaccounts"}},
		apiserver.User{Token: narrowToken, Name: narrowUser, Groups: []string{"system:serviceaccounts"}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(s.Logs())
		}
		s.Stop()
	})
	if err != nil {
		t.Fatal(err)
	}
	return &apiserverFixture{Server: s, dir: dir}
}

func (f *apiserverFixture) mustCall(t *testing.T, method, path, contentType string, body []byte) []byte {
	t.Helper()
	answer, err := f.Do(method, path, contentType, body)
	if err != nil {
		t.Fatal(err)
	}
	return answer
}

// client is a gate client that authenticates with token, and trusts the
// API server's own self-signed CA.
func (f *apiserverFixture) client(t *testing.T, token string) *Client {
	t.Helper()
	tokenFile := filepath.Join(f.dir, token)
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(ClientConfig{Host: f.URL, TokenFile: tokenFile, CAFile: f.CAFile, UserAgent: "nodegate-test"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// applyRBAC creates the objects of deploy/node-gate/rbac.yaml as they are,
// in the namespace default, and a narrower role for narrowUser.
func (f *apiserverFixture) applyRBAC(t *testing.T) {
	t.Helper()
	if err := f.ApplyRBAC("../../deploy/node-gate/rbac.yaml"); err != nil {
		t.Fatal(err)
	}
	f.mustCall(t, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/clusterroles", "application/json",
		[]byte(`{"metadata":{"name":"narrow"},"rules":[{"apiGroups":[""],"resources":["nodes"],"verbs":["get","patch"]}]}`))
	f.mustCall(t, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", "application/json",
		[]byte(`{"metadata":{"name":"narrow"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"narrow"},"subjects":[{"kind":"ServiceAccount","name":"narrow","namespace":"default"}]}`))
}

// node is what the tests read of a Node.
type node struct {
	Spec struct {
		Taints []taint `json:"taints"`
	} `json:"spec"`
	Status struct {
		Conditions []map[string]string `json:"conditions"`
	} `json:"status"`
}

func (f *apiserverFixture) node(t *testing.T, name string) node {
	t.Helper()
	var n node
	if err := json.Unmarshal(f.mustCall(t, http.MethodGet, "/api/v1/nodes/"+name, "", nil), &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n node) condition(typ string) map[string]string {
	for _, c := range n.Status.Conditions {
		if c["type"] == typ {
			return c
		}
	}
	return nil
}

// createNode creates a Node with taints and kubelet's Ready condition.
func (f *apiserverFixture) createNode(t *testing.T, name string, taints ...string) {
	t.Helper()
	if _, err := f.CreateNode(name, taints...); err != nil {
		t.Fatal(err)
	}
}

func TestAgainstKubeAPIServer(t *testing.T) {
	f := startAPIServer(t)
	f.applyRBAC(t)
	const driver = "test.csi.example.com"
	const startup = "test.csi.example.com/agent-not-ready"
	typ := driver + ConditionSuffix

	t.Run("taint and condition with deploy/node-gate's rules", func(t *testing.T) {
		f.createNode(t, "n1", "node.kubernetes.io/not-ready:NoSchedule", startup+":NoSchedule", "other:NoExecute", startup+":NoExecute")
		g := New(Config{NodeName: "n1", TaintKeys: []string{startup}, Condition: true, Client: f.client(t, gateToken),
			RetryInitial: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); g.Run(ctx) }()
		defer func() { cancel(); <-done }()

		g.Registered(driver)
		waitStatus(t, g, func(st Status) bool { return !st.Pending && st.Condition != nil && st.TaintsChecked != nil })
		n := f.node(t, "n1")
		var keys []string
		for _, tt := range n.Spec.Taints {
			keys = append(keys, tt.Key+":"+tt.Effect)
		}
		if strings.Join(keys, ",") != "node.kubernetes.io/not-ready:NoSchedule,other:NoExecute" {
			t.Errorf("taints after registration: %v", keys)
		}
		c := n.condition(typ)
		if c["status"] != "True" || c["reason"] != ReasonRegistered || c["lastTransitionTime"] == "" {
			t.Errorf("condition after registration: %v", c)
		}
		if r := n.condition("Ready"); r["status"] != "True" || r["reason"] != "KubeletReady" {
			t.Errorf("kubelet's Ready condition changed: %v", r)
		}

		g.Rejected(driver, "plugin test.csi.example.com: validation failed")
		waitStatus(t, g, func(st Status) bool { return !st.Pending && st.Condition.Status == "False" })
		c = f.node(t, "n1").condition(typ)
		if c["status"] != "False" || c["reason"] != ReasonRejected || c["message"] != "kubelet rejected the CSI driver test.csi.example.com: plugin test.csi.example.com: validation failed" {
			t.Errorf("condition after rejection: %v", c)
		}

		// Stopping: the socket removed, then the gate's context ends.
		g.Registered(driver)
		waitStatus(t, g, func(st Status) bool { return !st.Pending && st.Condition.Status == "True" })
		trueSince := f.node(t, "n1").condition(typ)["lastTransitionTime"]
		g.Registered(driver) // kubelet confirming again: no transition
		g.Withdrawn(driver)
		cancel()
		<-done
		c = f.node(t, "n1").condition(typ)
		if c["status"] != "False" || c["reason"] != ReasonUnregistered {
			t.Errorf("condition after the stop: %v", c)
		}
		if c["lastTransitionTime"] < trueSince {
			t.Errorf("lastTransitionTime went back: %s, was %s", c["lastTransitionTime"], trueSince)
		}
	})

	t.Run("the API server refuses a stale taint patch", func(t *testing.T) {
		f.createNode(t, "n2", startup+":NoSchedule", "b:NoSchedule")
		c := f.client(t, gateToken)
		stale, err := c.getTaints(context.Background(), "n2")
		if err != nil {
			t.Fatal(err)
		}
		// Another client removes the startup taint meanwhile: index 0 now
		// holds b.
		f.mustCall(t, http.MethodPatch, "/api/v1/nodes/n2", "application/json-patch+json", []byte(`[{"op":"remove","path":"/spec/taints/0"}]`))
		// (The TaintNodesByCondition admission plugin added
		// node.kubernetes.io/not-ready at the node's creation.)
		before := f.node(t, "n2").Spec.Taints
		patch, _ := taintRemovalPatch(stale, []string{startup})
		_, err = c.do(context.Background(), request{method: http.MethodPatch, path: nodePath("n2"), contentType: "application/json-patch+json",
			body: patch, verb: "patch", resource: "nodes", node: "n2"})
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.Code != http.StatusUnprocessableEntity {
			t.Fatalf("stale patch: %v, want a 422", err)
		}
		if after := f.node(t, "n2").Spec.Taints; len(after) != len(before) || len(after) == 0 || after[0].Key != "b" {
			t.Errorf("the stale patch changed the taints: %v, were %v", after, before)
		}
		// And the gate's own removal reads again and finds nothing to do.
		removed, err := c.removeTaints(context.Background(), "n2", []string{startup}, func(string, error) {})
		if err != nil || len(removed) != 0 {
			t.Errorf("removeTaints = %v, %v", removed, err)
		}
	})

	t.Run("a missing rule is named", func(t *testing.T) {
		f.createNode(t, "n3")
		g := New(Config{NodeName: "n3", Condition: true, Client: f.client(t, narrowToken), RetryInitial: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); g.Run(ctx) }()
		defer func() { cancel(); <-done }()
		g.Registered(driver)
		waitStatus(t, g, func(st Status) bool { return st.LastError != "" })
		st := g.Status()
		want := `forbidden: the registrar's service account may not patch nodes/status: its ClusterRole needs the rule {apiGroups: [""], resources: ["nodes/status"], verbs: ["patch"]} (deploy/node-gate has it); the API server said: nodes "n3" is forbidden: User "` + narrowUser + `" cannot patch resource "nodes/status" in API group "" at the cluster scope`
		if st.LastError != want || !st.Pending || st.Requests[RequestSetCondition]["403"] == 0 {
			t.Errorf("status:\n got %+v\nwant lastError %s", st, want)
		}
	})
}
