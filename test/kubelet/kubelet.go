// Package kubelet runs the part of kubelet that registers CSI drivers: the
// real plugin manager (k8s.io/kubernetes/pkg/kubelet/pluginmanager) with the
// real CSI registration handler (k8s.io/kubernetes/pkg/volume/csi), wired as
// kubelet wires them, against a fake API server holding the node's Node
// object. Every handler call is reported as a report.Event.
//
// The CSI volume plugin keeps process-global state (its driver registry, its
// node info manager), so Start succeeds once per process; a kubelet restart
// is a new process (Main).
//
// Kubelet's Go API for the plugin manager differs between minors (handlers
// take a context from v1.37, the manager's Run in v1.35 but not v1.33,
// DeRegisterPlugin the endpoint from v1.33): each minor's module
// (test/kubelet/MINORS lists them, one directory each below this one) pins
// k8s.io/kubernetes and gives Main the plugin manager, wired with that
// minor's API. This package is the rest, built unchanged against each: its
// go.mod requires the oldest minor, and each minor's module raises it.
//
// What kubelet v1.37 does when registration fails, read from v1.37.1's
// pkg/kubelet/pluginmanager (operationexecutor/operation_generator.go,
// reconciler/reconciler.go, pkg/util/goroutinemap):
//   - A failed dial or GetInfo returns an error without any notification.
//   - A failed ValidatePlugin, an unknown plugin type, or a failed
//     RegisterPlugin (for CSI: NodeGetInfo failing, or writing CSINode or the
//     Node annotation failing) is sent to the plugin with
//     NotifyRegistrationStatus{PluginRegistered: false, Error: reason}. For
//     RegisterPlugin the reason is "RegisterPlugin error -- plugin
//     registration failed with err: <handler error>"; the CSI handler has
//     already dropped the driver from its registry and from CSINode, and the
//     plugin manager removes the socket from its actual state.
//   - The operation then ends with an error (the reason, with ": <gRPC
//     error>" appended if the notification itself failed). goroutinemap logs
//     it at error level as `Operation for "<socket>" failed. No retries
//     permitted until ... Error: ...` and backs off, 500 ms doubling up to
//     2m2s.
//   - The socket is still in the desired state, so the reconciler (every 1 s)
//     runs the whole registration again once the backoff has passed, for as
//     long as the socket exists: kubelet v1.37 does retry a failed
//     RegisterPlugin by itself (seen here: attempts 1 s, then 2 s apart, the
//     1 s reconcile period rounding the backoff up).
//     A registrar that exits and removes its socket ends the retries.
//   - The backoff is kept per socket path and cleared only by a success: a
//     socket re-created at the same path is registered no sooner than the
//     last failure's backoff allows.
//   - If NotifyRegistrationStatus(true) fails after a successful
//     RegisterPlugin, kubelet deregisters the driver again and retries the
//     same way.
package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/csi"
	"k8s.io/mount-utils"

	"github.com/csi-registrar/node-driver-registrar/test/kubelet/report"
)

// Config says where the kubelet looks for plugins and which node it runs.
type Config struct {
	// RegistryDir is the directory the plugin manager watches, kubelet's
	// <root-dir>/plugins_registry.
	RegistryDir string
	// RootDir stands for kubelet's --root-dir; nothing is written there
	// while only registering plugins.
	RootDir string
	// NodeName is the name of the Node object the kubelet owns.
	NodeName string
	// CSINodeInitTimeout bounds the wait for the CSI plugin to create the
	// node's CSINode object; zero means 30 s.
	CSINodeInitTimeout time.Duration
}

// Kubelet is a running plugin manager with the CSI handler.
type Kubelet struct {
	client   *fake.Clientset
	nodeName string
	emit     func(report.Event)

	// mu orders the reports: each snapshot is taken and emitted under it,
	// so consecutive events never show the API objects going back in time.
	mu sync.Mutex
	// nodes counts the Node objects created, the first one included: the
	// next one's UID.
	nodes int
}

// nodeUID is the UID of the n-th Node object of that name: the fake API
// server gives none.
func nodeUID(name string, n int) types.UID {
	return types.UID(fmt.Sprintf("%s-uid-%d", name, n))
}

var started atomic.Bool

// RunPluginManager starts kubelet's plugin manager on registryDir, with a
// handler for CSI plugins that passes each call to csi.PluginHandler and
// tells k of it (Validated, Registered, Deregistered); it runs until ctx is
// done. Each minor's module gives its own, in that minor's API.
type RunPluginManager func(ctx context.Context, registryDir string, recorder record.EventRecorder, k *Kubelet)

// Minor is what each minor's module gives: its plugin manager, and the
// volume host completed with the methods whose signatures it changed.
type Minor struct {
	Run  RunPluginManager
	Host func(*Host) volume.VolumeHost
}

// Start initialises the CSI volume plugin as kubelet does, waits until it
// has created the CSINode object, starts the plugin manager and returns.
// Each handler call is passed to emit (one call at a time). The plugin
// manager stops when ctx is done.
func Start(ctx context.Context, cfg Config, minor Minor, emit func(report.Event)) (*Kubelet, error) {
	if !started.CompareAndSwap(false, true) {
		return nil, errors.New("the CSI volume plugin keeps global state: start one kubelet per process")
	}

	if cfg.CSINodeInitTimeout == 0 {
		cfg.CSINodeInitTimeout = 30 * time.Second
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: cfg.NodeName, UID: nodeUID(cfg.NodeName, 1)}}
	// NewSimpleClientset: NewClientset came in v1.31.
	client := fake.NewSimpleClientset(node)
	host := &Host{
		rootDir:         cfg.RootDir,
		nodeName:        types.NodeName(cfg.NodeName),
		client:          client,
		informerFactory: informers.NewSharedInformerFactory(client, 0),
		recorder:        &record.FakeRecorder{},
		mounter:         mount.NewFakeMounter(nil),
	}

	// As kubelet does at start-up (volume plugin manager, then informers):
	// csiPlugin.Init sets csi.PluginHandler's plugin and the node info
	// manager, and creates CSINode in the background, holding the node
	// NotReady through SetKubeletError until it has.
	var plugins volume.VolumePluginMgr
	if err := plugins.InitPlugins(csi.ProbeVolumePlugins(), nil, minor.Host(host)); err != nil {
		return nil, fmt.Errorf("initialising the CSI volume plugin: %w", err)
	}
	host.informerFactory.Start(ctx.Done())
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, cfg.CSINodeInitTimeout, true, func(context.Context) (bool, error) {
		return host.err() == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the CSI volume plugin did not initialise CSINode %q: %v (last error: %v)", cfg.NodeName, err, host.err())
	}

	k := &Kubelet{client: client, nodeName: cfg.NodeName, emit: emit, nodes: 1}
	minor.Run(ctx, cfg.RegistryDir, host.recorder, k)

	k.report(ctx, report.Event{Kind: report.Ready, Version: kubernetesVersion()})
	return k, nil
}

// State reads what the node's API objects say about CSI drivers.
func (k *Kubelet) State(ctx context.Context) report.State {
	var state report.State
	var errs []error
	csiNode, err := k.client.StorageV1().CSINodes().Get(ctx, k.nodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		errs = append(errs, fmt.Errorf("reading CSINode: %w", err))
	default:
		for _, d := range csiNode.Spec.Drivers {
			state.Drivers = append(state.Drivers, report.Driver{Name: d.Name, NodeID: d.NodeID})
		}
		for _, o := range csiNode.OwnerReferences {
			if o.Kind == "Node" {
				state.CSINodeOwner = string(o.UID)
			}
		}
	}
	node, err := k.client.CoreV1().Nodes().Get(ctx, k.nodeName, metav1.GetOptions{})
	if err != nil {
		errs = append(errs, fmt.Errorf("reading Node: %w", err))
	} else {
		state.NodeUID = string(node.UID)
		if raw, ok := node.Annotations[report.NodeIDAnnotation]; ok {
			if err := json.Unmarshal([]byte(raw), &state.NodeIDs); err != nil {
				errs = append(errs, fmt.Errorf("node annotation %s=%q: %w", report.NodeIDAnnotation, raw, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		state.ReadError = err.Error()
	}
	return state
}

func (k *Kubelet) report(ctx context.Context, e report.Event) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e.State = k.State(ctx)
	k.emit(e)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ReplaceNode does what node repair and the garbage collector do to a
// node's objects, without kubelet: it deletes the Node, creates it again
// under the same name with its labels, annotations and spec but a new UID,
// then deletes the CSINode that the old Node owned. What kubelet does next
// is its own: the test registers a driver again and reads CSINode's owner.
func (k *Kubelet) ReplaceNode(ctx context.Context) error {
	nodes := k.client.CoreV1().Nodes()
	old, err := nodes.Get(ctx, k.nodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the Node to replace: %w", err)
	}
	if err := nodes.Delete(ctx, k.nodeName, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting the Node: %w", err)
	}
	k.mu.Lock()
	k.nodes++
	uid := nodeUID(k.nodeName, k.nodes)
	k.mu.Unlock()
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: old.Name, UID: uid, Labels: old.Labels, Annotations: old.Annotations},
		Spec:       old.Spec,
	}
	if _, err := nodes.Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the Node again: %w", err)
	}
	csiNodes := k.client.StorageV1().CSINodes()
	csiNode, err := csiNodes.Get(ctx, k.nodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading CSINode: %w", err)
	default:
		for _, o := range csiNode.OwnerReferences {
			if o.UID == old.UID {
				if err := csiNodes.Delete(ctx, k.nodeName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("deleting the old Node's CSINode: %w", err)
				}
			}
		}
	}
	k.report(ctx, report.Event{Kind: report.NodeReplaced})
	return nil
}

// Validated reports kubelet's ValidatePlugin call and returns its outcome.
func (k *Kubelet) Validated(ctx context.Context, name, endpoint string, versions []string, err error) error {
	k.report(ctx, report.Event{Kind: report.Validate, Driver: name, Endpoint: endpoint, Versions: versions, Error: errText(err)})
	return err
}

// Registered reports kubelet's RegisterPlugin call and returns its outcome.
func (k *Kubelet) Registered(ctx context.Context, name, endpoint string, versions []string, err error) error {
	k.report(ctx, report.Event{Kind: report.Register, Driver: name, Endpoint: endpoint, Versions: versions, Error: errText(err)})
	return err
}

// Deregistered reports kubelet's DeRegisterPlugin call; endpoint is empty
// before v1.33, whose call has none.
func (k *Kubelet) Deregistered(ctx context.Context, name, endpoint string) {
	k.report(ctx, report.Event{Kind: report.Deregister, Driver: name, Endpoint: endpoint})
}

// kubernetesVersion is the version of k8s.io/kubernetes built in, as the
// module that pins it says.
func kubernetesVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, dep := range info.Deps {
		if dep.Path == "k8s.io/kubernetes" {
			if dep.Replace != nil {
				return dep.Replace.Version
			}
			return dep.Version
		}
	}
	return "unknown"
}
