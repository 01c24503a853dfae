package csinode

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Finding is what was found of the driver in this node's CSINode. Its fields
// are pkg/registration's CSINodeReport's, so that one converts to the other.
type Finding struct {
	Listed bool `json:"listed"`
	// Missing: no CSINode, or one without the driver, which a registration
	// made again restores.
	Missing bool   `json:"missing"`
	Reason  string `json:"reason,omitempty"`
}

// csiNode is what the watcher reads of a CSINode: apimachinery's metadata,
// and the drivers' names, so that k8s.io/api's storage types are not linked.
type csiNode struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Drivers []struct {
			Name string `json:"name"`
		} `json:"drivers"`
	} `json:"spec"`
}

func (c *csiNode) ownerUID() string {
	for _, o := range c.OwnerReferences {
		if o.APIVersion == "v1" && o.Kind == "Node" {
			return string(o.UID)
		}
	}
	return ""
}

func (c *csiNode) lists(driver string) bool {
	for _, d := range c.Spec.Drivers {
		if d.Name == driver {
			return true
		}
	}
	return false
}

// find says what c shows of the driver. A CSINode that no Node owns is
// taken as it is: no garbage collector deletes it.
func find(node, driver string, c *csiNode, nodeUID string) Finding {
	switch {
	case c == nil:
		return Finding{Missing: true, Reason: fmt.Sprintf("CSINode %s does not exist", node)}
	case !c.lists(driver):
		return Finding{Missing: true, Reason: fmt.Sprintf("CSINode %s does not list the driver %s", node, driver)}
	case nodeUID == "":
		return Finding{Reason: fmt.Sprintf("Node %s does not exist", node)}
	}
	owner := c.ownerUID()
	if owner == "" || owner == nodeUID {
		return Finding{Listed: true}
	}
	return Finding{Reason: fmt.Sprintf("CSINode %s lists the driver %s but is owned by the Node of UID %s, not by the current Node %s of UID %s: the garbage collector deletes it, and the driver is registered again once it is gone; kubelet 1.35 to 1.37 create it again with the old owner until kubelet restarts",
		node, driver, owner, node, nodeUID)}
}
