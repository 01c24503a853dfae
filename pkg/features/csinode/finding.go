package csinode

import "fmt"

// Finding is what was last found of the driver in this node's CSINode. Its
// fields are those of pkg/registration's CSINodeReport, so that one
// converts to the other.
type Finding struct {
	// Listed: the CSINode of the current Node lists the driver.
	Listed bool `json:"listed"`
	// Missing: the CSINode does not exist, or does not list the driver: a
	// registration made again by kubelet restores it.
	Missing bool `json:"missing"`
	// Reason says, when not Listed, what was found, in one line.
	Reason string `json:"reason,omitempty"`
}

// csiNode is what the watcher reads of a CSINode.
type csiNode struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
		OwnerReferences []struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			UID        string `json:"uid"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Spec struct {
		Drivers []struct {
			Name string `json:"name"`
		} `json:"drivers"`
	} `json:"spec"`
}

// ownerUID is the UID of the Node that owns the CSINode, as kubelet sets
// it; "" without one.
func (c *csiNode) ownerUID() string {
	for _, o := range c.Metadata.OwnerReferences {
		if o.APIVersion == "v1" && o.Kind == "Node" {
			return o.UID
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

// find says what the CSINode (nil: it does not exist) shows of the driver,
// given the UID of the Node of that name ("": the Node does not exist).
// A CSINode that no Node owns (not one kubelet made) is taken as it is:
// no garbage collector deletes it.
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
	return Finding{Reason: fmt.Sprintf("CSINode %s lists the driver %s but is owned by the Node of UID %s, not by the current Node %s of UID %s: the garbage collector deletes it, and the driver is registered again once it is gone; kubelet 1.35 and later create it again with the old owner until kubelet restarts",
		node, driver, owner, node, nodeUID)}
}
