package deploy

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The node-gate component gives the registrar's pods a service account
// with the smallest rule the two features need, and the flags and
// NODE_NAME that use it.
func TestNodeGateComponent(t *testing.T) {
	const namespace = "storage-system"
	objs := render(t, nodeGateOverlayDir)
	ds := onlyDaemonSet(t, objs)
	role := only[*rbacv1.ClusterRole](t, objs)
	binding := only[*rbacv1.ClusterRoleBinding](t, objs)
	account := only[*corev1.ServiceAccount](t, objs)

	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
	}
	if len(role.Rules) != len(want) {
		t.Fatalf("ClusterRole %s rules %+v, want %+v", role.Name, role.Rules, want)
	}
	for i, r := range role.Rules {
		w := want[i]
		if !slices.Equal(r.APIGroups, w.APIGroups) || !slices.Equal(r.Resources, w.Resources) || !slices.Equal(r.Verbs, w.Verbs) || len(r.ResourceNames) != 0 || len(r.NonResourceURLs) != 0 {
			t.Errorf("ClusterRole %s rule %d: %+v, want %+v", role.Name, i, r, w)
		}
	}
	if binding.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}) {
		t.Errorf("ClusterRoleBinding %s refers to %+v, not ClusterRole %s", binding.Name, binding.RoleRef, role.Name)
	}
	if len(binding.Subjects) != 1 || binding.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: account.Name, Namespace: namespace}) {
		t.Errorf("ClusterRoleBinding %s subjects %+v, want the ServiceAccount %s/%s", binding.Name, binding.Subjects, namespace, account.Name)
	}
	if account.Namespace != namespace || ds.Namespace != namespace {
		t.Errorf("ServiceAccount in %q, DaemonSet in %q, want both in %q", account.Namespace, ds.Namespace, namespace)
	}

	spec := ds.Spec.Template.Spec
	if spec.ServiceAccountName != account.Name {
		t.Errorf("the pods run as %q, not as %q", spec.ServiceAccountName, account.Name)
	}
	// The base turns the token off; the component must turn it on again.
	if spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Errorf("the pods do not mount the service account's token (automountServiceAccountToken %v)", ptrValue(spec.AutomountServiceAccountToken))
	}
	// The node plugin itself must run on a node that still has the startup
	// taint: it is what takes the taint away.
	if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool { return tol.Operator == corev1.TolerationOpExists && tol.Key == "" }) {
		t.Errorf("the pods do not tolerate every taint: %+v", spec.Tolerations)
	}
	reg := registrarContainer(t, ds)
	if !slices.ContainsFunc(reg.Env, func(e corev1.EnvVar) bool {
		return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	}) {
		t.Errorf("the registrar has no NODE_NAME from spec.nodeName: %+v", reg.Env)
	}
	for _, arg := range []string{"--remove-node-taint=my-driver.csi.example.com/agent-not-ready", "--node-condition"} {
		if !slices.Contains(reg.Args, arg) {
			t.Errorf("the registrar's args %q lack %s", reg.Args, arg)
		}
	}
	// The base's arguments are kept: the component appends.
	base := registrarContainer(t, onlyDaemonSet(t, render(t, deployDir)))
	if !slices.Equal(reg.Args[:len(base.Args)], base.Args) {
		t.Errorf("the registrar's args %q do not start with the base's %q", reg.Args, base.Args)
	}
}

func registrarContainer(t *testing.T, ds *appsv1.DaemonSet) *corev1.Container {
	t.Helper()
	for i, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "node-driver-registrar" {
			return &ds.Spec.Template.Spec.Containers[i]
		}
	}
	t.Fatalf("DaemonSet %s has no node-driver-registrar container", ds.Name)
	return nil
}

// only returns the one object of type T in a rendering.
func only[T runtime.Object](t *testing.T, objs []runtime.Object) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("the rendering holds %d objects of type %T, want 1", len(found), zero)
	}
	return found[0]
}
