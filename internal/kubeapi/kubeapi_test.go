package kubeapi

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/removeall"
)

// These tests run the client against a local HTTPS server that answers as
// the API server does; pkg/features/nodegate and pkg/features/csinode run
// it against a real kube-apiserver.

var (
	node    = Object{Version: "v1", Resource: "nodes", Name: "n1", Kind: "node", Component: "deploy/node-gate"}
	csiNode = Object{Group: "storage.k8s.io", Version: "v1", Resource: "csinodes", Name: "n1", Kind: "CSINode", Component: "deploy/csinode"}
)

// server is a local HTTPS server with handler, and the configuration of a
// client of it with the token "token-1".
func server(t *testing.T, handler http.HandlerFunc) Config {
	t.Helper()
	srv := httptest.NewTLSServer(handler)
	t.Cleanup(srv.Close)
	removeall.Require(t)
	dir := t.TempDir()
	cfg := Config{Host: srv.URL, TokenFile: filepath.Join(dir, "token"), CAFile: filepath.Join(dir, "ca.crt"), UserAgent: "test"}
	if err := os.WriteFile(cfg.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	writeToken(t, cfg, "token-1")
	return cfg
}

func writeToken(t *testing.T, cfg Config, token string) {
	t.Helper()
	if err := os.WriteFile(cfg.TokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func client(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := NewClient(cfg)
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
	good := server(t, func(http.ResponseWriter, *http.Request) {})
	cfg := good
	cfg.CAFile += ".missing"
	if _, err := NewClient(cfg); err == nil || !strings.Contains(err.Error(), cfg.CAFile) || !strings.Contains(err.Error(), "automountServiceAccountToken") {
		t.Errorf("missing CA: %v", err)
	}
	cfg = good
	cfg.TokenFile += ".missing"
	if _, err := NewClient(cfg); err == nil || !strings.Contains(err.Error(), cfg.TokenFile) {
		t.Errorf("missing token: %v", err)
	}
}

// kubelet rotates a bound token in the file: after a 401 the client reads
// it again and repeats the request once.
func TestClientReadsTheRotatedTokenAfter401(t *testing.T) {
	answers := make(chan string, 2)
	cfg := server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer token-2" {
			answers <- r.Method + " " + r.URL.Path + " 401"
			status(w, http.StatusUnauthorized, "Unauthorized")
			return
		}
		answers <- r.Method + " " + r.URL.Path + " 200"
		fmt.Fprint(w, `{"metadata":{"name":"n1","uid":"u1"}}`)
	})
	c := client(t, cfg)
	writeToken(t, cfg, "token-2")
	var n struct {
		Metadata struct{ UID string } `json:"metadata"`
	}
	if err := c.Get(context.Background(), node, &n); err != nil || n.Metadata.UID != "u1" {
		t.Fatalf("Get = %+v, %v", n, err)
	}
	if got := <-answers + ", " + <-answers; got != "GET /api/v1/nodes/n1 401, GET /api/v1/nodes/n1 200" {
		t.Errorf("answers: %s", got)
	}
}

// Each error says what to fix: the RBAC rule that is missing, where the
// object's name comes from.
func TestErrorsSayWhatToFix(t *testing.T) {
	cfg := server(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/apis/storage.k8s.io/v1/csinodes/n1":
			status(w, http.StatusForbidden, `csinodes.storage.k8s.io "n1" is forbidden: User "u" cannot get resource "csinodes" in API group "storage.k8s.io" at the cluster scope`)
		case "/api/v1/nodes/n1/status":
			status(w, http.StatusServiceUnavailable, "etcd is away")
		default:
			status(w, http.StatusNotFound, `nodes "n1" not found`)
		}
	})
	c := client(t, cfg)
	ctx := context.Background()
	for _, tc := range []struct {
		object Object
		method string
		code   int
		want   string
	}{
		{csiNode, http.MethodGet, http.StatusForbidden, `forbidden: the registrar's service account may not get csinodes: its ClusterRole needs the rule {apiGroups: ["storage.k8s.io"], resources: ["csinodes"], verbs: ["get"]} (deploy/csinode has it); the API server said: csinodes.storage.k8s.io "n1" is forbidden: User "u" cannot get resource "csinodes" in API group "storage.k8s.io" at the cluster scope`},
		{node, http.MethodGet, http.StatusNotFound, `node "n1" not found: the registrar must be given its own node's name, from the downward API's spec.nodeName; the API server said: nodes "n1" not found`},
		{Object{Version: "v1", Resource: "nodes", Subresource: "status", Name: "n1", Kind: "node"}, http.MethodPatch, http.StatusServiceUnavailable, `patch nodes/status of node "n1": 503 Service Unavailable: etcd is away`},
	} {
		_, err := c.Do(ctx, tc.method, tc.object, "", "application/json", []byte("{}"))
		if Code(err) != tc.code || err.Error() != tc.want {
			t.Errorf("%s %s: code %d, error\n got %v\nwant %s", tc.method, tc.object.path(), Code(err), err, tc.want)
		}
	}
	if Code(errors.New("no answer")) != 0 {
		t.Error("Code of an error without an answer is not 0")
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

// A watch asks for one object by name from a resourceVersion, with
// bookmarks and the server's timeout, and reports its events in order;
// an ERROR event is an error with its Status's code.
func TestWatchStreamsEvents(t *testing.T) {
	queries := make(chan string, 1)
	cfg := server(t, func(w http.ResponseWriter, r *http.Request) {
		queries <- r.URL.Path + "?" + r.URL.RawQuery
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"type":"ADDED","object":{"metadata":{"name":"n1","resourceVersion":"11"}}}`)
		fmt.Fprintln(w, `{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"12"}}}`)
		fmt.Fprintln(w, `{"type":"DELETED","object":{"metadata":{"name":"n1","resourceVersion":"13"}}}`)
		fmt.Fprintln(w, `{"type":"ERROR","object":{"kind":"Status","status":"Failure","code":410,"reason":"Expired","message":"too old resource version: 13 (20)"}}`)
	})
	w, err := client(t, cfg).Watch(context.Background(), csiNode, "10", 450*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got, want := <-queries, "/apis/storage.k8s.io/v1/csinodes?allowWatchBookmarks=true&fieldSelector=metadata.name%3Dn1&resourceVersion=10&timeoutSeconds=450&watch=true"; got != want {
		t.Errorf("request\n got %s\nwant %s", got, want)
	}
	var types []string
	for {
		e, err := w.Next()
		if err != nil {
			if Code(err) != http.StatusGone || !strings.Contains(err.Error(), "too old resource version") {
				t.Errorf("the ERROR event: %v", err)
			}
			break
		}
		types = append(types, e.Type+" "+string(e.Object))
	}
	want := []string{
		`ADDED {"metadata":{"name":"n1","resourceVersion":"11"}}`,
		`BOOKMARK {"metadata":{"resourceVersion":"12"}}`,
		`DELETED {"metadata":{"name":"n1","resourceVersion":"13"}}`,
	}
	if strings.Join(types, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant\n%s", strings.Join(types, "\n"), strings.Join(want, "\n"))
	}
	if _, err := w.Next(); err != io.EOF {
		t.Errorf("after the server's end: %v, want io.EOF", err)
	}
}

// A watch refused at once (410 Gone, 403) is an *APIError; one without a
// resourceVersion starts from the current state.
func TestWatchRefused(t *testing.T) {
	cfg := server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("resourceVersion") {
			status(w, http.StatusGone, "too old resource version")
			return
		}
		status(w, http.StatusForbidden, "no")
	})
	c := client(t, cfg)
	if _, err := c.Watch(context.Background(), csiNode, "1", 300*time.Second); Code(err) != http.StatusGone {
		t.Errorf("from an old resourceVersion: %v", err)
	}
	if _, err := c.Watch(context.Background(), csiNode, "", 300*time.Second); Code(err) != http.StatusForbidden || !strings.Contains(err.Error(), `verbs: ["watch"]`) {
		t.Errorf("forbidden: %v", err)
	}
}

// The watch's context ends it: Next returns, and the server sees its
// client gone.
func TestWatchEndsWithItsContext(t *testing.T) {
	gone := make(chan struct{})
	cfg := server(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{"type":"ADDED","object":{}}`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(gone)
	})
	ctx, cancel := context.WithCancel(context.Background())
	w, err := client(t, cfg).Watch(ctx, csiNode, "", 300*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if e, err := w.Next(); err != nil || e.Type != Added {
		t.Fatalf("first event %+v, %v", e, err)
	}
	cancel()
	if _, err := w.Next(); err == nil {
		t.Error("Next after the context's end: no error")
	}
	<-gone
}

// Requests counts by name and outcome, and a clone is a snapshot: counting
// on after it changes the original only.
func TestRequestsCountAndClone(t *testing.T) {
	r := Requests{}
	r.Add("get", nil)
	r.Add("get", nil)
	r.Add("get", &APIError{Code: http.StatusForbidden})
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
