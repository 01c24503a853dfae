package nodegate

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/csi-registrar/node-driver-registrar/internal/kubeapi"
	"github.com/csi-registrar/node-driver-registrar/test/removeall"
)

// fakeAPI is a local HTTPS server that answers the gate's three requests
// for one node as the API server does (the real one is in
// apiserver_test.go): bearer token, GET of the node, JSON patch of its
// taints with test operations, strategic merge of its conditions by type.
type fakeAPI struct {
	t    testing.TB
	srv  *httptest.Server
	cfg  *rest.Config
	node string
	// requests receives "METHOD path code" after each answer.
	requests chan string

	mu         sync.Mutex
	token      string
	taints     []taint
	conditions map[string]map[string]any
	// failures are the codes of the next answers, before any handling.
	failures []int
	// forbidden lists "verb resource" pairs answered 403.
	forbidden map[string]bool
	// hold, when set, holds every request until it is closed.
	hold chan struct{}
	// beforePatch, when set, runs once before the next JSON patch of the
	// taints is applied: another client's change in between.
	beforePatch func()
}

func newFakeAPI(t testing.TB, node string, taints ...taint) *fakeAPI {
	f := &fakeAPI{t: t, node: node, requests: make(chan string, 100), token: "token-1", taints: taints,
		conditions: map[string]map[string]any{}, forbidden: map[string]bool{}}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	removeall.Require(t) // the token and CA files
	dir := t.TempDir()
	// No rate limit: the tests and the benchmark time the gate.
	f.cfg = &rest.Config{Host: f.srv.URL, BearerTokenFile: filepath.Join(dir, "token"), QPS: -1,
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(dir, "ca.crt")}, UserAgent: "test"}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	if err := os.WriteFile(f.cfg.CAFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	f.writeToken("token-1")
	return f
}

func (f *fakeAPI) writeToken(token string) {
	if err := os.WriteFile(f.cfg.BearerTokenFile, []byte(token+"\n"), 0o600); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeAPI) client() *kubeapi.Client {
	c, err := kubeapi.NewClient(f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// next waits for the next answer, for at most 10 s.
func (f *fakeAPI) next() string {
	f.t.Helper()
	select {
	case r := <-f.requests:
		return r
	case <-time.After(10 * time.Second):
		f.t.Fatal("no request to the API server in 10 s")
		return ""
	}
}

func (f *fakeAPI) fail(codes ...int) {
	f.mu.Lock()
	f.failures = append(f.failures, codes...)
	f.mu.Unlock()
}

func (f *fakeAPI) currentTaints() []taint {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]taint(nil), f.taints...)
}

func (f *fakeAPI) condition(typ string) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conditions[typ]
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	code, body := f.answer(r)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
	f.requests <- fmt.Sprintf("%s %s %d", r.Method, r.URL.Path, code)
}

func status(code int, reason, message string) (int, []byte) {
	b, _ := json.Marshal(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message})
	return code, b
}

func (f *fakeAPI) answer(r *http.Request) (int, []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		return status(http.StatusUnauthorized, "Unauthorized", "Unauthorized")
	}
	if len(f.failures) > 0 {
		code := f.failures[0]
		f.failures = f.failures[1:]
		return status(code, http.StatusText(code), "injected failure")
	}
	base := "/api/v1/nodes/" + f.node
	verb := map[string]string{http.MethodGet: "get", http.MethodPatch: "patch"}[r.Method]
	resource := "nodes"
	if r.URL.Path == base+"/status" {
		resource = "nodes/status"
	}
	if f.forbidden[verb+" "+resource] {
		return status(http.StatusForbidden, "Forbidden", fmt.Sprintf(`nodes %q is forbidden: User "system:serviceaccount:kube-system:csi" cannot %s resource %q in API group "" at the cluster scope`, f.node, verb, resource))
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == base:
		b, _ := json.Marshal(map[string]any{"kind": "Node", "metadata": map[string]any{"name": f.node}, "spec": map[string]any{"taints": f.taints}})
		return http.StatusOK, b
	case r.Method == http.MethodPatch && r.URL.Path == base && r.Header.Get("Content-Type") == "application/json-patch+json":
		var ops []jsonPatchOp
		if err := json.NewDecoder(r.Body).Decode(&ops); err != nil {
			return status(http.StatusBadRequest, "BadRequest", err.Error())
		}
		if f.beforePatch != nil {
			f.beforePatch()
			f.beforePatch = nil
		}
		taints := append([]taint(nil), f.taints...)
		for _, op := range ops {
			i, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(op.Path, "/spec/taints/"), "/key"))
			if err != nil || i >= len(taints) {
				return status(http.StatusUnprocessableEntity, "Invalid", "bad path "+op.Path)
			}
			switch op.Op {
			case "test":
				if taints[i].Key != op.Value {
					return status(http.StatusUnprocessableEntity, "Invalid", "testing value "+op.Path+" failed")
				}
			case "remove":
				taints = append(taints[:i], taints[i+1:]...)
			}
		}
		f.taints = taints
		return http.StatusOK, []byte(`{"kind":"Node"}`)
	case r.Method == http.MethodPatch && resource == "nodes/status" && r.Header.Get("Content-Type") == "application/strategic-merge-patch+json":
		var patch struct {
			Status struct {
				Conditions []map[string]any `json:"conditions"`
			} `json:"status"`
		}
		if err := json.NewDecoder(r.Body).Decode(&patch); err != nil {
			return status(http.StatusBadRequest, "BadRequest", err.Error())
		}
		for _, c := range patch.Status.Conditions {
			typ, _ := c["type"].(string)
			merged := f.conditions[typ]
			if merged == nil {
				merged = map[string]any{}
			}
			for k, v := range c {
				merged[k] = v
			}
			f.conditions[typ] = merged
		}
		return http.StatusOK, []byte(`{"kind":"Node"}`)
	}
	return status(http.StatusNotFound, "NotFound", fmt.Sprintf("%s %s: not found", r.Method, r.URL.Path))
}
