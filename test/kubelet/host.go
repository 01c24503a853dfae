package kubelet

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	clientset "k8s.io/client-go/kubernetes"
	storagelistersv1 "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/util/hostutil"
	"k8s.io/kubernetes/pkg/volume/util/subpath"
	"k8s.io/mount-utils"
)

// errNotInTest is returned by the volume host functions that only mounting
// uses: the harness registers plugins, it never mounts a volume.
var errNotInTest = errors.New("not available in the e2e kubelet: it registers plugins, it does not mount volumes")

// volumeHost is the part of kubelet that the CSI volume plugin sees: a
// kube client, the node name, informers and a place to report an error that
// keeps the node NotReady. It plays the role of kubelet's kubeletVolumeHost
// (pkg/kubelet/volume_host.go) with everything unrelated to registration
// left out.
type volumeHost struct {
	rootDir         string
	nodeName        types.NodeName
	client          clientset.Interface
	informerFactory informers.SharedInformerFactory
	recorder        record.EventRecorder
	mounter         mount.Interface

	mu         sync.Mutex
	kubeletErr error
}

var (
	_ volume.VolumeHost        = &volumeHost{}
	_ volume.KubeletVolumeHost = &volumeHost{}
)

// err returns what the CSI plugin last reported through SetKubeletError;
// kubelet withholds node readiness while it is not nil.
func (h *volumeHost) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.kubeletErr
}

func (h *volumeHost) SetKubeletError(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kubeletErr = err
}

func (h *volumeHost) GetPluginDir(pluginName string) string {
	return filepath.Join(h.rootDir, "plugins", pluginName)
}

func (h *volumeHost) GetVolumeDevicePluginDir(pluginName string) string {
	return filepath.Join(h.rootDir, "plugins", pluginName, "volumeDevices")
}

func (h *volumeHost) GetPodsDir() string { return filepath.Join(h.rootDir, "pods") }

func (h *volumeHost) GetPodVolumeDir(podUID types.UID, pluginName, volumeName string) string {
	return filepath.Join(h.rootDir, "pods", string(podUID), "volumes", pluginName, volumeName)
}

func (h *volumeHost) GetPodPluginDir(podUID types.UID, pluginName string) string {
	return filepath.Join(h.rootDir, "pods", string(podUID), "plugins", pluginName)
}

func (h *volumeHost) GetPodVolumeDeviceDir(podUID types.UID, pluginName string) string {
	return filepath.Join(h.rootDir, "pods", string(podUID), "volumeDevices", pluginName)
}

func (h *volumeHost) GetKubeClient() clientset.Interface { return h.client }

func (h *volumeHost) NewWrapperMounter(string, volume.Spec, *v1.Pod) (volume.Mounter, error) {
	return nil, errNotInTest
}

func (h *volumeHost) NewWrapperUnmounter(string, volume.Spec, types.UID) (volume.Unmounter, error) {
	return nil, errNotInTest
}

func (h *volumeHost) GetMounter() mount.Interface { return h.mounter }

func (h *volumeHost) GetNodeAllocatable() (v1.ResourceList, error) { return v1.ResourceList{}, nil }

func (h *volumeHost) GetSecretFunc() func(namespace, name string) (*v1.Secret, error) {
	return func(string, string) (*v1.Secret, error) { return nil, errNotInTest }
}

func (h *volumeHost) GetConfigMapFunc() func(namespace, name string) (*v1.ConfigMap, error) {
	return func(string, string) (*v1.ConfigMap, error) { return nil, errNotInTest }
}

func (h *volumeHost) GetServiceAccountTokenFunc() func(namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return func(string, string, *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
		return nil, errNotInTest
	}
}

func (h *volumeHost) DeleteServiceAccountTokenFunc() func(podUID types.UID) {
	return func(types.UID) {}
}

func (h *volumeHost) GetNodeLabels() (map[string]string, error) {
	node, err := h.client.CoreV1().Nodes().Get(context.Background(), string(h.nodeName), metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading node %q: %w", h.nodeName, err)
	}
	return node.Labels, nil
}

func (h *volumeHost) GetNodeName() types.NodeName { return h.nodeName }

func (h *volumeHost) GetAttachedVolumesFromNodeStatus() (map[v1.UniqueVolumeName]string, error) {
	return map[v1.UniqueVolumeName]string{}, nil
}

func (h *volumeHost) GetEventRecorder() record.EventRecorder { return h.recorder }

func (h *volumeHost) GetSubpather() subpath.Interface { return &subpath.FakeSubpath{} }

func (h *volumeHost) GetInformerFactory() informers.SharedInformerFactory { return h.informerFactory }

func (h *volumeHost) CSIDriverLister() storagelistersv1.CSIDriverLister {
	return h.informerFactory.Storage().V1().CSIDrivers().Lister()
}

func (h *volumeHost) CSIDriversSynced() cache.InformerSynced {
	return h.informerFactory.Storage().V1().CSIDrivers().Informer().HasSynced
}

func (h *volumeHost) WaitForCacheSync() error {
	stop := make(chan struct{})
	timer := time.AfterFunc(time.Minute, func() { close(stop) })
	defer timer.Stop()
	if !cache.WaitForCacheSync(stop, h.CSIDriversSynced()) {
		return errors.New("the CSIDriver informer did not sync within a minute")
	}
	return nil
}

func (h *volumeHost) GetHostUtil() hostutil.HostUtils { return hostutil.NewHostUtil() }

func (h *volumeHost) GetTrustAnchorsByName(context.Context, string, bool) ([]byte, error) {
	return nil, errNotInTest
}

func (h *volumeHost) GetTrustAnchorsBySigner(context.Context, string, *metav1.LabelSelector, bool) ([]byte, error) {
	return nil, errNotInTest
}

func (h *volumeHost) GetPodCertificateCredentialBundle(context.Context, string, string, string, string, int) ([]byte, []byte, error) {
	return nil, nil, errNotInTest
}
