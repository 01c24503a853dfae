package deploy

import (
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/csi-registrar/node-driver-registrar/test/apiserver"
)

// resourcePaths are the API paths of the kinds that deploy/ renders:
// %s is the namespace of a namespaced one.
var resourcePaths = map[string]string{
	"Namespace":                        "/api/v1/namespaces",
	"ConfigMap":                        "/api/v1/namespaces/%s/configmaps",
	"ServiceAccount":                   "/api/v1/namespaces/%s/serviceaccounts",
	"DaemonSet":                        "/apis/apps/v1/namespaces/%s/daemonsets",
	"ClusterRole":                      "/apis/rbac.authorization.k8s.io/v1/clusterroles",
	"ClusterRoleBinding":               "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
	"Role":                             "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles",
	"RoleBinding":                      "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings",
	"ValidatingAdmissionPolicy":        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
	"ValidatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
}

// operatorKinds are the Prometheus Operator's kinds of deploy/monitoring:
// this API server has no CRD for them. decode.go reads them strictly into
// the operator's own Go types, and CheckPodMonitor and the rules' checks
// test what they select and read.
var operatorKinds = map[string]bool{"PodMonitor": true, "PrometheusRule": true}

// Every kustomization of deploy/ and its test overlays, sent to a real
// kube-apiserver as `kubectl apply --dry-run=server --validate=strict`
// sends it: its schema, its validation and its admission accept each
// object; the API server compiles the node gate policy's expressions.
// (Their type check against the Node schema runs in kube-controller-
// manager, which is not here: pkg/features/nodegate's test runs each of them.)
func TestManifestsAgainstKubeAPIServer(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	s := apiserver.StartForTest(t, repo)
	// The API server makes these itself.
	namespaces := map[string]bool{"default": true, "kube-system": true, "kube-public": true, "kube-node-lease": true}
	for _, dir := range kustomizationDirs(t) {
		objs := render(t, dir)
		for _, obj := range objs {
			kind, body := encode(t, obj)
			if operatorKinds[kind] {
				continue
			}
			path, ok := resourcePaths[kind]
			if !ok {
				t.Fatalf("%s: kind %s: add its API path to resourcePaths", dir, kind)
			}
			if strings.Contains(path, "%s") {
				ns := namespaceOf(t, obj)
				if !namespaces[ns] {
					if _, err := s.Do(http.MethodPost, "/api/v1/namespaces", "application/json", []byte(`{"metadata":{"name":"`+ns+`"}}`)); err != nil {
						t.Fatal(err)
					}
					namespaces[ns] = true
				}
				path = strings.Replace(path, "%s", url.PathEscape(ns), 1)
			}
			if _, err := s.Do(http.MethodPost, path+"?dryRun=All&fieldValidation=Strict", "application/json", body); err != nil {
				t.Errorf("%s: %s refused: %v", dir, kind, err)
			}
		}
	}

}

// encode is obj as JSON, with its apiVersion and kind, and its kind.
func encode(t *testing.T, obj runtime.Object) (string, []byte) {
	t.Helper()
	gvks, _, err := scheme.ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	obj = obj.DeepCopyObject()
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	body, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return gvks[0].Kind, body
}

// namespaceOf is the namespace of a namespaced object: "default" where the
// manifest names none, as kubectl does.
func namespaceOf(t *testing.T, obj runtime.Object) string {
	t.Helper()
	m, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetNamespace() == "" {
		return "default"
	}
	return m.GetNamespace()
}
