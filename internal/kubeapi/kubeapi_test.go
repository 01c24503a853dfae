package kubeapi

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/csi-registrar/node-driver-registrar/test/removeall"
)

// These tests run the client against a local HTTPS server that answers as
// the API server does; pkg/features/nodegate and pkg/features/csinode run
// it against a real kube-apiserver.

var (
	node    = Object{Resource: "nodes", Name: "n1", Kind: "node", Component: "deploy/node-gate"}
	csiNode = Object{Group: "storage.k8s.io", Resource: "csinodes", Name: "n1", Kind: "CSINode", Component: "deploy/csinode"}
)

// server is a local HTTPS server with handler, and a client of it.
func server(t *testing.T, handler http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewTLSServer(handler)
	t.Cleanup(srv.Close)
	removeall.Require(t)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(&rest.Config{Host: srv.URL, BearerToken: "token", TLSClientConfig: rest.TLSClientConfig{CAFile: ca}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// status writes the API server's Status answer.
func status(w http.ResponseWriter, code int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":%d,"message":%q}`, code, message)
}

// The configuration comes from a kubeconfig when one is given, or else
// from the pod; either's absence says what to give.
func TestConfig(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := Config("", "ua"); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("outside a pod: %v, want the environment and --kubeconfig named", err)
	}
	removeall.Require(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	if _, err := Config(missing, "ua"); err == nil || !strings.Contains(err.Error(), `--kubeconfig="`+missing+`"`) || !strings.Contains(err.Error(), "give a readable kubeconfig") {
		t.Errorf("missing kubeconfig: %v", err)
	}
	file := filepath.Join(dir, "kubeconfig")
	kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://api.example.com:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(file, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Config(file, "ua")
	if err != nil || cfg.Host != "https://api.example.com:6443" || cfg.BearerToken != "t" || cfg.UserAgent != "ua" {
		t.Errorf("Config(%s) = %+v, %v", file, cfg, err)
	}
}

// Each error says what to fix: the RBAC rule that is missing, where the
// object's name comes from.
func TestErrorsSayWhatToFix(t *testing.T) {
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/apis/storage.k8s.io/v1/csinodes/n1":
			status(w, http.StatusForbidden, `csinodes.storage.k8s.io "n1" is forbidden: User "u" cannot get resource "csinodes" in API group "storage.k8s.io" at the cluster scope`)
		case "/api/v1/nodes/n1/status":
			status(w, http.StatusServiceUnavailable, "etcd is away")
		default:
			status(w, http.StatusNotFound, `nodes "n1" not found`)
		}
	})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		send func() error
		code int
		want string
	}{
		{"get csinodes", func() error { _, err := c.Get(ctx, csiNode); return err }, http.StatusForbidden,
			`forbidden: the registrar's service account may not get csinodes: its ClusterRole needs the rule {apiGroups: ["storage.k8s.io"], resources: ["csinodes"], verbs: ["get"]} (deploy/csinode has it); the API server said: csinodes.storage.k8s.io "n1" is forbidden: User "u" cannot get resource "csinodes" in API group "storage.k8s.io" at the cluster scope`},
		{"get nodes", func() error { _, err := c.Get(ctx, node); return err }, http.StatusNotFound,
			`node "n1" not found: the registrar must be given its own node's name, from the downward API's spec.nodeName; the API server said: nodes "n1" not found`},
		{"patch nodes/status", func() error {
			return c.Patch(ctx, Object{Resource: "nodes", Subresource: "status", Name: "n1", Kind: "node"}, types.StrategicMergePatchType, []byte("{}"), metav1.PatchOptions{})
		}, http.StatusServiceUnavailable, `patch nodes/status of node "n1": 503 Service Unavailable: etcd is away`},
	} {
		err := tc.send()
		if codeLabel(err) != fmt.Sprint(tc.code) || err.Error() != tc.want {
			t.Errorf("%s: code %s, error\n got %v\nwant %s", tc.name, codeLabel(err), err, tc.want)
		}
	}
	if codeLabel(errors.New("no answer")) != "error" || codeLabel(nil) != "200" {
		t.Error("an error without an answer has a code")
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
			b := node
			b.Name = "b"
			err := &APIError{Code: http.StatusForbidden, Verb: "patch", Object: b, Message: tc.message, Policy: policy, PolicyMessage: said}
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

// Requests counts by name and outcome, and a clone is a snapshot: counting
// on after it changes the original only.
func TestRequestsCountAndClone(t *testing.T) {
	r := Requests{}
	r.Add("get", nil)
	r.Add("get", nil)
	r.Add("get", Error("get", Object{Resource: "nodes", Name: "n"}, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n", errors.New("no rule"))))
	r.Add("watch", errors.New("connection refused"))
	snapshot := r.Clone()
	r.Add("get", nil)
	want := map[string]map[string]uint64{"get": {"200": 2, "403": 1}, "watch": {"error": 1}}
	if fmt.Sprint(map[string]map[string]uint64(snapshot)) != fmt.Sprint(want) {
		t.Errorf("snapshot %v, want %v", snapshot, want)
	}
	if r["get"]["200"] != 3 {
		t.Errorf("counted on after the snapshot: %v, want 3 answers 200 to get", r)
	}
}
