package nodegate

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

func TestConditionPatch(t *testing.T) {
	now := time.Date(2026, 11, 23, 14, 0, 5, 0, time.UTC)
	since := time.Date(2026, 11, 23, 14, 0, 1, 0, time.FixedZone("CET", 3600))
	c := Condition{Type: "hostpath.csi.k8s.io/NodePluginRegistered", Status: "True", Reason: ReasonRegistered, Message: "kubelet accepted the CSI driver hostpath.csi.k8s.io"}
	cases := []struct {
		name       string
		transition time.Time
		want       string
	}{
		{"status changed", since, `{"status":{"conditions":[{"type":"hostpath.csi.k8s.io/NodePluginRegistered","status":"True","reason":"Registered","message":"kubelet accepted the CSI driver hostpath.csi.k8s.io","lastHeartbeatTime":"2026-11-23T14:00:05Z","lastTransitionTime":"2026-11-23T13:00:01Z"}]}}`},
		// Without a transition the API server keeps the condition's own
		// lastTransitionTime: a strategic merge patch merges the entry.
		{"same status", time.Time{}, `{"status":{"conditions":[{"type":"hostpath.csi.k8s.io/NodePluginRegistered","status":"True","reason":"Registered","message":"kubelet accepted the CSI driver hostpath.csi.k8s.io","lastHeartbeatTime":"2026-11-23T14:00:05Z"}]}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := conditionPatch(c, now, tc.transition); string(got) != tc.want {
				t.Errorf("patch:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestTaintRemovalPatch(t *testing.T) {
	keys := []string{"ebs.csi.aws.com/agent-not-ready", "readiness.k8s.io/storage"}
	cases := []struct {
		name        string
		taints      []taint
		want        string
		wantRemoved []string
	}{
		{"no taints", nil, "", nil},
		{"none of ours", []taint{{"node.kubernetes.io/not-ready", "NoSchedule"}}, "", nil},
		{"one among others", []taint{{"node.kubernetes.io/not-ready", "NoSchedule"}, {"ebs.csi.aws.com/agent-not-ready", "NoExecute"}, {"x", "NoSchedule"}},
			`[{"op":"test","path":"/spec/taints/1/key","value":"ebs.csi.aws.com/agent-not-ready"},{"op":"remove","path":"/spec/taints/1"}]`,
			[]string{"ebs.csi.aws.com/agent-not-ready:NoExecute"}},
		// The last index first, so that each index is still right when
		// its operation runs.
		{"several, one key twice", []taint{{"readiness.k8s.io/storage", "NoSchedule"}, {"x", "NoSchedule"}, {"ebs.csi.aws.com/agent-not-ready", "NoSchedule"}, {"readiness.k8s.io/storage", "NoExecute"}},
			`[{"op":"test","path":"/spec/taints/3/key","value":"readiness.k8s.io/storage"},{"op":"remove","path":"/spec/taints/3"},` +
				`{"op":"test","path":"/spec/taints/2/key","value":"ebs.csi.aws.com/agent-not-ready"},{"op":"remove","path":"/spec/taints/2"},` +
				`{"op":"test","path":"/spec/taints/0/key","value":"readiness.k8s.io/storage"},{"op":"remove","path":"/spec/taints/0"}]`,
			[]string{"ebs.csi.aws.com/agent-not-ready:NoSchedule", "readiness.k8s.io/storage:NoExecute", "readiness.k8s.io/storage:NoSchedule"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, removed := taintRemovalPatch(tc.taints, keys)
			if string(got) != tc.want {
				t.Errorf("patch:\n got %s\nwant %s", got, tc.want)
			}
			if len(removed) != len(tc.wantRemoved) {
				t.Fatalf("removed %q, want %q", removed, tc.wantRemoved)
			}
			for i := range removed {
				if removed[i] != tc.wantRemoved[i] {
					t.Errorf("removed %q, want %q", removed, tc.wantRemoved)
				}
			}
		})
	}
}

func TestValidateTaintKey(t *testing.T) {
	for _, key := range []string{"ebs.csi.aws.com/agent-not-ready", "readiness.k8s.io/StorageReady", "agent-not-ready", "a", "a-1.b/x_y.Z", strings.Repeat("a", 63)} {
		if err := ValidateTaintKey(key); err != nil {
			t.Errorf("%q: %v", key, err)
		}
	}
	for _, key := range []string{"", "/x", "Example.com/x", "a/b/c", "x/", "-x", "x-", strings.Repeat("a", 64), "example.com/a b", "a..b/x", "a-.b/x", "a_b/x", "é"} {
		if err := ValidateTaintKey(key); err == nil {
			t.Errorf("%q accepted", key)
		} else if !strings.Contains(err.Error(), "taint key") {
			t.Errorf("%q: %v", key, err)
		}
	}
}

func TestValidateConditionType(t *testing.T) {
	for _, typ := range []string{"node.gke.io/PDCSIReady", "StorageReady", "hostpath.csi.k8s.io/NodePluginRegistered", "a/" + strings.Repeat("b", 63)} {
		if err := ValidateConditionType(typ); err != nil {
			t.Errorf("%q: %v", typ, err)
		}
	}
	for typ, want := range map[string]string{
		"":                                 "name part must be non-empty",
		"Node.GKE.io/Ready":                "prefix part a lowercase RFC 1123 subdomain",
		"node.gke.io/":                     "name part must be non-empty",
		"node.gke.io/PD CSI Ready":         "name part must consist of alphanumeric characters",
		"a/b/c":                            "with an optional DNS subdomain prefix and '/'",
		"x/" + strings.Repeat("b", 64):     "name part must be no more than 63 bytes",
		"-starts-with-a-dash/StorageReady": "prefix part a lowercase RFC 1123 subdomain",
	} {
		err := ValidateConditionType(typ)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "condition type \""+typ+"\" is not valid") {
			t.Errorf("%q: %v, want an error that names the type and says %q", typ, err, want)
		}
	}
}

// The gate's requests name, when refused, the RBAC rule each needs and
// the component that has it.
func TestForbiddenNamesTheMissingRule(t *testing.T) {
	f := newFakeAPI(t, "n1", taint{"startup", "NoSchedule"})
	f.forbidden["patch nodes/status"] = true
	f.forbidden["patch nodes"] = true
	c := f.client()
	patch := conditionPatch(Condition{Type: "d/NodePluginRegistered", Status: "True"}, zeroTime, zeroTime)
	err := setCondition(context.Background(), c, "n1", patch)
	want := `forbidden: the registrar's service account may not patch nodes/status: its ClusterRole needs the rule {apiGroups: [""], resources: ["nodes/status"], verbs: ["patch"]} (deploy/node-gate has it); the API server said: nodes "n1" is forbidden: User "system:serviceaccount:kube-system:csi" cannot patch resource "nodes/status" in API group "" at the cluster scope`
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}
	_, err = removeTaints(context.Background(), c, "n1", []string{"startup"}, func(string, error) {})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `resources: ["nodes"], verbs: ["patch"]`) {
		t.Errorf("taint removal: %v", err)
	}
}

func TestNodeNotFound(t *testing.T) {
	f := newFakeAPI(t, "n1")
	_, err := getTaints(context.Background(), f.client(), "n2")
	if err == nil || !strings.HasPrefix(err.Error(), `node "n2" not found: the registrar must be given its own node's name`) {
		t.Errorf("got %v", err)
	}
}
