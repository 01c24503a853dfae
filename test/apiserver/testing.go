package apiserver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/csi-registrar/node-driver-registrar/internal/kubeapi"
	"github.com/csi-registrar/node-driver-registrar/test/removeall"
)

// SkipOrFail skips the test, saying why it cannot run against a real
// kube-apiserver, or fails it when CI is set (not false or 0).
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
		t.Fatalf("cannot run against a real kube-apiserver (CI is set, so this fails): "+format, args...)
	}
	t.Skipf("cannot run against a real kube-apiserver: "+format, args...)
}

// StartForTest starts etcd and kube-apiserver in a temporary directory for
// the test, building kube-apiserver first when it is missing (not with
// -short), and stops them when the test ends, with their logs if it
// failed. repo is the repository's root. Without etcd or kube-apiserver
// the test is skipped, or fails under CI.
func StartForTest(t testing.TB, repo string, users ...User) *Server {
	t.Helper()
	if _, err := exec.LookPath("etcd"); err != nil {
		SkipOrFail(t, "no etcd on PATH (apt-get install etcd-server)")
	}
	if bin := BinaryPath(repo); os.Getenv("KUBE_APISERVER") == "" {
		if _, err := os.Stat(bin); err != nil {
			if testing.Short() {
				SkipOrFail(t, "no %s, and -short: not building it (make e2e-node builds it, or set KUBE_APISERVER)", bin)
			}
			t.Logf("building %s from test/node/go.mod (k8s.io/kubernetes v1.37.1): a few minutes the first time", bin)
			if err := Build(repo); err != nil {
				SkipOrFail(t, "%v", err)
			}
		}
	}
	etcd, kubeAPIServer, err := Binaries(repo)
	if err != nil {
		SkipOrFail(t, "%v", err)
	}
	s, err := Start(context.Background(), t.TempDir(), etcd, kubeAPIServer, users...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(s.Logs())
		}
		s.Stop()
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ClientForTest is a client of the API server, as the registrar's, that
// authenticates with token (kept in a file of a temporary directory, as
// kubelet mounts it) and trusts the API server's own self-signed CA.
func (s *Server) ClientForTest(t testing.TB, token string) *kubeapi.Client {
	t.Helper()
	removeall.Require(t)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	// No client-side rate limit: the tests and benchmarks time the API server.
	c, err := kubeapi.NewClient(&rest.Config{Host: s.URL, BearerTokenFile: file, QPS: -1, TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile}, UserAgent: "registrar-test"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
