package localnode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// manifestKinds are the kinds that deploy/'s components and the storage
// sidecars' RBAC hold.
var manifestKinds = map[string]struct {
	resource   string
	namespaced bool
}{
	"ServiceAccount":                   {"serviceaccounts", true},
	"Role":                             {"roles", true},
	"RoleBinding":                      {"rolebindings", true},
	"ClusterRole":                      {"clusterroles", false},
	"ClusterRoleBinding":               {"clusterrolebindings", false},
	"ValidatingAdmissionPolicy":        {"validatingadmissionpolicies", false},
	"ValidatingAdmissionPolicyBinding": {"validatingadmissionpolicybindings", false},
}

func (c *Node) DeployFile(name string) string { return filepath.Join(c.Repo, "deploy", name) }

// ApplyManifests creates the files' objects as kustomize would with this
// namespace. edit may change an object, or drop it by returning false. An
// object that exists is kept: checks share accounts and roles.
func (c *Node) ApplyManifests(ctx context.Context, edit func(*unstructured.Unstructured) bool, files ...string) error {
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		for _, doc := range bytes.Split(data, []byte("\n---\n")) {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			if len(obj.Object) == 0 {
				continue // comments only
			}
			kind, ok := manifestKinds[obj.GetKind()]
			if !ok {
				return fmt.Errorf("%s: a %s, which test/node does not create; adapt manifestKinds", file, obj.GetKind())
			}
			if edit != nil && !edit(obj) {
				continue
			}
			subjects, _ := obj.Object["subjects"].([]any)
			for _, subject := range subjects {
				if m, ok := subject.(map[string]any); ok && m["kind"] == "ServiceAccount" {
					m["namespace"] = Namespace
				}
			}
			resource := c.Dynamic.Resource(obj.GroupVersionKind().GroupVersion().WithResource(kind.resource))
			var client dynamic.ResourceInterface = resource
			if kind.namespaced {
				obj.SetNamespace(Namespace)
				client = resource.Namespace(Namespace)
			}
			_, err := client.Create(ctx, obj, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("%s: create %s %s: %w", file, obj.GetKind(), obj.GetName(), err)
			}
		}
	}
	return c.publishRootCA(ctx)
}

// publishRootCA: the token volumes read it, and only for the storage suite
// does a controller publish it.
func (c *Node) publishRootCA(ctx context.Context) error {
	ca, err := os.ReadFile(c.Path("apiserver", "apiserver.crt"))
	if err != nil {
		return fmt.Errorf("the API server's self-signed certificate: %w", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": string(ca)}}
	if _, err := c.Client.CoreV1().ConfigMaps(Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}
