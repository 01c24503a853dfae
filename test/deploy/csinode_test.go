package deploy

import (
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// csiNodeRules are deploy/csinode's ClusterRole's rules: reads only.
var csiNodeRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csinodes"}, Verbs: []string{"list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
}

// The csinode component, with its service account or with the node gate's,
// gives the registrar --confirm-csinode, NODE_NAME and a token of one
// service account that may read CSINodes and Nodes and write nothing more;
// with the node gate, that account keeps the gate's rules and policy.
func TestCSINodeComponent(t *testing.T) {
	const namespace = "storage-system"
	for _, tc := range []struct {
		dir      string
		nodeGate bool
	}{
		{csiNodeOverlayDir, false},
		{nodeGateCSINodeOverlayDir, true},
		// deploy/events beside them changes none of this.
		{nodeGateCSINodeEventsOverlayDir, true},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			objs := render(t, tc.dir)
			ds := onlyDaemonSet(t, objs)
			account := only[*corev1.ServiceAccount](t, objs)
			if account.Namespace != namespace || ds.Namespace != namespace {
				t.Errorf("ServiceAccount in %q, DaemonSet in %q, want both in %q", account.Namespace, ds.Namespace, namespace)
			}
			roles := map[string]*rbacv1.ClusterRole{}
			for _, o := range objs {
				if r, ok := o.(*rbacv1.ClusterRole); ok {
					roles[r.Name] = r
				}
			}
			bound := 0
			var csiNodeRole *rbacv1.ClusterRole
			for _, o := range objs {
				b, ok := o.(*rbacv1.ClusterRoleBinding)
				if !ok {
					continue
				}
				bound++
				if len(b.Subjects) != 1 || b.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: account.Name, Namespace: namespace}) {
					t.Errorf("ClusterRoleBinding %s subjects %+v, want the ServiceAccount %s/%s", b.Name, b.Subjects, namespace, account.Name)
				}
				role := roles[b.RoleRef.Name]
				if b.RoleRef.Kind != "ClusterRole" || role == nil {
					t.Errorf("ClusterRoleBinding %s refers to %+v, not to a ClusterRole of the rendering", b.Name, b.RoleRef)
					continue
				}
				if slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "csinodes") }) {
					csiNodeRole = role
				}
			}
			wantRoles := 1
			if tc.nodeGate {
				wantRoles = 2
			}
			if bound != wantRoles || len(roles) != wantRoles {
				t.Errorf("%d ClusterRoles and %d bindings, want %d of each", len(roles), bound, wantRoles)
			}
			if csiNodeRole == nil {
				t.Fatal("no bound ClusterRole grants anything on csinodes")
			}
			checkRules(t, "ClusterRole "+csiNodeRole.Name, csiNodeRole.Rules, csiNodeRules)

			checkPodToken(t, ds, account.Name)
			reg := registrarContainer(t, ds)
			checkDownwardEnv(t, reg, map[string]string{"NODE_NAME": "spec.nodeName"})
			checkAppendedArgs(t, reg, "--confirm-csinode")
			policies := countOf[*admissionregistrationv1.ValidatingAdmissionPolicy](objs)
			if tc.nodeGate {
				// The node gate's part is as without deploy/csinode.
				checkAppendedArgs(t, reg, nodeGateArgs...)
				checkPolicy(t, objs, reg.Args)
			} else if policies != 0 {
				t.Errorf("the rendering holds %d ValidatingAdmissionPolicies: deploy/csinode needs none, it only reads", policies)
			}
		})
	}
}

func countArg(args []string, arg string) int {
	n := 0
	for _, a := range args {
		if a == arg {
			n++
		}
	}
	return n
}

func countOf[T runtime.Object](objs []runtime.Object) int {
	n := 0
	for _, o := range objs {
		if _, ok := o.(T); ok {
			n++
		}
	}
	return n
}
