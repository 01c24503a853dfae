package nodegate

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// This file runs the gate against a real kube-apiserver (v1.37.1, built
// from test/node's go.mod as make e2e-node builds it) on a real etcd
// (Debian's etcd-server), with RBAC and the rules of deploy/node-gate.
// Without them the tests are skipped, saying why; with CI set they fail.

// apiserverFixture is a running etcd and kube-apiserver.
type apiserverFixture struct {
	url    string
	caFile string
	dir    string
	admin  *http.Client
}

const (
	adminToken = "admin-token"
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

// kubeAPIServer returns $KUBE_APISERVER, or test/node/_bin/kube-apiserver,
// building it there as make e2e-node does when it is missing.
func kubeAPIServer(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("KUBE_APISERVER"); p != "" {
		return p
	}
	module, err := filepath.Abs("../../test/node")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(module, "_bin", "kube-apiserver")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if testing.Short() {
		skipOrFail(t, "no %s, and -short: not building it (make e2e-node builds it, or set KUBE_APISERVER)", bin)
	}
	t.Logf("building %s from test/node/go.mod (k8s.io/kubernetes v1.37.1): a few minutes the first time", bin)
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "k8s.io/kubernetes/cmd/kube-apiserver")
	cmd.Dir = module
	// As hack/e2e-node.sh builds it: one build cache entry for both.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		skipOrFail(t, "building kube-apiserver failed: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startProcess runs a command until the test ends, its output in a log
// file that the test prints if it fails.
func startProcess(t *testing.T, dir, name string, args ...string) <-chan error {
	t.Helper()
	logPath := filepath.Join(dir, filepath.Base(name)+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logFile.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			if out, err := os.ReadFile(logPath); err == nil {
				t.Logf("%s's log (last 3000 bytes):\n%s", name, out[max(0, len(out)-3000):])
			}
		}
	})
	return exited
}

// waitUntil polls ready every 200 ms for at most a while, failing if the
// process exits.
func waitUntil(t *testing.T, what string, limit time.Duration, exited <-chan error, ready func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ready() {
		select {
		case err := <-exited:
			t.Fatalf("%s: the process exited: %v", what, err)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
	}
}

func startAPIServer(t *testing.T) *apiserverFixture {
	t.Helper()
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		skipOrFail(t, "no etcd on PATH (apt-get install etcd-server)")
	}
	apiserver := kubeAPIServer(t)
	dir := t.TempDir()
	clientPort, peerPort, securePort := freePort(t), freePort(t), freePort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	etcdExited := startProcess(t, dir, etcd, "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", peerPort), "--name", "default")
	plain := &http.Client{Timeout: 2 * time.Second}
	waitUntil(t, "etcd healthy", time.Minute, etcdExited, func() bool {
		resp, err := plain.Get(etcdURL + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	tokens := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n%s,%s,gate,\"system:serviceaccounts\"\n%s,%s,narrow,\"system:serviceaccounts\"\n",
		adminToken, gateToken, gateUser, narrowToken, narrowUser)
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(dir, "certs")
	if err := writeRSAKey(filepath.Join(dir, "sa.key")); err != nil {
		t.Fatal(err)
	}
	apiExited := startProcess(t, dir, apiserver,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", securePort),
		"--cert-dir="+certDir, "--token-auth-file="+tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/24", "--endpoint-reconciler-type=none", "--v=1")
	f := &apiserverFixture{url: fmt.Sprintf("https://127.0.0.1:%d", securePort), dir: dir,
		caFile: filepath.Join(certDir, "apiserver.crt")}
	f.admin = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// Only the fixture's own calls; the gate verifies the certificate.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	waitUntil(t, "kube-apiserver ready", 3*time.Minute, apiExited, func() bool {
		code, _ := f.call(http.MethodGet, "/readyz", "", nil)
		return code == http.StatusOK
	})
	return f
}

// call makes a request as the cluster's admin.
func (f *apiserverFixture) call(method, path, contentType string, body []byte) (int, []byte) {
	req, err := http.NewRequest(method, f.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := f.admin.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}

func (f *apiserverFixture) mustCall(t *testing.T, method, path, contentType string, body []byte) []byte {
	t.Helper()
	code, answer := f.call(method, path, contentType, body)
	if code/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, code, answer)
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
	c, err := NewClient(ClientConfig{Host: f.url, TokenFile: tokenFile, CAFile: f.caFile, UserAgent: "nodegate-test"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// applyRBAC creates the objects of deploy/node-gate/rbac.yaml as they are,
// in the namespace default, and a narrower role for narrowUser.
func (f *apiserverFixture) applyRBAC(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile("../../deploy/node-gate/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{
		"ServiceAccount":     "/api/v1/namespaces/default/serviceaccounts",
		"ClusterRole":        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
		"ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
	}
	created := 0
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var kind string
		for _, line := range strings.Split(doc, "\n") {
			if k, ok := strings.CutPrefix(line, "kind: "); ok {
				kind = strings.TrimSpace(k)
				break
			}
		}
		path, ok := paths[kind]
		if !ok {
			t.Fatalf("deploy/node-gate/rbac.yaml: a document of kind %q", kind)
		}
		f.mustCall(t, http.MethodPost, path, "application/yaml", []byte(doc))
		created++
	}
	if created != 3 {
		t.Fatalf("deploy/node-gate/rbac.yaml holds %d objects, want 3", created)
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
	var list []map[string]string
	for _, tt := range taints {
		key, effect, _ := strings.Cut(tt, ":")
		list = append(list, map[string]string{"key": key, "effect": effect})
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{"taints": list}})
	f.mustCall(t, http.MethodPost, "/api/v1/nodes", "application/json", body)
	f.mustCall(t, http.MethodPatch, "/api/v1/nodes/"+name+"/status", "application/strategic-merge-patch+json",
		[]byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status","lastHeartbeatTime":"2026-11-23T10:00:00Z","lastTransitionTime":"2026-11-23T10:00:00Z"}]}}`))
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

func writeRSAKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
}
