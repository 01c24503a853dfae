package deploy

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/csi-registrar/node-driver-registrar/test/apiserver"
	"github.com/csi-registrar/node-driver-registrar/test/poll"
)

// eventsRules are deploy/events' Role's rules: what client-go's event
// recorder does, create an Event and patch its count.
var eventsRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
}

// eventsEnv are the downward API variables deploy/events gives the
// registrar, and the field of the pod each one must come from.
var eventsEnv = map[string]string{
	"POD_NAME":      "metadata.name",
	"POD_NAMESPACE": "metadata.namespace",
	"POD_UID":       "metadata.uid",
	"NODE_NAME":     "spec.nodeName",
}

// The events component, with deploy/csinode's service account or beside
// deploy/node-gate and deploy/csinode, gives the registrar --events, its
// pod's name, namespace, UID and node, and a token of the one service
// account, which a Role in the pods' namespace lets create and patch
// events and nothing more.
func TestEventsComponent(t *testing.T) {
	const namespace = "storage-system"
	for _, tc := range []struct {
		dir string
		// others: deploy/node-gate and deploy/csinode are in the overlay.
		others bool
	}{
		{eventsOverlayDir, false},
		{nodeGateCSINodeEventsOverlayDir, true},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			objs := render(t, tc.dir)
			ds := onlyDaemonSet(t, objs)
			account := only[*corev1.ServiceAccount](t, objs)
			role := only[*rbacv1.Role](t, objs)
			binding := only[*rbacv1.RoleBinding](t, objs)
			for what, ns := range map[string]string{"ServiceAccount": account.Namespace, "DaemonSet": ds.Namespace, "Role": role.Namespace, "RoleBinding": binding.Namespace} {
				if ns != namespace {
					t.Errorf("%s in namespace %q, want %q, the pods' own: the registrar creates its Events there", what, ns, namespace)
				}
			}
			checkRules(t, "Role "+role.Name, role.Rules, eventsRules)
			if binding.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}) {
				t.Errorf("RoleBinding %s refers to %+v, not Role %s", binding.Name, binding.RoleRef, role.Name)
			}
			if len(binding.Subjects) != 1 || binding.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: account.Name, Namespace: namespace}) {
				t.Errorf("RoleBinding %s subjects %+v, want the ServiceAccount %s/%s", binding.Name, binding.Subjects, namespace, account.Name)
			}
			// No other component's role touches events: the Role is all the
			// registrar may do with them.
			for _, o := range objs {
				if r, ok := o.(*rbacv1.ClusterRole); ok && slices.ContainsFunc(r.Rules, func(rule rbacv1.PolicyRule) bool {
					return slices.Contains(rule.Resources, "events") || slices.Contains(rule.Resources, "*")
				}) {
					t.Errorf("ClusterRole %s grants something on events: %+v", r.Name, r.Rules)
				}
			}

			checkPodToken(t, ds, account.Name)
			reg := registrarContainer(t, ds)
			checkDownwardEnv(t, reg, eventsEnv)
			checkAppendedArgs(t, reg, "--events")
			// Without the other components the rendering adds nothing
			// cluster-wide; with them, TestCSINodeComponent checks theirs.
			if !tc.others {
				for what, n := range map[string]int{
					"ClusterRoles":                      countOf[*rbacv1.ClusterRole](objs),
					"ClusterRoleBindings":               countOf[*rbacv1.ClusterRoleBinding](objs),
					"ValidatingAdmissionPolicies":       countOf[*admissionregistrationv1.ValidatingAdmissionPolicy](objs),
					"ValidatingAdmissionPolicyBindings": countOf[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](objs),
				} {
					if n != 0 {
						t.Errorf("the rendering holds %d %s: deploy/events needs none, its Events are in the pods' namespace", n, what)
					}
				}
			}
		})
	}
}

// deploy/events' Role, applied as it is on a kube-apiserver with RBAC, lets
// the pod's token create Events in its namespace, and nothing else: no
// other verb on events, nor an Event in another namespace.
func TestEventsRoleAgainstKubeAPIServer(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	s := apiserver.StartForTest(t, repo)
	const account, pod, node = "csi-node", "csi-node-x7k2p", "node-1"
	sa, err := os.ReadFile(filepath.Join(deployDir, "csinode", "service-account", "service-account.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do(http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", "application/yaml", sa); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyNamespacedRBAC(filepath.Join(deployDir, "events", "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := s.CreatePod(pod, node, account); err != nil {
		t.Fatal(err)
	}
	token, err := s.Token(account, pod)
	if err != nil {
		t.Fatal(err)
	}
	client, err := typedcorev1.NewForConfig(&rest.Config{Host: s.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	probe := func(namespace string) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "probe-", Namespace: namespace},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: pod},
			Reason:         "Probe", Message: "a dry run", Type: corev1.EventTypeNormal,
		}
	}
	// The authorizer learns of the RoleBinding a moment after its creation.
	// pkg/features/events' test records the registrar's Events with it.
	poll.Until(t, "the pod's token may create an Event in its namespace", func() bool {
		_, err := client.Events("default").Create(ctx, probe("default"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && !apierrors.IsForbidden(err) {
			t.Fatal(err)
		}
		return err == nil
	})
	const name = "csi-node-x7k2p.probe"
	probed := probe("default")
	probed.Name = name
	for what, call := range map[string]func() error{
		"get an Event": func() error {
			_, err := client.Events("default").Get(ctx, name, metav1.GetOptions{})
			return err
		},
		"list Events": func() error {
			_, err := client.Events("default").List(ctx, metav1.ListOptions{})
			return err
		},
		"watch Events": func() error {
			w, err := client.Events("default").Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		},
		"update an Event": func() error {
			_, err := client.Events("default").Update(ctx, probed, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		},
		"delete an Event": func() error {
			return client.Events("default").Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		},
		"create an Event in another namespace": func() error {
			_, err := client.Events("kube-system").Create(ctx, probe("kube-system"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		},
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("the pod's token may %s: %v, want Forbidden", what, err)
		}
	}
}
