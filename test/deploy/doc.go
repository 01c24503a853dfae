// Package deploy checks the example manifests in the repository's deploy/
// directory: every file decodes strictly into its Kubernetes API type, every
// kustomization renders, the DaemonSet it renders is wired the way the
// registrar and kubelet need, and a real kube-apiserver accepts every
// object it renders (a server-side dry run).
//
// It is its own module so that the registrar's go.mod does not carry
// k8s.io/api and kustomize.
package deploy
