package nodegate

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/csi-registrar/node-driver-registrar/internal/kubeapi"
)

// ValidateTaintKey checks key as the API server checks a taint's key: an
// optional DNS subdomain prefix and "/", then a name of at most 63
// characters. The expressions are compiled here rather than at start-up,
// which a registrar without taint keys would pay for.
func ValidateTaintKey(key string) error {
	const rule = "a taint key is an optional DNS subdomain prefix and '/', then at most 63 characters of [A-Za-z0-9-_.] that start and end with a letter or digit, e.g. example.com/agent-not-ready"
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		name = prefix
	}
	dnsSubdomain := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	if hasPrefix && (len(prefix) > 253 || !dnsSubdomain.MatchString(prefix)) {
		return fmt.Errorf("taint key %q: the prefix %q is not a DNS subdomain: %s", key, prefix, rule)
	}
	if len(name) > 63 || !regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`).MatchString(name) {
		return fmt.Errorf("taint key %q is not valid: %s", key, rule)
	}
	return nil
}

// ValidateConditionType checks a condition type given in place of the
// default one as Kubernetes checks the types of conditions: a qualified
// name, an optional DNS subdomain prefix and "/", then a name.
func ValidateConditionType(typ string) error {
	if errs := validation.IsQualifiedName(typ); len(errs) > 0 {
		return fmt.Errorf("condition type %q is not valid: %s; e.g. node.example.com/StorageReady", typ, strings.Join(errs, "; "))
	}
	return nil
}

// Condition is a Node condition as the gate sets it.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// conditionPatch is the strategic merge patch of nodes/status that sets c:
// conditions are merged by type, so the others (kubelet's Ready, ...) are
// left alone, and so are the fields the patch leaves out.
// lastTransitionTime is sent only when the status changes (transition is
// not zero); lastHeartbeatTime each time.
func conditionPatch(c Condition, now, transition time.Time) []byte {
	type condition struct {
		Condition
		LastHeartbeatTime  string `json:"lastHeartbeatTime"`
		LastTransitionTime string `json:"lastTransitionTime,omitempty"`
	}
	entry := condition{Condition: c, LastHeartbeatTime: now.UTC().Format(time.RFC3339)}
	if !transition.IsZero() {
		entry.LastTransitionTime = transition.UTC().Format(time.RFC3339)
	}
	var patch struct {
		Status struct {
			Conditions []condition `json:"conditions"`
		} `json:"status"`
	}
	patch.Status.Conditions = []condition{entry}
	return mustMarshal(patch)
}

// mustMarshal is the JSON of a patch: made of strings, it always marshals.
func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// jsonPatchOp is one operation of a JSON patch (RFC 6902).
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// taint is what the gate reads of a Node's taint.
type taint struct {
	Key    string `json:"key"`
	Effect string `json:"effect"`
}

// taintRemovalPatch is the JSON patch that removes, from taints as read,
// every taint whose key is in keys; nil when there is none. spec.taints is
// a list without a merge key: a strategic merge patch would replace it
// whole, and drop a taint added since it was read. Each removal is
// guarded by a test of the key at its index, from the last index to the
// first so that the indices stay valid: if the list changed meanwhile the
// API server applies none of it (422), and the gate reads the node again.
func taintRemovalPatch(taints []taint, keys []string) ([]byte, []string) {
	wanted := map[string]bool{}
	for _, k := range keys {
		wanted[k] = true
	}
	var ops []jsonPatchOp
	var removed []string
	for i := len(taints) - 1; i >= 0; i-- {
		if !wanted[taints[i].Key] {
			continue
		}
		path := fmt.Sprintf("/spec/taints/%d", i)
		ops = append(ops,
			jsonPatchOp{Op: "test", Path: path + "/key", Value: taints[i].Key},
			jsonPatchOp{Op: "remove", Path: path})
		removed = append(removed, taints[i].Key+":"+taints[i].Effect)
	}
	if len(ops) == 0 {
		return nil, nil
	}
	sort.Strings(removed)
	return mustMarshal(ops), removed
}

// nodeObject is the Node named node, or its subresource ("" or "status"),
// as the gate's requests name it.
func nodeObject(node, subresource string) kubeapi.Object {
	return kubeapi.Object{Resource: "nodes", Subresource: subresource, Name: node, Kind: "node", Component: "deploy/node-gate"}
}

// getTaints reads the node's taints.
func getTaints(ctx context.Context, c *kubeapi.Client, node string) ([]taint, error) {
	u, err := c.Get(ctx, nodeObject(node, ""))
	if err != nil {
		return nil, err
	}
	var n struct {
		Spec struct {
			Taints []taint `json:"taints"`
		} `json:"spec"`
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &n); err != nil {
		return nil, fmt.Errorf("node %q: its taints: %w", node, err)
	}
	return n.Spec.Taints, nil
}

// removeTaints removes the node's taints with these keys, and returns
// those it removed as key:effect (none when the node has none of them).
// count is told the outcome of each request.
func removeTaints(ctx context.Context, c *kubeapi.Client, node string, keys []string, count func(request string, err error)) ([]string, error) {
	taints, err := getTaints(ctx, c, node)
	count(RequestGetNode, err)
	if err != nil {
		return nil, err
	}
	patch, removed := taintRemovalPatch(taints, keys)
	if patch == nil {
		return nil, nil
	}
	err = c.Patch(ctx, nodeObject(node, ""), types.JSONPatchType, patch, metav1.PatchOptions{})
	count(RequestRemoveTaints, err)
	if err != nil {
		return nil, err
	}
	return removed, nil
}

// setCondition patches the node's status with one condition.
func setCondition(ctx context.Context, c *kubeapi.Client, node string, patch []byte) error {
	return c.Patch(ctx, nodeObject(node, "status"), types.StrategicMergePatchType, patch, metav1.PatchOptions{})
}
