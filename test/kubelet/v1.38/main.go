// Command fakekubelet is the e2e kubelet (package kubelet's Main) built
// with kubelet v1.38's plugin manager, whose API is v1.37's: handlers take
// a context, and DeRegisterPlugin the endpoint.
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
	manager.AddHandler(registerapi.CSIPlugin, handler{k})
	go manager.Run(ctx, config.NewSourcesReady(func(sets.Set[string]) bool { return true }), ctx.Done())
}

// host completes the volume host with v1.38's trust anchors, which take a
// context as v1.37's do.
type host struct{ *kubelet.Host }

var _ volume.KubeletVolumeHost = host{}

func (host) GetTrustAnchorsByName(context.Context, string, bool) ([]byte, error) {
	return nil, kubelet.ErrNotInTest
}

func (host) GetTrustAnchorsBySigner(context.Context, string, *metav1.LabelSelector, bool) ([]byte, error) {
	return nil, kubelet.ErrNotInTest
}

func (host) GetPodCertificateCredentialBundle(context.Context, string, string, string, string, int) ([]byte, []byte, error) {
	return nil, nil, kubelet.ErrNotInTest
}

// handler passes kubelet's calls to the CSI handler and reports each one.
type handler struct{ k *kubelet.Kubelet }

func (h handler) ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error {
	return h.k.Validated(ctx, name, endpoint, versions, csi.PluginHandler.ValidatePlugin(ctx, name, endpoint, versions))
}

func (h handler) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	return h.k.Registered(ctx, name, endpoint, versions, csi.PluginHandler.RegisterPlugin(ctx, name, endpoint, versions, timeout))
}

func (h handler) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	csi.PluginHandler.DeRegisterPlugin(ctx, name, endpoint)
	h.k.Deregistered(ctx, name, endpoint)
}
