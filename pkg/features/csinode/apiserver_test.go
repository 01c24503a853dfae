//go:build apiserver

package csinode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/internal/kubeapi"
	"github.com/csi-registrar/node-driver-registrar/test/apiserver"
	"github.com/csi-registrar/node-driver-registrar/test/poll"
	"github.com/csi-registrar/node-driver-registrar/test/removeall"
)

// This file runs the watcher against a real kube-apiserver (v1.37.1, built
// from test/node's go.mod as make e2e-node builds it) on a real etcd, with
// RBAC. No controller runs: the test creates and deletes the CSINode as
// kubelet and the garbage collector would.

const (
	driver = "test.csi.example.com"
	// readerToken's service account may only list and watch csinodes and
	// get nodes: the least privilege the watcher asks for.
	readerToken = "reader-token"
	readerUser  = "system:serviceaccount:default:csinode-reader"
	// nobodyToken's may do nothing.
	nobodyToken = "nobody-token"
)

type fixture struct{ *apiserver.Server }

func startAPIServer(t *testing.T) *fixture {
	t.Helper()
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	s := apiserver.StartForTest(t, repo,
		apiserver.User{Token: readerToken, Name: readerUser, Groups: []string{"system:serviceaccounts"}},
		apiserver.User{Token: nobodyToken, Name: "system:serviceaccount:default:nobody", Groups: []string{"system:serviceaccounts"}})
	removeall.Require(t)
	f := &fixture{s}
	f.call(t, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/clusterroles",
		`{"metadata":{"name":"csinode-reader"},"rules":[{"apiGroups":["storage.k8s.io"],"resources":["csinodes"],"verbs":["list","watch"]},{"apiGroups":[""],"resources":["nodes"],"verbs":["get"]}]}`)
	f.call(t, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
		`{"metadata":{"name":"csinode-reader"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"csinode-reader"},"subjects":[{"kind":"ServiceAccount","name":"csinode-reader","namespace":"default"}]}`)
	return f
}

func (f *fixture) call(t *testing.T, method, path, body string) []byte {
	t.Helper()
	contentType := "application/json"
	if method == http.MethodPatch {
		contentType = "application/merge-patch+json"
	}
	answer, err := f.Do(method, path, contentType, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return answer
}

// createNode creates the Node and returns its UID.
func (f *fixture) createNode(t *testing.T, name string) string {
	t.Helper()
	if _, err := f.CreateNode(name); err != nil {
		t.Fatal(err)
	}
	var n struct {
		Metadata struct{ UID string } `json:"metadata"`
	}
	if err := json.Unmarshal(f.call(t, http.MethodGet, "/api/v1/nodes/"+name, ""), &n); err != nil || n.Metadata.UID == "" {
		t.Fatalf("node %s: no UID (%v)", name, err)
	}
	return n.Metadata.UID
}

// createCSINode creates the node's CSINode with the drivers, owned by the
// Node of ownerUID, as kubelet does.
func (f *fixture) createCSINode(t *testing.T, node, ownerUID string, drivers ...string) {
	t.Helper()
	var list []string
	for _, d := range drivers {
		list = append(list, fmt.Sprintf(`{"name":%q,"nodeID":%q}`, d, node))
	}
	f.call(t, http.MethodPost, "/apis/storage.k8s.io/v1/csinodes", fmt.Sprintf(
		`{"metadata":{"name":%q,"ownerReferences":[{"apiVersion":"v1","kind":"Node","name":%q,"uid":%q}]},"spec":{"drivers":[%s]}}`,
		node, node, ownerUID, strings.Join(list, ",")))
}

// watcher runs a watcher of node with the client until the test ends, its
// watches ended by the API server after watchTimeout (0: the reflector's
// own); its findings arrive on the channel.
func watcher(t *testing.T, node string, c *kubeapi.Client, watchTimeout time.Duration) (*Watcher, <-chan Finding) {
	t.Helper()
	findings := make(chan Finding, 100)
	w := New(node, c, nil, func(f Finding) { findings <- f })
	w.watchTimeout = watchTimeout
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, findings
}

// next waits for the next finding, which must be want.
func next(t *testing.T, findings <-chan Finding, want Finding) {
	t.Helper()
	select {
	case got := <-findings:
		if got != want {
			t.Fatalf("finding %+v\n     want %+v", got, want)
		}
	case <-time.After(time.Minute):
		t.Fatalf("no finding in a minute, want %+v", want)
	}
}

func TestAgainstKubeAPIServer(t *testing.T) {
	f := startAPIServer(t)
	reader := f.ClientForTest(t, readerToken)

	t.Run("the CSINode's life, with list and watch of csinodes and get of nodes alone", func(t *testing.T) {
		uid := f.createNode(t, "n1")
		w, findings := watcher(t, "n1", reader, 0)
		w.SetDriver(driver)
		next(t, findings, Finding{Missing: true, Reason: "CSINode n1 does not exist"})

		f.createCSINode(t, "n1", uid, "other.csi.example.com", driver)
		next(t, findings, Finding{Listed: true})

		f.call(t, http.MethodPatch, "/apis/storage.k8s.io/v1/csinodes/n1", `{"spec":{"drivers":[{"name":"other.csi.example.com","nodeID":"n1"}]}}`)
		next(t, findings, Finding{Missing: true, Reason: "CSINode n1 does not list the driver " + driver})

		f.call(t, http.MethodPatch, "/apis/storage.k8s.io/v1/csinodes/n1", `{"spec":{"drivers":[{"name":"`+driver+`","nodeID":"n1"}]}}`)
		next(t, findings, Finding{Listed: true})

		// The driver renames itself: the findings are about the new name.
		w.SetDriver("renamed.csi.example.com")
		next(t, findings, Finding{Missing: true, Reason: "CSINode n1 does not list the driver renamed.csi.example.com"})
		w.SetDriver(driver)
		next(t, findings, Finding{Listed: true})

		f.call(t, http.MethodDelete, "/apis/storage.k8s.io/v1/csinodes/n1", "")
		next(t, findings, Finding{Missing: true, Reason: "CSINode n1 does not exist"})

		st := w.Status()
		if st.Node != "n1" || st.Driver != driver || st.NodeUID != uid || st.LastError != "" || st.Finding == nil || !st.Finding.Missing || st.FindingTime == nil {
			t.Errorf("status %+v", st)
		}
		if st.Requests["get"]["200"] < 2 || st.Requests["watch"]["200"] < 1 || st.Requests["list"]["403"]+st.Requests["watch"]["403"] != 0 {
			t.Errorf("requests %v", st.Requests)
		}
	})

	t.Run("a replaced Node: the CSINode of the old UID is reported, neither listed nor missing", func(t *testing.T) {
		old := f.createNode(t, "n2")
		f.createCSINode(t, "n2", old, driver)
		w, findings := watcher(t, "n2", reader, 0)
		w.SetDriver(driver)
		next(t, findings, Finding{Listed: true})

		// Node repair: the Node deleted and one of the same name created.
		f.call(t, http.MethodDelete, "/api/v1/nodes/n2", "")
		current := f.createNode(t, "n2")
		stale := Finding{Reason: "CSINode n2 lists the driver " + driver + " but is owned by the Node of UID " + old + ", not by the current Node n2 of UID " + current +
			": the garbage collector deletes it, and the driver is registered again once it is gone; kubelet 1.35 to 1.37 create it again with the old owner until kubelet restarts"}
		// The garbage collector deletes the CSINode, and kubelet 1.35 to
		// 1.37 creates it again with the UID it read at its start.
		f.call(t, http.MethodDelete, "/apis/storage.k8s.io/v1/csinodes/n2", "")
		next(t, findings, Finding{Missing: true, Reason: "CSINode n2 does not exist"})
		f.createCSINode(t, "n2", old, driver)
		next(t, findings, stale)
		if st := w.Status(); st.CSINodeOwnerUID != old || st.NodeUID != current {
			t.Errorf("owner UID %s, Node UID %s; want %s, %s", st.CSINodeOwnerUID, st.NodeUID, old, current)
		}

		// A watcher that starts then reads the same at its first GET.
		w2, findings2 := watcher(t, "n2", reader, 0)
		w2.SetDriver(driver)
		next(t, findings2, stale)

		// The garbage collector deletes it again at once: what is missing
		// says why it will be again.
		f.call(t, http.MethodDelete, "/apis/storage.k8s.io/v1/csinodes/n2", "")
		next(t, findings, Finding{Missing: true, Reason: "CSINode n2 does not exist; the last one was owned by the replaced Node of UID " + old + ", not by the current one of UID " + current +
			": kubelet 1.35 to 1.37 create it with the Node UID they read at their start, which the garbage collector deletes again, until kubelet restarts (1.38 and later read it again)"})

		// A kubelet restart: the CSINode made again by the current Node.
		f.createCSINode(t, "n2", current, driver)
		next(t, findings, Finding{Listed: true})
		f.call(t, http.MethodDelete, "/apis/storage.k8s.io/v1/csinodes/n2", "")
		next(t, findings, Finding{Missing: true, Reason: "CSINode n2 does not exist"})
	})

	// (A watch that expires, 410 Gone, is in watcher_test.go: this API
	// server keeps all of etcd's history in its window.)
	t.Run("watches that end are renewed", func(t *testing.T) {
		uid := f.createNode(t, "n3")
		f.createCSINode(t, "n3", uid, driver)
		w, findings := watcher(t, "n3", reader, 2*time.Second)
		w.SetDriver(driver)
		next(t, findings, Finding{Listed: true})
		// The watches of two seconds end one after the other (the API
		// server ends each at its timeoutSeconds), each renewed from where
		// the last one stopped, without reading the CSINode, nor the Node,
		// again.
		poll.Until(t, "two watches renewed", func() bool { return w.Status().WatchRestarts >= 2 })
		f.call(t, http.MethodDelete, "/apis/storage.k8s.io/v1/csinodes/n3", "")
		next(t, findings, Finding{Missing: true, Reason: "CSINode n3 does not exist"})
		st := w.Status()
		if st.LastError != "" || st.Requests["get"]["200"] != 1 || st.Requests["list"]["200"] > 1 || st.Requests["watch"]["200"] < 3 {
			t.Errorf("status after the renewals: %+v", st)
		}
	})

	t.Run("without the rights, the missing rule is named", func(t *testing.T) {
		f.createNode(t, "n4")
		w, findings := watcher(t, "n4", f.ClientForTest(t, nobodyToken), 0)
		w.SetDriver(driver)
		select {
		case got := <-findings:
			want := `cannot read CSINode n4 yet: forbidden: the registrar's service account may not list csinodes: its ClusterRole needs the rule {apiGroups: ["storage.k8s.io"], resources: ["csinodes"], verbs: ["list"]} (deploy/csinode has it); the API server said: `
			if got.Listed || got.Missing || !strings.HasPrefix(got.Reason, want) {
				t.Errorf("finding %+v\nwant the reason to start with %s", got, want)
			}
		case <-time.After(time.Minute):
			t.Fatal("no finding in a minute")
		}
		if st := w.Status(); st.Requests["list"]["403"] < 1 || st.Requests["watch"]["403"] < 1 {
			t.Errorf("requests %v", st.Requests)
		}
	})
}
