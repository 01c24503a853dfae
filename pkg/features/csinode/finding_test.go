package csinode

import (
	"encoding/json"
	"testing"
)

func TestFind(t *testing.T) {
	const node, driver = "n1", "d.csi.example.com"
	object := func(js string) *csiNode {
		c := &csiNode{}
		if err := json.Unmarshal([]byte(js), c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	owned := `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"n1","uid":"uid-1"}]},"spec":{"drivers":[{"name":"other"},{"name":"d.csi.example.com","nodeID":"x"}]}}`
	for _, tc := range []struct {
		name    string
		csiNode *csiNode
		nodeUID string
		want    Finding
	}{
		{"no CSINode", nil, "uid-1", Finding{Missing: true, Reason: "CSINode n1 does not exist"}},
		{"without the driver", object(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Node","uid":"uid-1"}]},"spec":{"drivers":[{"name":"other"}]}}`), "uid-1",
			Finding{Missing: true, Reason: "CSINode n1 does not list the driver d.csi.example.com"}},
		{"no drivers, no Node", object(`{"spec":{}}`), "", Finding{Missing: true, Reason: "CSINode n1 does not list the driver d.csi.example.com"}},
		{"listed, owned by the Node", object(owned), "uid-1", Finding{Listed: true}},
		{"listed, no owner", object(`{"spec":{"drivers":[{"name":"d.csi.example.com"}]}}`), "uid-1", Finding{Listed: true}},
		{"listed, an owner of another kind", object(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Pod","uid":"uid-9"}]},"spec":{"drivers":[{"name":"d.csi.example.com"}]}}`), "uid-1", Finding{Listed: true}},
		{"listed, the Node replaced", object(owned), "uid-2", Finding{Reason: "CSINode n1 lists the driver d.csi.example.com but is owned by the Node of UID uid-1, not by the current Node n1 of UID uid-2: the garbage collector deletes it, and the driver is registered again once it is gone; kubelet 1.35 to 1.37 create it again with the old owner until kubelet restarts"}},
		{"listed, no Node", object(owned), "", Finding{Reason: "Node n1 does not exist"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := find(node, driver, tc.csiNode, tc.nodeUID); got != tc.want {
				t.Errorf("find = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
