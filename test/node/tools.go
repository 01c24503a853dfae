//go:build tools

// The Kubernetes components the node test runs, built from this module so
// that their version is pinned by go.mod: go build -o _bin/ <package>.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
