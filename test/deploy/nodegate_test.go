package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
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
		{APIGroups: []string{policyMarkGroup}, Resources: []string{"nodes"}, Verbs: []string{"restricted"}},
	}
	checkRules(t, "ClusterRole "+role.Name, role.Rules, want)
	if binding.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}) {
		t.Errorf("ClusterRoleBinding %s refers to %+v, not ClusterRole %s", binding.Name, binding.RoleRef, role.Name)
	}
	if len(binding.Subjects) != 1 || binding.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: account.Name, Namespace: namespace}) {
		t.Errorf("ClusterRoleBinding %s subjects %+v, want the ServiceAccount %s/%s", binding.Name, binding.Subjects, namespace, account.Name)
	}
	if account.Namespace != namespace || ds.Namespace != namespace {
		t.Errorf("ServiceAccount in %q, DaemonSet in %q, want both in %q", account.Namespace, ds.Namespace, namespace)
	}

	checkPodToken(t, ds, account.Name)
	spec := ds.Spec.Template.Spec
	// The node plugin itself must run on a node that still has the startup
	// taint: it is what takes the taint away.
	if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool { return tol.Operator == corev1.TolerationOpExists && tol.Key == "" }) {
		t.Errorf("the pods do not tolerate every taint: %+v", spec.Tolerations)
	}
	reg := registrarContainer(t, ds)
	checkDownwardEnv(t, reg, map[string]string{"NODE_NAME": "spec.nodeName"})
	checkAppendedArgs(t, reg, nodeGateArgs...)
	checkPolicy(t, objs, reg.Args)
}

// nodeGateArgs are the registrar's flags that deploy/node-gate appends.
var nodeGateArgs = []string{"--remove-node-taint=my-driver.csi.example.com/agent-not-ready", "--node-condition"}

// checkRules fails unless rules, those of the role named by what, are
// exactly want, in that order, with no resource names and no non-resource
// URLs.
func checkRules(t *testing.T, what string, rules, want []rbacv1.PolicyRule) {
	t.Helper()
	if len(rules) != len(want) {
		t.Fatalf("%s rules %+v, want %+v", what, rules, want)
	}
	for i, r := range rules {
		w := want[i]
		if !slices.Equal(r.APIGroups, w.APIGroups) || !slices.Equal(r.Resources, w.Resources) || !slices.Equal(r.Verbs, w.Verbs) || len(r.ResourceNames) != 0 || len(r.NonResourceURLs) != 0 {
			t.Errorf("%s rule %d: %+v, want %+v", what, i, r, w)
		}
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

// checkPodToken fails unless the pods run as the service account named
// account, with its token mounted: the base turns the token off, and a
// component that talks to the API server must turn it on again.
func checkPodToken(t *testing.T, ds *appsv1.DaemonSet, account string) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if spec.ServiceAccountName != account {
		t.Errorf("the pods run as %q, not as %q", spec.ServiceAccountName, account)
	}
	if spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Errorf("the pods do not mount the service account's token (automountServiceAccountToken %v)", ptrValue(spec.AutomountServiceAccountToken))
	}
}

// checkDownwardEnv fails unless the registrar has each variable of env
// once, from the field of the pod that env names: components that set the
// same variable must merge into one.
func checkDownwardEnv(t *testing.T, reg *corev1.Container, env map[string]string) {
	t.Helper()
	for name, field := range env {
		var found []corev1.EnvVar
		for _, e := range reg.Env {
			if e.Name == name {
				found = append(found, e)
			}
		}
		if len(found) != 1 {
			t.Errorf("the registrar has %d %s variables, want 1: %+v", len(found), name, reg.Env)
			continue
		}
		if e := found[0]; e.Value != "" || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
			t.Errorf("the registrar's %s does not come from the downward API's %s: %+v", name, field, e)
		}
	}
}

// checkAppendedArgs fails unless the registrar's arguments start with the
// base's, which a component keeps, and hold each of flags once.
func checkAppendedArgs(t *testing.T, reg *corev1.Container, flags ...string) {
	t.Helper()
	base := registrarContainer(t, onlyDaemonSet(t, render(t, deployDir)))
	if len(reg.Args) < len(base.Args) || !slices.Equal(reg.Args[:len(base.Args)], base.Args) {
		t.Errorf("the registrar's args %q do not start with the base's %q", reg.Args, base.Args)
	}
	for _, flag := range flags {
		if n := countArg(reg.Args, flag); n != 1 {
			t.Errorf("the registrar's args %q hold %s %d times, want once", reg.Args, flag, n)
		}
	}
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

// policyMarkGroup is the API group of the mark in deploy/node-gate's
// ClusterRole: the policy applies to the subjects granted it.
const policyMarkGroup = "node-gate.csi-registrar.github.io"

// checkPolicy checks the ValidatingAdmissionPolicy of deploy/node-gate: it
// is bound, fails closed, applies to the subjects of the mark, and lets the
// registrar remove the taints of its --remove-node-taint flags.
func checkPolicy(t *testing.T, objs []runtime.Object, args []string) {
	t.Helper()
	policy := only[*admissionregistrationv1.ValidatingAdmissionPolicy](t, objs)
	binding := only[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, objs)
	if binding.Spec.PolicyName != policy.Name || !slices.Equal(binding.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("ValidatingAdmissionPolicyBinding %s: policy %q, actions %v; want policy %q, actions [Deny]", binding.Name, binding.Spec.PolicyName, binding.Spec.ValidationActions, policy.Name)
	}
	if policy.Spec.FailurePolicy == nil || *policy.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("ValidatingAdmissionPolicy %s does not fail closed (failurePolicy: Fail)", policy.Name)
	}
	mark := "authorizer.group('" + policyMarkGroup + "').resource('nodes').check('restricted').allowed()"
	if len(policy.Spec.MatchConditions) != 1 || !strings.Contains(policy.Spec.MatchConditions[0].Expression, mark) {
		t.Errorf("ValidatingAdmissionPolicy %s's match condition does not ask for the ClusterRole's mark %s: %+v", policy.Name, mark, policy.Spec.MatchConditions)
	}
	var flagKeys []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--remove-node-taint="); ok {
			flagKeys = append(flagKeys, strings.Split(v, ",")...)
		}
	}
	var policyKeys []string
	for _, v := range policy.Spec.Variables {
		if v.Name == "taintKeys" {
			for _, m := range regexp.MustCompile(`'([^']*)'`).FindAllStringSubmatch(v.Expression, -1) {
				policyKeys = append(policyKeys, m[1])
			}
		}
	}
	slices.Sort(flagKeys)
	slices.Sort(policyKeys)
	if !slices.Equal(flagKeys, policyKeys) {
		t.Errorf("the policy's taintKeys %q are not the registrar's --remove-node-taint keys %q: set the same keys in both", policyKeys, flagKeys)
	}
	if err := conditionTypeMismatch(policy, args); err != "" {
		t.Error(err)
	}
}

// policyDefaultConditionType is the policy's conditionType for the
// registrar's default type, <driver name>/NodePluginRegistered.
const policyDefaultConditionType = "variables.driverName + '/NodePluginRegistered'"

// conditionTypeMismatch says how the policy's conditionType differs from
// the type the registrar's args set; "" when it allows that type alone.
func conditionTypeMismatch(policy *admissionregistrationv1.ValidatingAdmissionPolicy, args []string) string {
	want := policyDefaultConditionType
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--node-condition-type="); ok {
			want = "'" + v + "'"
		}
	}
	for _, v := range policy.Spec.Variables {
		if v.Name == "conditionType" {
			if v.Expression != want {
				return "the policy's conditionType is " + v.Expression + ", not the registrar's condition type " + want + ": set it to the type of --node-condition-type, or to " + policyDefaultConditionType + " without the flag"
			}
			return ""
		}
	}
	return "the policy has no variable conditionType: it would admit no condition"
}

// The check above fails a policy that allows another type than the
// registrar's, and a policy that allows a type with no flag that sets it.
func TestConditionTypeMismatch(t *testing.T) {
	policy := func(expr string) *admissionregistrationv1.ValidatingAdmissionPolicy {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		p.Spec.Variables = []admissionregistrationv1.Variable{{Name: "conditionType", Expression: expr}}
		return p
	}
	custom := []string{"--node-condition", "--node-condition-type=node.gke.io/PDCSIReady"}
	for _, tc := range []struct {
		name   string
		policy *admissionregistrationv1.ValidatingAdmissionPolicy
		args   []string
		wrong  bool
	}{
		{"default", policy(policyDefaultConditionType), []string{"--node-condition"}, false},
		{"custom", policy("'node.gke.io/PDCSIReady'"), custom, false},
		{"custom flag, default policy", policy(policyDefaultConditionType), custom, true},
		{"custom policy, no flag", policy("'node.gke.io/PDCSIReady'"), []string{"--node-condition"}, true},
		{"another custom type", policy("'node.gke.io/Other'"), custom, true},
		{"no variable", &admissionregistrationv1.ValidatingAdmissionPolicy{}, custom, true},
	} {
		if got := conditionTypeMismatch(tc.policy, tc.args); (got != "") != tc.wrong {
			t.Errorf("%s: %q, want a mismatch: %v", tc.name, got, tc.wrong)
		}
	}
}
