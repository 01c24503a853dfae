package nodegate

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/csi-registrar/node-driver-registrar/internal/kubeapi"
)

// ValidateTaintKey checks key as the API server checks taint keys.
func ValidateTaintKey(key string) error {
	return validateQualifiedName("taint key", key, "example.com/agent-not-ready")
}

// ValidateConditionType checks typ as Kubernetes checks condition types.
func ValidateConditionType(typ string) error {
	return validateQualifiedName("condition type", typ, "node.example.com/StorageReady")
}

func validateQualifiedName(what, name, example string) error {
	if errs := validation.IsQualifiedName(name); len(errs) > 0 {
		return fmt.Errorf("%s %q is not valid: %s; e.g. %s", what, name, strings.Join(errs, "; "), example)
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

// conditionPatch is a strategic merge patch of nodes/status: conditions
// merge by type, so kubelet's are left alone. A zero transition leaves
// lastTransitionTime as it is.
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
	return mustMarshal(map[string]any{"status": map[string]any{"conditions": []condition{entry}}})
}

// mustMarshal's patches are made of strings: they always marshal.
func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// jsonPatchOp is one RFC 6902 operation.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

type taint struct {
	Key    string `json:"key"`
	Effect string `json:"effect"`
}

// taintRemovalPatch is a JSON patch, not a strategic merge one: spec.taints
// has no merge key, so that would drop a taint added since the read. Each
// removal is guarded by a test of its key, last index first so the indices
// stay valid; a list changed meanwhile fails whole (422) and is read again.
func taintRemovalPatch(taints []taint, keys []string) ([]byte, []string) {
	var ops []jsonPatchOp
	var removed []string
	for i := len(taints) - 1; i >= 0; i-- {
		if !slices.Contains(keys, taints[i].Key) {
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
	slices.Sort(removed)
	return mustMarshal(ops), removed
}

func nodeObject(node, subresource string) kubeapi.Object {
	return kubeapi.Object{Resource: "nodes", Subresource: subresource, Name: node, Kind: "node", Component: "deploy/node-gate"}
}

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

// removeTaints returns the taints it removed, as key:effect.
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

func setCondition(ctx context.Context, c *kubeapi.Client, node string, patch []byte) error {
	return c.Patch(ctx, nodeObject(node, "status"), types.StrategicMergePatchType, patch, metav1.PatchOptions{})
}
