package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/csi-registrar/node-driver-registrar/test/node/localnode"
)

// Check 9 (issues 18, 28): the node starts with a startup taint; the
// registrar, with deploy/node-gate's account, policy and flags, removes it
// once kubelet has registered the driver and sets the node condition. Every
// DaemonSet tolerates every taint, so only this check, last, depends on it.

const (
	startupTaint             = "e2e-node.example.com/agent-not-ready"
	revNodeGate     revision = 9
	gateAccount              = "csi-node" // deploy/node-gate's
	waitingPod               = "needs-the-driver"
	maxUntaintDelay          = time.Second
	gatePolicy               = "csi-node-gate" // deploy/node-gate's
)

var nodeCondition = corev1.NodeConditionType(localnode.DriverName + "/NodePluginRegistered")

// withAccount gives the pods deploy/node-gate's and deploy/csinode's
// service account, and the API server's address: with no kube-proxy the
// kubernetes Service's IP reaches nothing.
func withAccount(pod *corev1.PodSpec, ctr *corev1.Container) {
	pod.ServiceAccountName = gateAccount
	automount := true
	pod.AutomountServiceAccountToken = &automount
	ctr.Env = append(ctr.Env,
		corev1.EnvVar{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: "127.0.0.1"},
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: "6443"})
}

type nodeTimeline struct {
	mu         sync.Mutex
	untainted  time.Time
	conditions []string // status:reason, at each change
	condAt     []time.Time
}

func (n *nodeTimeline) record(node *corev1.Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !startupTainted(node) && n.untainted.IsZero() {
		n.untainted = time.Now()
	}
	for _, c := range node.Status.Conditions {
		if c.Type != nodeCondition {
			continue
		}
		s := string(c.Status) + ":" + c.Reason
		if len(n.conditions) == 0 || n.conditions[len(n.conditions)-1] != s {
			n.conditions = append(n.conditions, s)
			n.condAt = append(n.condAt, time.Now())
		}
	}
}

func startupTainted(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == startupTaint })
}

// waitCondition waits for the node's condition's status:reason want.
func (n *nodeTimeline) waitCondition(ctx context.Context, want string, timeout time.Duration) (time.Time, error) {
	var at time.Time
	err := localnode.WaitFor(ctx, "the condition "+want, timeout, 50*time.Millisecond, nil, func(context.Context) (bool, error) {
		n.mu.Lock()
		defer n.mu.Unlock()
		if last := len(n.conditions) - 1; last >= 0 && n.conditions[last] == want {
			at = n.condAt[last]
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		_, conds := n.snapshot()
		return at, fmt.Errorf("%v (condition changes: %v)", err, conds)
	}
	return at, nil
}

func (n *nodeTimeline) snapshot() (time.Time, []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.untainted, append([]string(nil), n.conditions...)
}

func watchNode(ctx context.Context, client kubernetes.Interface, n *nodeTimeline) {
	selector := fields.OneTermEqualSelector("metadata.name", localnode.NodeName).String()
	localnode.WatchEach(ctx, func(ctx context.Context) (watch.Interface, error) {
		return client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: selector})
	}, func(e watch.Event) bool {
		if node, ok := e.Object.(*corev1.Node); ok && e.Type != watch.Deleted {
			n.record(node)
		}
		return true
	})
}

func watchScheduled(ctx context.Context, client kubernetes.Interface, scheduled chan<- time.Time) {
	selector := fields.OneTermEqualSelector("metadata.name", waitingPod).String()
	localnode.WatchEach(ctx, func(ctx context.Context) (watch.Interface, error) {
		return client.CoreV1().Pods(localnode.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: selector})
	}, func(e watch.Event) bool {
		if p, ok := e.Object.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			scheduled <- time.Now()
			return false
		}
		return true
	})
}

func (s *suite) setUpNodeGate(ctx context.Context) (string, error) {
	if err := s.RemoveDaemonSet(ctx, "csi-node", localnode.DriverName); err != nil {
		return "", fmt.Errorf("removing the earlier checks' DaemonSet: %w", err)
	}
	node, err := s.Client.CoreV1().Nodes().Get(ctx, localnode.NodeName, getOpts)
	if err != nil {
		return "", err
	}
	if !startupTainted(node) {
		return "", fmt.Errorf("the node does not have the startup taint %s before the check: %v", startupTaint, node.Spec.Taints)
	}
	withTaint := func(obj *unstructured.Unstructured) bool {
		variables, _, _ := unstructured.NestedSlice(obj.Object, "spec", "variables")
		for _, v := range variables {
			if m, ok := v.(map[string]any); ok && m["name"] == "taintKeys" {
				m["expression"] = "['" + startupTaint + "']"
			}
		}
		if variables != nil {
			return unstructured.SetNestedSlice(obj.Object, variables, "spec", "variables") == nil
		}
		return true
	}
	if err := s.ApplyManifests(ctx, withTaint, s.DeployFile("node-gate/rbac.yaml"), s.DeployFile("node-gate/policy.yaml")); err != nil {
		return "", err
	}
	if err := s.typeCheckGatePolicy(ctx); err != nil {
		return "", err
	}
	return s.waitForGatePolicy(ctx)
}

// typeCheckGatePolicy fails on any warning of kube-controller-manager's
// type check of the policy against the Node schema.
func (s *suite) typeCheckGatePolicy(ctx context.Context) error {
	var warnings []admissionregistrationv1.ExpressionWarning
	err := localnode.WaitFor(ctx, "kube-controller-manager's type check of the ValidatingAdmissionPolicy "+gatePolicy, time.Minute, 100*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		policy, err := s.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, gatePolicy, getOpts)
		if err != nil || policy.Status.TypeChecking == nil {
			return false, err
		}
		warnings = policy.Status.TypeChecking.ExpressionWarnings
		return true, nil
	})
	if err != nil {
		return err
	}
	if len(warnings) > 0 {
		return fmt.Errorf("the ValidatingAdmissionPolicy %s does not type-check against the Node schema: %+v", gatePolicy, warnings)
	}
	return nil
}

// waitForGatePolicy: the API server enforces a policy a moment after its
// creation.
func (s *suite) waitForGatePolicy(ctx context.Context) (string, error) {
	token, err := s.Client.CoreV1().ServiceAccounts(localnode.Namespace).CreateToken(ctx, gateAccount, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token of the service account %s: %w", gateAccount, err)
	}
	unbound, err := kubernetes.NewForConfig(&rest.Config{Host: localnode.APIServer, BearerToken: token.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.Path("apiserver", "apiserver.crt")}})
	if err != nil {
		return "", err
	}
	var refusal string
	err = localnode.WaitFor(ctx, "the API server enforcing the ValidatingAdmissionPolicy "+gatePolicy, time.Minute, 100*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		_, err := unbound.CoreV1().Nodes().Patch(ctx, localnode.NodeName, types.MergePatchType, []byte(`{"metadata":{"labels":{"e2e-node.example.com/probe":"x"}}}`),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+gatePolicy+"'") {
			refusal = err.Error()
			return true, nil
		}
		return false, err
	})
	return refusal, err
}

func (s *suite) checkNodeGate(ctx context.Context) bool {
	const name = "9. startup taint removed and node condition set on registration (--remove-node-taint, --node-condition)"
	refusal, err := s.setUpNodeGate(ctx)
	if err != nil {
		return s.report(name, false, "%v", err)
	}

	var timeline nodeTimeline
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go watchNode(watchCtx, s.Client, &timeline)
	scheduled := make(chan time.Time, 1)
	go watchScheduled(watchCtx, s.Client, scheduled)

	defer func() {
		_ = s.Client.CoreV1().Pods(localnode.Namespace).Delete(context.WithoutCancel(ctx), waitingPod, metav1.DeleteOptions{})
	}()
	unschedulable, err := s.startWaitingPod(ctx)
	if err != nil {
		return s.report(name, false, "%v", err)
	}

	began := time.Now()
	if err := s.redeploy(ctx, revNodeGate); err != nil {
		return s.report(name, false, "%v", err)
	}
	reg, _ := s.watch.WaitUntil(ctx, time.Second, localnode.IsRegistered)
	scheduledAt, err := s.waitingPodRuns(ctx, scheduled)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	if _, err := timeline.waitCondition(ctx, "True:Registered", 30*time.Second); err != nil {
		return s.report(name, false, "%v", err)
	}
	untainted, _ := timeline.snapshot()
	untaintDelay := untainted.Sub(reg.At)
	status := metricLine(fmt.Sprintf("http://127.0.0.1:%d/metrics", revNodeGate.port()), "csi_node_driver_registrar_node_update_pending")

	falseAfter, stillTainted, err := s.removeGatedDriver(ctx, &timeline)
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	_, conds := timeline.snapshot()
	ok := !reg.At.IsZero() && !untainted.IsZero() && untaintDelay >= 0 && untaintDelay <= maxUntaintDelay &&
		!scheduledAt.IsZero() && !scheduledAt.Before(reg.At) && !stillTainted
	return s.report(name, ok, "policy %s enforced (a token bound to no pod: %q); node tainted %s at start; pod Pending (%q); DaemonSet created → driver registered +%s → taint gone +%s after the registration (at most %s) → pod on the node +%s after the registration, Running; %s; condition %v; DaemonSet deleted → False +%s; taint not added back: %v",
		gatePolicy, refusal, startupTaint, unschedulable, ms(reg.At.Sub(began)), ms(untaintDelay), maxUntaintDelay, ms(scheduledAt.Sub(reg.At)), status, conds, ms(falseAfter), !stillTainted)
}

func (s *suite) waitingPodRuns(ctx context.Context, scheduled <-chan time.Time) (time.Time, error) {
	var scheduledAt time.Time
	select {
	case scheduledAt = <-scheduled:
	case <-time.After(time.Minute):
		var taints []corev1.Taint
		if n, err := s.Client.CoreV1().Nodes().Get(ctx, localnode.NodeName, getOpts); err == nil {
			taints = n.Spec.Taints
		}
		return scheduledAt, fmt.Errorf("the pod was not scheduled within 1m of the driver's registration; the node's taints: %v", taints)
	}
	_, err := s.waitPod(ctx, waitingPod, "the pod Running", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	return scheduledAt, err
}

func (s *suite) removeGatedDriver(ctx context.Context, timeline *nodeTimeline) (time.Duration, bool, error) {
	deleted := time.Now()
	if err := s.RemoveDaemonSet(ctx, "csi-node", localnode.DriverName); err != nil {
		return 0, false, err
	}
	falseAt, err := timeline.waitCondition(ctx, "False:Unregistered", 30*time.Second)
	if err != nil {
		return 0, false, fmt.Errorf("after the DaemonSet's deletion: %w", err)
	}
	n, err := s.Client.CoreV1().Nodes().Get(ctx, localnode.NodeName, getOpts)
	return falseAt.Sub(deleted), err == nil && startupTainted(n), nil
}

// startWaitingPod creates a pod that stands for one that needs the driver
// (the test driver mounts nothing).
func (s *suite) startWaitingPod(ctx context.Context) (string, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: waitingPod, Namespace: localnode.Namespace},
		Spec: corev1.PodSpec{
			HostNetwork:                  true,
			DNSPolicy:                    corev1.DNSDefault,
			AutomountServiceAccountToken: new(bool),
			// No node lifecycle controller takes the API server's
			// not-ready taint away (TaintNodesByCondition).
			Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers:  []corev1.Container{{Name: "app", Image: "localhost/e2e-node/pause:1", ImagePullPolicy: corev1.PullNever}},
		},
	}
	if _, err := s.Client.CoreV1().Pods(localnode.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create pod: %w", err)
	}
	var unschedulable string
	_, err := s.waitPod(ctx, waitingPod, "the pod Unschedulable because of the taint", time.Minute, func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				unschedulable = c.Message
			}
		}
		return unschedulable != ""
	})
	return unschedulable, err
}
