package deploy

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/csi-registrar/node-driver-registrar/test/apiserver"
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

// deploy/events' Role, applied as it is, is all that client-go's event
// recorder needs on a kube-apiserver with RBAC: an Event that repeats three
// times becomes one Event with count 3 on the pod. With the pod's token
// nothing else can be done with events, nor can any be created in
// another namespace.
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
	var created corev1.Pod
	answer, err := s.Do(http.MethodGet, "/api/v1/namespaces/default/pods/"+pod, "", nil)
	if err == nil {
		err = json.Unmarshal(answer, &created)
	}
	if err != nil {
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
	// The authorizer learns of the RoleBinding a moment after its
	// creation, and the recorder drops an Event that is refused.
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := client.Events("default").Create(ctx, probe("default"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			break
		}
		if !apierrors.IsForbidden(err) || time.Now().After(deadline) {
			t.Fatalf("the pod's token may not create an Event in its namespace: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.Events("")})
	recorder := broadcaster.NewRecorder(scheme, corev1.EventSource{Component: "csi-node-driver-registrar", Host: node})
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "default", Name: pod, UID: created.UID}
	for range 3 {
		recorder.Event(ref, corev1.EventTypeWarning, "RegistrationRejected", "kubelet rejected the driver")
	}
	var events corev1.EventList
	for deadline := time.Now().Add(30 * time.Second); ; {
		answer, err := s.Do(http.MethodGet, "/api/v1/namespaces/default/events?fieldSelector="+url.QueryEscape("involvedObject.uid="+string(created.UID)), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		events = corev1.EventList{}
		if err := json.Unmarshal(answer, &events); err != nil {
			t.Fatal(err)
		}
		if len(events.Items) == 1 && events.Items[0].Count == 3 {
			break
		}
		if time.Now().After(deadline) {
			var counts []int32
			for _, e := range events.Items {
				counts = append(counts, e.Count)
			}
			t.Fatalf("after three identical Events the pod has %d, with counts %v; want one with count 3 (the recorder creates one, then patches its count; a refused request is in the recorder's log above)", len(events.Items), counts)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if e := events.Items[0]; e.Reason != "RegistrationRejected" || e.Type != corev1.EventTypeWarning || e.Source.Host != node {
		t.Errorf("the Event is %+v, want the recorder's Warning RegistrationRejected from host %s", e, node)
	}

	name := events.Items[0].Name
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
			_, err := client.Events("default").Update(ctx, &events.Items[0], metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
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
