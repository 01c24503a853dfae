// Package apiserver runs a real kube-apiserver (v1.37.1, built from
// test/node's go.mod as make e2e-node builds it) on a real etcd (Debian's
// etcd-server), both on loopback, with RBAC, users authenticated by static
// bearer tokens and service-account tokens from its TokenRequest API: for
// pkg/features/nodegate's and test/deploy's tests and test/bench's node gate
// figures.
package apiserver

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
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// AdminToken authenticates as a member of system:masters.
const AdminToken = "admin-token"

// User is a user of the API server, authenticated by its bearer token.
type User struct {
	Token, Name string
	Groups      []string
}

// Binaries returns etcd from PATH and $KUBE_APISERVER, or else
// test/node/_bin/kube-apiserver below the repository root repo. The error
// says which is missing and how to get it.
func Binaries(repo string) (etcd, kubeAPIServer string, err error) {
	etcd, err = exec.LookPath("etcd")
	if err != nil {
		return "", "", errors.New("no etcd on PATH (apt-get install etcd-server)")
	}
	if p := os.Getenv("KUBE_APISERVER"); p != "" {
		return etcd, p, nil
	}
	kubeAPIServer = BinaryPath(repo)
	if _, err := os.Stat(kubeAPIServer); err != nil {
		return "", "", fmt.Errorf("no %s (make e2e-node or make unit builds it; or set KUBE_APISERVER)", kubeAPIServer)
	}
	return etcd, kubeAPIServer, nil
}

// BinaryPath is where test/node's kube-apiserver is built.
func BinaryPath(repo string) string {
	return filepath.Join(repo, "test", "node", "_bin", "kube-apiserver")
}

// Build builds kube-apiserver at BinaryPath(repo) from test/node/go.mod,
// as hack/e2e-node.sh does (one build cache entry for both): a few minutes
// the first time.
func Build(repo string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-o", BinaryPath(repo), "k8s.io/kubernetes/cmd/kube-apiserver")
	cmd.Dir = filepath.Join(repo, "test", "node")
	// For this machine, also where the tests run under an emulator
	// (make arch-test sets GOARCH for them).
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=", "GOARCH=", "GOARM=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building kube-apiserver: %w\n%s", err, out)
	}
	return nil
}

// Server is a running etcd and kube-apiserver.
type Server struct {
	// URL is the API server's https://127.0.0.1:port.
	URL string
	// CAFile holds the API server's self-signed serving certificate.
	CAFile string
	dir    string
	admin  *http.Client
	// procs are etcd, then kube-apiserver while it runs.
	procs []*process
	// kubeAPIServer and its arguments, for StartAPIServer.
	kubeAPIServer string
	apiArgs       []string
}

// process is a started etcd or kube-apiserver, its output in a log file.
type process struct {
	cmd     *exec.Cmd
	log     string
	exited  chan struct{}
	waitErr error
}

func startProcess(dir, name string, args ...string) (*process, error) {
	p := &process{log: filepath.Join(dir, filepath.Base(name)+".log"), exited: make(chan struct{})}
	// Appended to: a restarted kube-apiserver's log follows its last one.
	logFile, err := os.OpenFile(p.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(name, args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	go func() { p.waitErr = p.cmd.Wait(); logFile.Close(); close(p.exited) }()
	return p, nil
}

// tail is the end of the process's log.
func (p *process) tail() string {
	out, _ := os.ReadFile(p.log)
	return fmt.Sprintf("%s's log (last 3000 bytes):\n%s", filepath.Base(p.cmd.Path), out[max(0, len(out)-3000):])
}

// waitUntil polls ready every 100 ms until it holds, the process exits or
// limit passes.
func (p *process) waitUntil(ctx context.Context, what string, limit time.Duration, ready func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for !ready() {
		select {
		case <-p.exited:
			return fmt.Errorf("%s: the process exited: %v\n%s", what, p.waitErr, p.tail())
		case <-ctx.Done():
			return fmt.Errorf("%s: %w\n%s", what, ctx.Err(), p.tail())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// Start starts etcd and kube-apiserver with their data, certificates and
// logs in dir, which must exist, and returns once the API server is ready.
// users, and the admin of AdminToken, are authenticated by their tokens.
// The caller must call Stop, also after an error.
func Start(ctx context.Context, dir, etcd, kubeAPIServer string, users ...User) (*Server, error) {
	ports := make([]int, 3)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	clientPort, peerPort, securePort := ports[0], ports[1], ports[2]
	certDir := filepath.Join(dir, "certs")
	s := &Server{URL: fmt.Sprintf("https://127.0.0.1:%d", securePort), CAFile: filepath.Join(certDir, "apiserver.crt"), dir: dir,
		admin: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			// The admin's own calls only: the clients under test verify
			// the certificate against CAFile.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		}}}

	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	p, err := startProcess(dir, etcd, "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL, "--name", "default")
	if err != nil {
		return s, err
	}
	s.procs = append(s.procs, p)
	plain := &http.Client{Timeout: 2 * time.Second}
	if err := p.waitUntil(ctx, "etcd healthy", time.Minute, func() bool {
		resp, err := plain.Get(etcdURL + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		return s, err
	}

	tokens := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n", AdminToken)
	for _, u := range users {
		tokens += fmt.Sprintf("%s,%s,%s,%q\n", u.Token, u.Name, u.Name, strings.Join(u.Groups, ","))
	}
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(tokens), 0o600); err != nil {
		return s, err
	}
	saKey := filepath.Join(dir, "sa.key")
	if err := writeRSAKey(saKey); err != nil {
		return s, err
	}
	s.kubeAPIServer = kubeAPIServer
	s.apiArgs = []string{"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", securePort),
		"--cert-dir=" + certDir, "--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		// as in clusters that run CSI node plugins: deploy/ asks for it
		"--allow-privileged=true",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + saKey, "--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=10.96.0.0/24", "--endpoint-reconciler-type=none", "--v=1"}
	return s, s.StartAPIServer(ctx)
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same port, certificates and etcd, and returns once it is ready.
func (s *Server) StartAPIServer(ctx context.Context) error {
	if len(s.procs) != 1 {
		return errors.New("StartAPIServer: kube-apiserver runs already, or etcd does not")
	}
	p, err := startProcess(s.dir, s.kubeAPIServer, s.apiArgs...)
	if err != nil {
		return err
	}
	s.procs = append(s.procs, p)
	return p.waitUntil(ctx, "kube-apiserver ready", 3*time.Minute, func() bool {
		code, _ := s.Call(http.MethodGet, "/readyz", "", nil)
		return code == http.StatusOK
	})
}

// StopAPIServer kills kube-apiserver and leaves etcd running: an outage of
// the API server alone.
func (s *Server) StopAPIServer() error {
	if len(s.procs) != 2 {
		return errors.New("StopAPIServer: kube-apiserver is not running")
	}
	p := s.procs[1]
	_ = p.cmd.Process.Kill()
	<-p.exited
	s.procs = s.procs[:1]
	return nil
}

// PIDs are etcd's process ID and kube-apiserver's, 0 while it is stopped.
func (s *Server) PIDs() (etcd, kubeAPIServer int) {
	if len(s.procs) > 0 {
		etcd = s.procs[0].cmd.Process.Pid
	}
	if len(s.procs) > 1 {
		kubeAPIServer = s.procs[1].cmd.Process.Pid
	}
	return etcd, kubeAPIServer
}

// Stop kills the API server, then etcd.
func (s *Server) Stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		_ = s.procs[i].cmd.Process.Kill()
		<-s.procs[i].exited
	}
	s.procs = nil
}

// Logs is the end of each process's log, for a failure's message.
func (s *Server) Logs() string {
	var logs []string
	for _, p := range s.procs {
		logs = append(logs, p.tail())
	}
	return strings.Join(logs, "\n")
}

// Call makes a request as the admin and returns the status code and the
// body; a failed request has code 0 and the error as its body.
func (s *Server) Call(method, path, contentType string, body []byte) (int, []byte) {
	req, err := http.NewRequest(method, s.URL+path, bytes.NewReader(body))
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := s.admin.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}

// Watch starts a watch as the admin, e.g. of one Node's changes after a
// resourceVersion with /api/v1/nodes?watch=true&resourceVersion=RV&
// fieldSelector=metadata.name%3Dname (without one, the watch must wait for
// the API server's cache to reach etcd's latest revision, and here it
// sometimes ended at once with a 504 "Too large resource version"), and
// returns
// its stream of JSON events, which ctx's end closes.
func (s *Server) Watch(ctx context.Context, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	// Without the client's timeout, which would end the stream.
	resp, err := (&http.Client{Transport: s.admin.Transport}).Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return resp.Body, nil
}

// Do is Call with anything but a 2xx answer as an error.
func (s *Server) Do(method, path, contentType string, body []byte) ([]byte, error) {
	code, answer := s.Call(method, path, contentType, body)
	if code/100 != 2 {
		return answer, fmt.Errorf("%s %s: %d %s", method, path, code, answer)
	}
	return answer, nil
}

// ApplyRBAC creates the objects of deploy/node-gate/rbac.yaml, read from
// file as they are, in the namespace default.
func (s *Server) ApplyRBAC(file string) error {
	return s.Apply(file, "ServiceAccount", "ClusterRole", "ClusterRoleBinding")
}

// ApplyNamespacedRBAC creates the Role and its RoleBinding of
// deploy/events/rbac.yaml, read from file as they are, in the namespace
// default.
func (s *Server) ApplyNamespacedRBAC(file string) error {
	return s.Apply(file, "Role", "RoleBinding")
}

// ApplyPolicy creates the ValidatingAdmissionPolicy and its binding of
// deploy/node-gate/policy.yaml, read from file as they are. The API server
// enforces a policy a moment after its creation, once its informer has
// seen it.
func (s *Server) ApplyPolicy(file string) error {
	return s.Apply(file, "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
}

// Apply creates the documents of a YAML file, which must be of these
// kinds, in this order; namespaced ones in the namespace default.
func (s *Server) Apply(file string, kinds ...string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	paths := map[string]string{
		"ServiceAccount":                   "/api/v1/namespaces/default/serviceaccounts",
		"ClusterRole":                      "/apis/rbac.authorization.k8s.io/v1/clusterroles",
		"ClusterRoleBinding":               "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
		"Role":                             "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
		"RoleBinding":                      "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
		"ValidatingAdmissionPolicy":        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
		"ValidatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
	}
	var found []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var kind string
		for _, line := range strings.Split(doc, "\n") {
			if k, ok := strings.CutPrefix(line, "kind: "); ok {
				kind = strings.TrimSpace(k)
				break
			}
		}
		found = append(found, kind)
		path, ok := paths[kind]
		if !ok {
			return fmt.Errorf("%s: a document of kind %q", file, kind)
		}
		if _, err := s.Do(http.MethodPost, path, "application/yaml", []byte(doc)); err != nil {
			return err
		}
	}
	if strings.Join(found, ",") != strings.Join(kinds, ",") {
		return fmt.Errorf("%s holds %v, want %v", file, found, kinds)
	}
	return nil
}

// CreatePod creates, in the namespace default, a pod bound to node that
// runs as serviceAccount: what a token can be bound to. Nothing runs it.
func (s *Server) CreatePod(name, node, serviceAccount string) error {
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"nodeName": node, "serviceAccountName": serviceAccount, "automountServiceAccountToken": false,
			"containers": []map[string]any{{"name": "registrar", "image": "registrar"}},
		},
	})
	if err != nil {
		return err
	}
	_, err = s.Do(http.MethodPost, "/api/v1/namespaces/default/pods", "application/json", body)
	return err
}

// Token asks the TokenRequest API for a token of the service account of
// the namespace default, bound to the pod (as kubelet asks for the token
// it mounts in the pod), or to nothing when pod is "".
func (s *Server) Token(serviceAccount, pod string) (string, error) {
	spec := map[string]any{}
	if pod != "" {
		spec["boundObjectRef"] = map[string]any{"apiVersion": "v1", "kind": "Pod", "name": pod}
	}
	body, err := json.Marshal(map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
	if err != nil {
		return "", err
	}
	answer, err := s.Do(http.MethodPost, "/api/v1/namespaces/default/serviceaccounts/"+serviceAccount+"/token", "application/json", body)
	if err != nil {
		return "", err
	}
	var request struct {
		Status struct{ Token string } `json:"status"`
	}
	if err := json.Unmarshal(answer, &request); err != nil || request.Status.Token == "" {
		return "", fmt.Errorf("no token in the TokenRequest's answer %s (%v)", answer, err)
	}
	return request.Status.Token, nil
}

// CreateNode creates a Node with taints ("key:Effect") and kubelet's Ready
// condition, and returns the Node's resourceVersion then: a watch from it
// sees every later change.
func (s *Server) CreateNode(name string, taints ...string) (string, error) {
	var list []map[string]string
	for _, t := range taints {
		key, effect, _ := strings.Cut(t, ":")
		list = append(list, map[string]string{"key": key, "effect": effect})
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{"taints": list}})
	if err != nil {
		return "", err
	}
	if _, err := s.Do(http.MethodPost, "/api/v1/nodes", "application/json", body); err != nil {
		return "", err
	}
	answer, err := s.Do(http.MethodPatch, "/api/v1/nodes/"+name+"/status", "application/strategic-merge-patch+json",
		[]byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status","lastHeartbeatTime":"2026-11-23T10:00:00Z","lastTransitionTime":"2026-11-23T10:00:00Z"}]}}`))
	if err != nil {
		return "", err
	}
	var node struct {
		Metadata struct{ ResourceVersion string } `json:"metadata"`
	}
	if err := json.Unmarshal(answer, &node); err != nil || node.Metadata.ResourceVersion == "" {
		return "", fmt.Errorf("node %s: no resourceVersion in %s (%v)", name, answer, err)
	}
	return node.Metadata.ResourceVersion, nil
}

func writeRSAKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
}
