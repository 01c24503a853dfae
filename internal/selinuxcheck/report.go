// Package selinuxcheck tells, on a node where SELinux is on, the labels of
// what kubelet must reach to register a CSI driver (the registry directory,
// the registration socket, the driver's socket) and whether the loaded
// policy lets kubelet reach them. Where SELinux is off it reports nothing.
//
// It reads only what the kernel offers any process: a file's label is its
// security.selinux attribute, a process's is /proc/<pid>/attr/current, the
// driver's is the peer label of a connection to its socket. Whether kubelet
// may reach a file is the policy's answer to a compute_av request on
// selinuxfs's access file, the call libselinux's security_compute_av makes;
// it needs selinuxfs mounted read-write in the container and the
// container's domain allowed compute_av, which most pods are not, so a
// report often has the labels and says why the policy was not asked.
package selinuxcheck

import (
	"fmt"
	"strings"
	"time"
)

// Config names what kubelet must reach, as this container sees it.
type Config struct {
	// RegistryDir is --plugin-registration-path.
	RegistryDir string
	// Socket is the registration socket; "" when none is published.
	Socket string
	// DriverSocket is --csi-address's path.
	DriverSocket string
	// DialTimeout bounds the connection to the driver that reads its
	// label; a second when zero.
	DialTimeout time.Duration
}

// Report is what SELinux says. Its JSON is /status's "selinux".
type Report struct {
	// Mode is "enforcing", "permissive", or "unknown" when selinuxfs is
	// not visible in this container.
	Mode string `json:"mode"`
	// Registrar is this process's context.
	Registrar string `json:"registrar,omitempty"`
	// Driver is the context of the process serving the driver's socket.
	Driver string `json:"driver,omitempty"`
	// Kubelet is the context the policy was asked about for kubelet, and
	// KubeletSource where it comes from: a process seen, or the domain
	// the loaded policy defines for kubelet.
	Kubelet       string `json:"kubelet,omitempty"`
	KubeletSource string `json:"kubeletSource,omitempty"`
	Files         []File `json:"files"`
	// KubeletCanReach is set when the policy was asked: false when it
	// denies kubelet something it needs. RegistrarCanPublish likewise,
	// for this process creating the socket in the registry directory.
	KubeletCanReach     *bool `json:"kubeletCanReach,omitempty"`
	RegistrarCanPublish *bool `json:"registrarCanPublish,omitempty"`
	// Denials are the permissions the policy does not grant.
	Denials []Denial `json:"denials,omitempty"`
	// Unchecked says why the policy was not asked, when it was not.
	Unchecked string `json:"unchecked,omitempty"`
}

// File is one file kubelet must reach, with its label.
type File struct {
	What  string `json:"what"`
	Path  string `json:"path"`
	Label string `json:"label,omitempty"`
	Error string `json:"error,omitempty"`
}

// Denial is what the policy does not grant one process on one object.
type Denial struct {
	// Who is "kubelet" or "registrar".
	Who         string   `json:"who"`
	Source      string   `json:"scontext"`
	Target      string   `json:"tcontext"`
	Class       string   `json:"tclass"`
	Permissions []string `json:"permissions"`
	// Object says what the target is: "the registry directory /registration".
	Object string `json:"object"`
}

func (d Denial) String() string {
	return fmt.Sprintf("%s (%s) may not { %s } %s (%s %s)", d.Who, typeOf(d.Source), strings.Join(d.Permissions, " "), d.Object, d.Class, d.Target)
}

// What files are, in Report.Files and Denial.Object.
const (
	WhatRegistryDir     = "registry directory"
	WhatSocket          = "registration socket"
	WhatDriverSocket    = "driver socket"
	WhatDriverSocketDir = "driver socket's directory"
)

// Summary says in one line what the report means for the registration.
func (r *Report) Summary() string {
	var b strings.Builder
	if r.Mode == "unknown" {
		b.WriteString("SELinux on (mode unknown)")
	} else {
		b.WriteString("SELinux " + r.Mode)
	}
	if len(r.Denials) > 0 {
		var ds []string
		for _, d := range r.Denials {
			ds = append(ds, d.String())
		}
		b.WriteString(": " + strings.Join(ds, "; "))
		if r.Mode == "permissive" {
			b.WriteString(" (denied once SELinux enforces; allowed and logged now)")
		}
	}
	var ls []string
	for _, f := range r.Files {
		if f.Label != "" {
			ls = append(ls, fmt.Sprintf("%s %s", f.What, f.Label))
		} else {
			ls = append(ls, fmt.Sprintf("%s: %s", f.What, f.Error))
		}
	}
	b.WriteString("; labels: " + strings.Join(ls, ", "))
	if r.Registrar != "" {
		b.WriteString("; registrar " + r.Registrar)
	}
	if r.Driver != "" {
		b.WriteString(", driver " + r.Driver)
	}
	switch {
	case r.Unchecked != "":
		b.WriteString("; whether kubelet may reach them is not known: " + r.Unchecked + ". Look for avc denials of comm=\"kubelet\" in the node's audit log (ausearch -m avc -c kubelet)")
	case len(r.Denials) == 0:
		fmt.Fprintf(&b, "; the policy lets kubelet (%s, %s) reach them", r.Kubelet, r.KubeletSource)
	default:
		fmt.Fprintf(&b, "; kubelet is %s (%s)", r.Kubelet, r.KubeletSource)
	}
	return b.String()
}

// Problem tells whether the report shows a denial.
func (r *Report) Problem() bool { return r != nil && len(r.Denials) > 0 }

// typeOf is a context's type, or the context when it has none.
func typeOf(context string) string {
	parts := strings.SplitN(context, ":", 4)
	if len(parts) < 3 {
		return context
	}
	return parts[2]
}
