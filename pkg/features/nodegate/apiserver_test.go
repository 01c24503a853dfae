//go:build apiserver

package nodegate

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-registrar/node-driver-registrar/internal/kubeapi"
	"github.com/csi-registrar/node-driver-registrar/test/apiserver"
	"github.com/csi-registrar/node-driver-registrar/test/poll"
	"github.com/csi-registrar/node-driver-registrar/test/removeall"
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

func startAPIServer(t testing.TB) *apiserverFixture {
	t.Helper()
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	s := apiserver.StartForTest(t, repo,
		apiserver.User{Token: gateToken, Name: gateUser, Groups: []string{"system:serviceaccounts"}},
		apiserver.User{Token: narrowToken, Name: narrowUser, Groups: []string{"system:serviceaccounts"}})
	removeall.Require(t)
	return &apiserverFixture{Server: s, dir: t.TempDir()}
}

func (f *apiserverFixture) mustCall(t testing.TB, method, path, contentType string, body []byte) []byte {
	t.Helper()
	answer, err := f.Do(method, path, contentType, body)
	if err != nil {
		t.Fatal(err)
	}
	return answer
}

// client is a gate client that authenticates with token, and trusts the
// API server's own self-signed CA.
func (f *apiserverFixture) client(t testing.TB, token string) *kubeapi.Client {
	return f.ClientForTest(t, token)
}

// applyRBAC creates the objects of deploy/node-gate/rbac.yaml as they are,
// in the namespace default, and a narrower role for narrowUser.
func (f *apiserverFixture) applyRBAC(t testing.TB) {
	t.Helper()
	if err := f.ApplyRBAC("../../../deploy/node-gate/rbac.yaml"); err != nil {
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

func (f *apiserverFixture) node(t testing.TB, name string) node {
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

// runGate runs g until stop, which waits for Run to return; stop may be
// called again.
func runGate(g *Gate) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	return func() { cancel(); <-done }
}

// createNode creates a Node with taints and kubelet's Ready condition.
func (f *apiserverFixture) createNode(t testing.TB, name string, taints ...string) {
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
		g := New(Config{NodeName: "n1", TaintKeys: []string{startup}, Condition: true, Client: f.client(t, gateToken)})
		stop := runGate(g)
		defer stop()

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
		stop()
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
		stale, err := getTaints(context.Background(), c, "n2")
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
		err = c.Patch(context.Background(), nodeObject("n2", ""), types.JSONPatchType, patch, metav1.PatchOptions{})
		var apiErr *kubeapi.APIError
		if !errors.As(err, &apiErr) || apiErr.Code != http.StatusUnprocessableEntity {
			t.Fatalf("stale patch: %v, want a 422", err)
		}
		if after := f.node(t, "n2").Spec.Taints; len(after) != len(before) || len(after) == 0 || after[0].Key != "b" {
			t.Errorf("the stale patch changed the taints: %v, were %v", after, before)
		}
		// And the gate's own removal reads again and finds nothing to do.
		removed, err := removeTaints(context.Background(), c, "n2", []string{startup}, func(string, error) {})
		if err != nil || len(removed) != 0 {
			t.Errorf("removeTaints = %v, %v", removed, err)
		}
	})

	t.Run("a missing rule is named", func(t *testing.T) {
		f.createNode(t, "n3")
		g := New(Config{NodeName: "n3", Condition: true, Client: f.client(t, narrowToken)})
		stop := runGate(g)
		defer stop()
		g.Registered(driver)
		waitStatus(t, g, func(st Status) bool { return st.LastError != "" })
		st := g.Status()
		want := `forbidden: the registrar's service account may not patch nodes/status: its ClusterRole needs the rule {apiGroups: [""], resources: ["nodes/status"], verbs: ["patch"]} (deploy/node-gate has it); the API server said: nodes "n3" is forbidden: User "` + narrowUser + `" cannot patch resource "nodes/status" in API group "" at the cluster scope`
		if st.LastError != want || !st.Pending || st.Requests[RequestSetCondition]["403"] == 0 {
			t.Errorf("status:\n got %+v\nwant lastError %s", st, want)
		}
	})

	t.Run("a condition type of its own", func(t *testing.T) {
		f.createNode(t, "n4")
		const custom = "node.gke.io/PDCSIReady"
		g := New(Config{NodeName: "n4", Condition: true, ConditionType: custom, Client: f.client(t, gateToken)})
		stop := runGate(g)
		defer stop()
		g.Registered(driver)
		waitStatus(t, g, func(st Status) bool { return !st.Pending && st.Condition != nil })
		n := f.node(t, "n4")
		if c := n.condition(custom); c["status"] != "True" || c["reason"] != ReasonRegistered || c["lastTransitionTime"] == "" {
			t.Errorf("condition %s after registration: %v", custom, c)
		}
		if c := n.condition(typ); c != nil {
			t.Errorf("the default condition was set too: %v", c)
		}
		g.Withdrawn(driver)
		stop()
		if c := f.node(t, "n4").condition(custom); c["status"] != "False" || c["reason"] != ReasonUnregistered {
			t.Errorf("condition %s after the stop: %v", custom, c)
		}
	})

	// Last: the policy applies to the static user of gateToken too, which
	// has the service account's name but no node.
	t.Run("deploy/node-gate's policy", func(t *testing.T) { testPolicy(t, f) })
}

// The policy's own names: deploy/node-gate/policy.yaml as it is, with its
// example driver and taint key.
const (
	policyName    = "csi-node-gate"
	policyDriver  = "my-driver.csi.example.com"
	policyStartup = "my-driver.csi.example.com/agent-not-ready"
	// otherTaint is on the registrar's node too, with a key the policy
	// does not name.
	otherTaint = "example.com/maintenance"
)

// tokenClient is a gate client with a token from the TokenRequest API for
// the service account csi-node: bound to pod, which runs on a node, as the
// token kubelet mounts in the registrar's pod; bound to nothing when pod
// is "".
func (f *apiserverFixture) tokenClient(t testing.TB, pod string) *kubeapi.Client {
	t.Helper()
	token, err := f.Token("csi-node", pod)
	if err != nil {
		t.Fatal(err)
	}
	return f.client(t, token)
}

// refusal is the policy's refusal of a request, or a failure.
func policyRefusal(t *testing.T, err error) *kubeapi.APIError {
	t.Helper()
	var apiErr *kubeapi.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != http.StatusForbidden || apiErr.Policy != policyName {
		t.Fatalf("got %v, want a 403 from the ValidatingAdmissionPolicy %s", err, policyName)
	}
	return apiErr
}

// patch sends a patch of the node, or of its subresource, as the gate's
// client sends its own.
func patch(c *kubeapi.Client, node, subresource string, pt types.PatchType, body string) error {
	return c.Patch(context.Background(), nodeObject(node, subresource), pt, []byte(body), metav1.PatchOptions{})
}

// dryRun is patch as a dry run.
func dryRun(c *kubeapi.Client, node, subresource string, pt types.PatchType, body string) error {
	return c.Patch(context.Background(), nodeObject(node, subresource), pt, []byte(body), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
}

// setUpPolicy creates deploy/node-gate's policy, the nodes own and other,
// each with a pod of the service account csi-node, and returns the client
// of the pod on own once the API server enforces the policy.
func (f *apiserverFixture) setUpPolicy(t testing.TB) *kubeapi.Client {
	t.Helper()
	if err := f.ApplyPolicy("../../../deploy/node-gate/policy.yaml"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []struct{ node, pod string }{{"own", "registrar-own"}, {"other", "registrar-other"}} {
		f.createNode(t, n.node, policyStartup+":NoSchedule", otherTaint+":NoSchedule")
		if err := f.CreatePod(n.pod, n.node, "csi-node"); err != nil {
			t.Fatal(err)
		}
	}
	own := f.tokenClient(t, "registrar-own")
	// The API server enforces the policy once its informer has it: until a
	// dry run that it refuses is refused.
	poll.Until(t, "the policy refuses another node's label (dry run)", func() bool {
		err := dryRun(own, "other", "", types.MergePatchType, `{"metadata":{"labels":{"probe":"x"}}}`)
		var apiErr *kubeapi.APIError
		return errors.As(err, &apiErr) && apiErr.Policy == policyName
	})
	return own
}

// testPolicy runs the gate, and other requests, as the service account of
// deploy/node-gate with tokens bound to pods on nodes, under the policy of
// deploy/node-gate.
func testPolicy(t *testing.T, f *apiserverFixture) {
	own := f.setUpPolicy(t)

	t.Run("the own node's taint and condition pass", func(t *testing.T) {
		g := New(Config{NodeName: "own", TaintKeys: []string{policyStartup}, Condition: true, Client: own})
		stop := runGate(g)
		defer stop()
		typ := policyDriver + ConditionSuffix

		// The condition's first set, and the taint's removal with its test
		// operations.
		g.Registered(policyDriver)
		waitStatus(t, g, func(st Status) bool { return !st.Pending && st.Condition != nil && st.TaintsChecked != nil })
		n := f.node(t, "own")
		var taints []string
		for _, tt := range n.Spec.Taints {
			taints = append(taints, tt.Key)
		}
		slices.Sort(taints)
		if !slices.Equal(taints, []string{otherTaint, "node.kubernetes.io/not-ready"}) {
			t.Errorf("taints after registration: %v", taints)
		}
		if c := n.condition(typ); c["status"] != "True" {
			t.Errorf("condition after registration: %v", c)
		}
		// An update.
		g.Rejected(policyDriver, "validation failed")
		waitStatus(t, g, func(st Status) bool { return !st.Pending && st.Condition.Status == "False" })
		// False on the way out.
		g.Registered(policyDriver)
		waitStatus(t, g, func(st Status) bool { return !st.Pending && st.Condition.Status == "True" })
		g.Withdrawn(policyDriver)
		stop()
		if c := f.node(t, "own").condition(typ); c["status"] != "False" || c["reason"] != ReasonUnregistered {
			t.Errorf("condition after the stop: %v", c)
		}
		// No refusal ("error" is a request that the stop cut short, made
		// again before the exit).
		st := g.Status()
		for request, codes := range st.Requests {
			for code := range codes {
				if code != "200" && code != "error" {
					t.Errorf("%s answered %s: %+v", request, code, st)
				}
			}
		}
	})

	t.Run("everything else is refused", func(t *testing.T) {
		ownTaints, err := getTaints(context.Background(), own, "own")
		if err != nil {
			t.Fatal(err)
		}
		removeOther, _ := taintRemovalPatch(ownTaints, []string{otherTaint})
		unbound := f.tokenClient(t, "")
		for _, tc := range []struct {
			name string
			send func() error
			want string
		}{
			{"another node's taint", func() error {
				_, err := removeTaints(context.Background(), own, "other", []string{policyStartup}, func(string, error) {})
				return err
			}, "a registrar on node own may change only that Node, not node other"},
			{"another node's condition", func() error {
				p := conditionPatch(Condition{Type: policyDriver + ConditionSuffix, Status: "True", Reason: ReasonRegistered}, time.Now(), time.Now())
				return setCondition(context.Background(), own, "other", p)
			}, "a registrar on node own may change only that Node, not node other"},
			{"a label", func() error {
				return patch(own, "own", "", types.MergePatchType, `{"metadata":{"labels":{"example.com/x":"y"}}}`)
			}, "the node gate may not change the labels, annotations, finalizers or owner references of node own"},
			{"a label through nodes/status", func() error {
				return patch(own, "own", "status", types.MergePatchType, `{"metadata":{"labels":{"example.com/x":"y"}}}`)
			}, "the node gate may not change the labels, annotations, finalizers or owner references of node own"},
			{"another taint of the own node", func() error {
				return patch(own, "own", "", types.JSONPatchType, string(removeOther))
			}, "the node gate may remove only the taints " + policyStartup + " from node own, not " + otherTaint + ":NoSchedule"},
			{"a new taint", func() error {
				return patch(own, "own", "", types.JSONPatchType, `[{"op":"add","path":"/spec/taints/-","value":{"key":"example.com/new","effect":"NoSchedule"}}]`)
			}, "the node gate may only remove taints from node own, not add or change example.com/new:NoSchedule"},
			{"a cordon", func() error {
				return patch(own, "own", "", types.MergePatchType, `{"spec":{"unschedulable":true}}`)
			}, "the node gate may change only the taints in the spec of node own, not unschedulable (cordon), podCIDR(s), providerID or another field"},
			{"another condition", func() error {
				p := conditionPatch(Condition{Type: "Ready", Status: "False", Reason: "KubeletNotReady"}, time.Now(), time.Now())
				return setCondition(context.Background(), own, "own", p)
			}, "the node gate may set only the condition " + policyDriver + ConditionSuffix + " of node own, not Ready"},
			{"another field of the status", func() error {
				return patch(own, "own", "status", types.MergePatchType, `{"status":{"capacity":{"example.com/device":"1"}}}`)
			}, "the node gate may change only the condition " + policyDriver + ConditionSuffix + " in the status of node own"},
			{"a token bound to no pod", func() error {
				p := conditionPatch(Condition{Type: policyDriver + ConditionSuffix, Status: "True", Reason: ReasonRegistered}, time.Now(), time.Now())
				return setCondition(context.Background(), unbound, "own", p)
			}, "the node gate changes a Node only with a token bound to a pod on that node, as kubelet mounts it in the pod; this token (of system:serviceaccount:default:csi-node) names no node: a token from kubectl create token or from a Secret may change no Node"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				apiErr := policyRefusal(t, tc.send())
				if apiErr.PolicyMessage != tc.want {
					t.Errorf("the policy said:\n%s\nwant:\n%s", apiErr.PolicyMessage, tc.want)
				}
				if msg := apiErr.Error(); !strings.Contains(msg, "refused by the ValidatingAdmissionPolicy "+policyName+": "+tc.want) {
					t.Errorf("the error does not name the policy and its reason: %s", msg)
				}
			})
		}
		// None of it changed the node.
		n := f.node(t, "own")
		if !slices.ContainsFunc(n.Spec.Taints, func(tt taint) bool { return tt.Key == otherTaint }) || slices.ContainsFunc(n.Spec.Taints, func(tt taint) bool { return tt.Key == "example.com/new" }) {
			t.Errorf("the own node's taints changed: %v", n.Spec.Taints)
		}
		if r := n.condition("Ready"); r["status"] != "True" {
			t.Errorf("kubelet's Ready condition changed: %v", r)
		}
	})

	t.Run("the gate's status and log name the policy", func(t *testing.T) {
		// The gate of node own, with the token of a pod on node other.
		g := New(Config{NodeName: "own", Condition: true, Client: f.tokenClient(t, "registrar-other")})
		stop := runGate(g)
		defer stop()
		g.Registered(policyDriver)
		waitStatus(t, g, func(st Status) bool { return st.LastError != "" })
		want := `patch nodes/status of node "own" refused by the ValidatingAdmissionPolicy csi-node-gate: a registrar on node other may change only that Node, not node own (`
		if st := g.Status(); !strings.HasPrefix(st.LastError, want) || st.Requests[RequestSetCondition]["403"] == 0 {
			t.Errorf("status:\n got %+v\nwant lastError starting %s", st, want)
		}
	})

	// Last: it replaces the policy.
	t.Run("a condition type of its own set in the policy", func(t *testing.T) { testPolicyConditionType(t, f, own) })

	t.Run("other service accounts are left alone", func(t *testing.T) {
		// One with the rule of deploy/node-gate but not its mark (the
		// static user of narrowToken), one bound to cluster-admin, whose
		// wildcard also grants the mark.
		f.mustCall(t, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", "application/json", []byte(`{"metadata":{"name":"admin"}}`))
		f.mustCall(t, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", "application/json",
			[]byte(`{"metadata":{"name":"admin-sa"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},"subjects":[{"kind":"ServiceAccount","name":"admin","namespace":"default"}]}`))
		adminToken, err := f.Token("admin", "")
		if err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]*kubeapi.Client{"narrow": f.client(t, narrowToken), "admin": f.client(t, adminToken)} {
			if err := dryRun(c, "other", "", types.MergePatchType, `{"metadata":{"labels":{"example.com/x":"y"}}}`); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	})
}

// testPolicyConditionType replaces deploy/node-gate's policy with the same
// policy whose conditionType is set as its comment says for
// --node-condition-type: the gate's condition of that type passes, the
// default type is refused.
func testPolicyConditionType(t *testing.T, f *apiserverFixture, own *kubeapi.Client) {
	const custom = "node.gke.io/PDCSIReady"
	data, err := os.ReadFile("../../../deploy/node-gate/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const defaultType = `expression: "variables.driverName + '/NodePluginRegistered'"`
	if strings.Count(string(data), defaultType) != 1 {
		t.Fatalf("deploy/node-gate/policy.yaml has no variable conditionType with %s", defaultType)
	}
	file := filepath.Join(f.dir, "policy-custom-type.yaml")
	if err := os.WriteFile(file, []byte(strings.Replace(string(data), defaultType, `expression: "'`+custom+`'"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	f.mustCall(t, http.MethodDelete, "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/"+policyName, "", nil)
	f.mustCall(t, http.MethodDelete, "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/"+policyName, "", nil)
	if err := f.ApplyPolicy(file); err != nil {
		t.Fatal(err)
	}
	setDefault := func(send func(*kubeapi.Client, string, string, types.PatchType, string) error) error {
		p := conditionPatch(Condition{Type: policyDriver + ConditionSuffix, Status: "True", Reason: ReasonRegistered}, time.Now(), time.Now())
		return send(own, "own", "status", types.StrategicMergePatchType, string(p))
	}
	poll.Until(t, "the replaced policy refuses the default condition type (dry run)", func() bool {
		var apiErr *kubeapi.APIError
		return errors.As(setDefault(dryRun), &apiErr) && apiErr.Policy == policyName
	})

	g := New(Config{NodeName: "own", Condition: true, ConditionType: custom, Client: own})
	stop := runGate(g)
	defer stop()
	g.Registered(policyDriver)
	waitStatus(t, g, func(st Status) bool { return !st.Pending && st.Condition != nil || st.LastError != "" })
	if st := g.Status(); st.Pending || st.LastError != "" {
		t.Fatalf("the gate's condition %s under the policy: %+v", custom, st)
	}
	if c := f.node(t, "own").condition(custom); c["status"] != "True" {
		t.Errorf("condition %s: %v", custom, c)
	}
	apiErr := policyRefusal(t, setDefault(patch))
	if want := "the node gate may set only the condition " + custom + " of node own, not " + policyDriver + ConditionSuffix; apiErr.PolicyMessage != want {
		t.Errorf("the policy said:\n%s\nwant:\n%s", apiErr.PolicyMessage, want)
	}
}

// What the policy costs the API server: one patch of nodes/status that
// sets the gate's condition (True and False in turn, so that each is a
// change), over a kept connection, by three requesters. A user that is no
// service account (kubelets, people) skips the policy at its first test;
// a service account with the same rules but not the mark costs the
// policy two authorizer checks; the registrar's, with a token bound to a
// pod on the node, runs every check.
func BenchmarkConditionPatchUnderPolicy(b *testing.B) {
	repo, err := filepath.Abs("../../..")
	if err != nil {
		b.Fatal(err)
	}
	removeall.Require(b)
	f := &apiserverFixture{Server: apiserver.StartForTest(b, repo), dir: b.TempDir()}
	if err := f.ApplyRBAC("../../../deploy/node-gate/rbac.yaml"); err != nil {
		b.Fatal(err)
	}
	own := f.setUpPolicy(b)
	// The same rules as deploy/node-gate's ClusterRole, without the mark.
	f.mustCall(b, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", "application/json", []byte(`{"metadata":{"name":"unmarked"}}`))
	f.mustCall(b, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/clusterroles", "application/json",
		[]byte(`{"metadata":{"name":"unmarked"},"rules":[{"apiGroups":[""],"resources":["nodes"],"verbs":["get","patch"]},{"apiGroups":[""],"resources":["nodes/status"],"verbs":["patch"]}]}`))
	f.mustCall(b, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", "application/json",
		[]byte(`{"metadata":{"name":"unmarked"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"unmarked"},"subjects":[{"kind":"ServiceAccount","name":"unmarked","namespace":"default"}]}`))
	if err := f.CreatePod("unmarked-own", "own", "unmarked"); err != nil {
		b.Fatal(err)
	}
	unmarkedToken, err := f.Token("unmarked", "unmarked-own")
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range []struct {
		name   string
		client *kubeapi.Client
	}{
		{"user", f.client(b, apiserver.AdminToken)},
		{"unmarked-service-account", f.client(b, unmarkedToken)},
		{"registrar", own},
	} {
		b.Run(r.name, func(b *testing.B) {
			patches := make([][]byte, 2)
			for i, status := range []string{"True", "False"} {
				patches[i] = conditionPatch(Condition{Type: policyDriver + ConditionSuffix, Status: status, Reason: ReasonRegistered}, time.Now(), time.Now())
			}
			// One outside the timing: the connection's TLS handshake.
			if err := setCondition(context.Background(), r.client, "own", patches[1]); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				if err := setCondition(context.Background(), r.client, "own", patches[i%2]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
