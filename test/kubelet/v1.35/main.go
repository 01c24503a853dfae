// Command fakekubelet is the e2e kubelet (package kubelet's Main) built
// with kubelet v1.35's plugin manager: handlers without a context (v1.37
// added it), DeRegisterPlugin with the endpoint, and Run with a context.
package main

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/csi"

	"github.com/csi-registrar/node-driver-registrar/test/kubelet"
)

func main() {
	kubelet.Main(kubelet.Minor{Run: run, Host: func(h *kubelet.Host) volume.VolumeHost { return host{h} }})
}

func run(ctx context.Context, registryDir string, recorder record.EventRecorder, k *kubelet.Kubelet) {
	manager := pluginmanager.NewPluginManager(registryDir, recorder)
	manager.AddHandler(registerapi.CSIPlugin, handler{ctx, k})
	go manager.Run(ctx, config.NewSourcesReady(func(sets.Set[string]) bool { return true }), ctx.Done())
}

// host completes the volume host with v1.35's trust anchors, without a
// context, its pod certificates, with one, and GetHostName (gone in v1.36).
type host struct{ *kubelet.Host }

var _ volume.KubeletVolumeHost = host{}

func (h host) GetHostName() string { return string(h.GetNodeName()) }

func (host) GetTrustAnchorsByName(string, bool) ([]byte, error) { return nil, kubelet.ErrNotInTest }

func (host) GetTrustAnchorsBySigner(string, *metav1.LabelSelector, bool) ([]byte, error) {
	return nil, kubelet.ErrNotInTest
}

func (host) GetPodCertificateCredentialBundle(context.Context, string, string, string, string, int) ([]byte, []byte, error) {
	return nil, nil, kubelet.ErrNotInTest
}

// handler passes kubelet's calls to the CSI handler and reports each one;
// ctx is the kubelet's, for the reports.
type handler struct {
	ctx context.Context
	k   *kubelet.Kubelet
}

func (h handler) ValidatePlugin(name, endpoint string, versions []string) error {
	return h.k.Validated(h.ctx, name, endpoint, versions, csi.PluginHandler.ValidatePlugin(name, endpoint, versions))
}

func (h handler) RegisterPlugin(name, endpoint string, versions []string, timeout *time.Duration) error {
	return h.k.Registered(h.ctx, name, endpoint, versions, csi.PluginHandler.RegisterPlugin(name, endpoint, versions, timeout))
}

func (h handler) DeRegisterPlugin(name, endpoint string) {
	csi.PluginHandler.DeRegisterPlugin(name, endpoint)
	h.k.Deregistered(h.ctx, name, endpoint)
}
