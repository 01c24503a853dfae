package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/types"
)

const (
	// deployDir is the repository's deploy/ directory, from this package's.
	deployDir = "../../deploy"
	// overlayDir is the example overlay that deploy/README.md shows, shipped
	// beside deploy/: kustomize refuses a base that contains its overlay.
	overlayDir = "../../deploy-example"
	// livenessOverlayDir is deploy/ with its driver-liveness component.
	livenessOverlayDir = "testdata/driver-liveness-overlay"
	// nodeGateOverlayDir is the base with the deploy/node-gate component.
	nodeGateOverlayDir = "testdata/node-gate-overlay"
	// csiNodeOverlayDir is the base with deploy/csinode and its service
	// account; nodeGateCSINodeOverlayDir with deploy/node-gate and
	// deploy/csinode, which share the node gate's.
	csiNodeOverlayDir         = "testdata/csinode-overlay"
	nodeGateCSINodeOverlayDir = "testdata/node-gate-csinode-overlay"
	// eventsOverlayDir is the base with deploy/events and deploy/csinode's
	// service account; nodeGateCSINodeEventsOverlayDir with deploy/events
	// beside deploy/node-gate and deploy/csinode.
	eventsOverlayDir                = "testdata/events-overlay"
	nodeGateCSINodeEventsOverlayDir = "testdata/node-gate-csinode-events-overlay"
	// monitoringOverlayDir is the base with the deploy/monitoring component.
	monitoringOverlayDir = "testdata/monitoring-overlay"
	// hostNetworkOverlayDir is the base with the deploy/host-network component.
	hostNetworkOverlayDir = "testdata/host-network-overlay"
	// windowsDir is the Windows nodes' base, a HostProcess DaemonSet.
	windowsDir = deployDir + "/windows"
	// recipesDir holds, per chart, a manifest of the chart's node
	// DaemonSet with its recipe from deploy/recipes.
	recipesDir = "testdata/recipes"
)

// manifestFiles lists the YAML files under deploy/ and of the example
// overlay.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, root := range []string{deployDir, overlayDir, livenessOverlayDir, nodeGateOverlayDir, csiNodeOverlayDir, nodeGateCSINodeOverlayDir, eventsOverlayDir, nodeGateCSINodeEventsOverlayDir, monitoringOverlayDir, hostNetworkOverlayDir, recipesDir} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if ext := filepath.Ext(p); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(files) == 0 {
		t.Fatalf("no manifests found under %s", deployDir)
	}
	return files
}

// kustomizationDirs lists the directories that kustomize builds: not the
// components, which only an overlay's build includes.
func kustomizationDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	for _, f := range manifestFiles(t) {
		if filepath.Base(f) == "kustomization.yaml" && !isComponent(t, f) {
			dirs = append(dirs, filepath.Dir(f))
		}
	}
	if len(dirs) == 0 {
		t.Fatalf("no kustomization.yaml under %s", deployDir)
	}
	return dirs
}

// isComponent tells whether a kustomization file is a Component, which only
// an overlay can render.
func isComponent(t *testing.T, file string) bool {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	k, err := DecodeKustomization(data)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return k.Kind == types.ComponentKind
}

func render(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	objs, err := Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// onlyDaemonSet returns the one DaemonSet of a rendering.
func onlyDaemonSet(t *testing.T, objs []runtime.Object) *appsv1.DaemonSet {
	t.Helper()
	var found []*appsv1.DaemonSet
	for _, o := range objs {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			found = append(found, ds)
		}
	}
	if len(found) != 1 {
		t.Fatalf("the rendering holds %d DaemonSets, want 1", len(found))
	}
	return found[0]
}

// Every file decodes strictly into its API type, and every manifest is used
// by a kustomization: a forgotten file would never be deployed.
func TestManifestFilesDecodeStrictly(t *testing.T) {
	files := manifestFiles(t)
	used := map[string]bool{}
	for _, file := range files {
		t.Run(strings.TrimPrefix(file, "../../"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Base(file) == "kustomization.yaml" {
				k, err := DecodeKustomization(data)
				if err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				dir := filepath.Dir(file)
				for _, r := range k.Resources {
					used[filepath.Join(dir, r)] = true
				}
				for _, p := range k.Patches {
					if p.Path != "" {
						used[filepath.Join(dir, p.Path)] = true
					}
				}
				return
			}
			docs, err := SplitDocuments(data)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if len(docs) == 0 {
				t.Fatalf("%s holds no object", file)
			}
			for i, doc := range docs {
				if _, err := DecodeStrict(doc); err != nil {
					t.Errorf("%s, document %d: %v", file, i+1, err)
				}
			}
		})
	}
	for _, file := range files {
		if filepath.Base(file) != "kustomization.yaml" && !used[filepath.Clean(file)] {
			t.Errorf("%s is used by no kustomization.yaml", file)
		}
	}
}

// Every kustomization renders, strictly, into a DaemonSet wired right.
func TestKustomizationsRenderWiredNodePlugins(t *testing.T) {
	for _, dir := range kustomizationDirs(t) {
		t.Run(strings.TrimPrefix(dir, "../../"), func(t *testing.T) {
			ds := onlyDaemonSet(t, render(t, dir))
			for _, err := range CheckNodePlugin(ds) {
				t.Errorf("%s: DaemonSet %s: %v", dir, ds.Name, err)
			}
		})
	}
}

// The example overlay changes what it says it changes: the images, the
// namespace and the driver's socket directory.
func TestExampleOverlay(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(overlayDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	k, err := DecodeKustomization(data)
	if err != nil {
		t.Fatal(err)
	}
	base := onlyDaemonSet(t, render(t, deployDir))
	overlay := onlyDaemonSet(t, render(t, overlayDir))

	if overlay.Namespace != k.Namespace {
		t.Errorf("namespace %q, want the overlay's %q", overlay.Namespace, k.Namespace)
	}
	want := map[string]bool{}
	for _, img := range k.Images {
		want[img.NewName+":"+img.NewTag] = true
	}
	for _, c := range overlay.Spec.Template.Spec.Containers {
		if !want[c.Image] {
			t.Errorf("container %q runs %q, none of the overlay's images %v", c.Name, c.Image, want)
		}
	}
	baseDir := hostPathOf(t, base, "socket-dir")
	overlayDirOnHost := hostPathOf(t, overlay, "socket-dir")
	if baseDir == overlayDirOnHost {
		t.Errorf("the overlay keeps the base's socket directory %q: its driver-name patch did nothing", baseDir)
	}
}

func hostPathOf(t *testing.T, ds *appsv1.DaemonSet, volume string) string {
	t.Helper()
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == volume && v.HostPath != nil {
			return v.HostPath.Path
		}
	}
	t.Fatalf("DaemonSet %s has no hostPath volume %q", ds.Name, volume)
	return ""
}

func TestDecodeStrictRejects(t *testing.T) {
	const valid = `apiVersion: v1
kind: ConfigMap
metadata:
  name: a
data:
  k: v
`
	if _, err := DecodeStrict([]byte(valid)); err != nil {
		t.Fatalf("a valid ConfigMap: %v", err)
	}
	for name, doc := range map[string]string{
		"unknown field":   strings.Replace(valid, "data:", "dta:", 1),
		"duplicate field": valid + "data:\n  k: w\n",
		"unknown kind":    strings.Replace(valid, "ConfigMap", "ConfigMapp", 1),
		"wrong type":      strings.Replace(valid, "name: a", "name: [a]", 1),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeStrict([]byte(doc)); err == nil {
				t.Errorf("decoded without an error:\n%s", doc)
			}
		})
	}
	if _, err := DecodeKustomization([]byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresource:\n- a.yaml\n")); err == nil {
		t.Error("a kustomization with an unknown field decoded without an error")
	}
}
