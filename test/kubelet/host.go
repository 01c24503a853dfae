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

// ErrNotInTest is returned by the volume host functions that only mounting
// uses: the harness registers plugins, it never mounts a volume.
var ErrNotInTest = errors.New("not available in the e2e kubelet: it registers plugins, it does not mount volumes")

// volumeHost is the part of kubelet that the CSI volume plugin sees: a
// kube client, the node name, informers and a place to report an error that
// keeps the node NotReady. It plays the role of kubelet's kubeletVolumeHost
// (pkg/kubelet/volume_host.go) with everything unrelated to registration
// left out. The methods whose signatures changed between minors (the trust
// anchors, which take a context from v1.37; the cloud provider, gone in
// v1.31) are each minor's module's, which embeds Host; ErrNotInTest is
// their answer.
type Host struct {
	rootDir         string
	nodeName        types.NodeName
	client          clientset.Interface
	informerFactory informers.SharedInformerFactory
	recorder        record.EventRecorder
	mounter         mount.Interface

	mu         sync.Mutex
	kubeletErr error
}

// err returns what the CSI plugin last reported through SetKubeletError;
// kubelet withholds node readiness while it is not nil.
func (h *Host) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.kubeletErr
}

func (h *Host) SetKubeletError(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kubeletErr = err
}

func (h *Host) GetPluginDir(pluginName string) string {
	return filepath.Join(h.rootDir, "plugins", pluginName)
}

func (h *Host) GetVolumeDevicePluginDir(pluginName string) string {
	return filepath.Join(h.rootDir, "plugins", pluginName, "volumeDevices")
}

func (h *Host) GetPodsDir() string { return filepath.Join(h.rootDir, "pods") }

func (h *Host) GetPodVolumeDir(podUID types.UID, pluginName, volumeName string) string {
	return filepath.Join(h.rootDir, "pods", string(podUID), "volumes", pluginName, volumeName)
}

func (h *Host) GetPodPluginDir(podUID types.UID, pluginName string) string {
	return filepath.Join(h.rootDir, "pods", string(podUID), "plugins", pluginName)
}

func (h *Host) GetPodVolumeDeviceDir(podUID types.UID, pluginName string) string {
	return filepath.Join(h.rootDir, "pods", string(podUID), "volumeDevices", pluginName)
}

func (h *Host) GetKubeClient() clientset.Interface { return h.client }

func (h *Host) NewWrapperMounter(string, volume.Spec, *v1.Pod) (volume.Mounter, error) {
	return nil, ErrNotInTest
}

func (h *Host) NewWrapperUnmounter(string, volume.Spec, types.UID) (volume.Unmounter, error) {
	return nil, ErrNotInTest
}

func (h *Host) GetMounter() mount.Interface { return h.mounter }

func (h *Host) GetNodeAllocatable() (v1.ResourceList, error) { return v1.ResourceList{}, nil }

func (h *Host) GetSecretFunc() func(namespace, name string) (*v1.Secret, error) {
	return func(string, string) (*v1.Secret, error) { return nil, ErrNotInTest }
}

func (h *Host) GetConfigMapFunc() func(namespace, name string) (*v1.ConfigMap, error) {
	return func(string, string) (*v1.ConfigMap, error) { return nil, ErrNotInTest }
}

func (h *Host) GetServiceAccountTokenFunc() func(namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return func(string, string, *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
		return nil, ErrNotInTest
	}
}

func (h *Host) DeleteServiceAccountTokenFunc() func(podUID types.UID) {
	return func(types.UID) {}
}

func (h *Host) GetNodeLabels() (map[string]string, error) {
	node, err := h.client.CoreV1().Nodes().Get(context.Background(), string(h.nodeName), metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading node %q: %w", h.nodeName, err)
	}
	return node.Labels, nil
}

func (h *Host) GetNodeName() types.NodeName { return h.nodeName }

func (h *Host) GetAttachedVolumesFromNodeStatus() (map[v1.UniqueVolumeName]string, error) {
	return map[v1.UniqueVolumeName]string{}, nil
}

func (h *Host) GetEventRecorder() record.EventRecorder { return h.recorder }

func (h *Host) GetSubpather() subpath.Interface { return &subpath.FakeSubpath{} }

func (h *Host) GetInformerFactory() informers.SharedInformerFactory { return h.informerFactory }

func (h *Host) CSIDriverLister() storagelistersv1.CSIDriverLister {
	return h.informerFactory.Storage().V1().CSIDrivers().Lister()
}

func (h *Host) CSIDriversSynced() cache.InformerSynced {
	return h.informerFactory.Storage().V1().CSIDrivers().Informer().HasSynced
}

func (h *Host) WaitForCacheSync() error {
	stop := make(chan struct{})
	timer := time.AfterFunc(time.Minute, func() { close(stop) })
	defer timer.Stop()
	if !cache.WaitForCacheSync(stop, h.CSIDriversSynced()) {
		return errors.New("the CSIDriver informer did not sync within a minute")
	}
	return nil
}

func (h *Host) GetHostUtil() hostutil.HostUtils { return hostutil.NewHostUtil() }
