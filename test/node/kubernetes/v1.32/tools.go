//go:build tools

// The Kubernetes components that make e2e-node KUBE_VERSION=v1.32.13 runs,
// built from this module so that go.mod pins their version:
// go build -o <dir>/ <package>. The node test's own program stays in
// test/node, built at test/node's version: it talks to these components
// through their APIs only.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
