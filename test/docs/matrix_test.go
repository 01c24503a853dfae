package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// kubeRelease is a Kubernetes release as the documents name it: v1.37.1.
var kubeRelease = regexp.MustCompile(`\bv1\.[0-9]+\.[0-9]+\b`)

// testedReleases reads test/kubelet/MINORS, the one list of the kubelets
// tested, newest first.
func testedReleases(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "test/kubelet/MINORS"))
	if err != nil {
		t.Fatal(err)
	}
	var releases []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !kubeRelease.MatchString(line) || kubeRelease.FindString(line) != line {
			t.Fatalf("test/kubelet/MINORS: %q is not a release v1.N.P", line)
		}
		releases = append(releases, line)
	}
	if len(releases) < 2 {
		t.Fatalf("test/kubelet/MINORS lists %d releases; the newest and the oldest at least", len(releases))
	}
	return releases
}

// minorOf gives v1.37 for v1.37.1.
func minorOf(release string) string {
	return release[:strings.LastIndex(release, ".")]
}

// sorted returns the distinct releases of names, sorted.
func sorted(names []string) []string {
	names = slices.Clone(names)
	slices.Sort(names)
	return slices.Compact(names)
}

// Each release of test/kubelet/MINORS has its module, which pins it, and
// no other minor has one; the oldest also has make e2e-node's module.
func TestMatrixModulesPinTheList(t *testing.T) {
	releases := testedReleases(t)
	var minors []string
	for _, r := range releases {
		minors = append(minors, minorOf(r))
		goMod, err := os.ReadFile(filepath.Join(repoRoot, "test/kubelet", minorOf(r), "go.mod"))
		if err != nil {
			t.Errorf("test/kubelet/MINORS lists %s: %v (hack/kube-bump.sh %s writes it)", r, err, r)
			continue
		}
		if !strings.Contains(string(goMod), "\nrequire k8s.io/kubernetes "+r+"\n") {
			t.Errorf("test/kubelet/%s/go.mod does not require k8s.io/kubernetes %s, which test/kubelet/MINORS lists", minorOf(r), r)
		}
	}
	dirs, err := filepath.Glob(filepath.Join(repoRoot, "test/kubelet/v1.*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !slices.Contains(minors, filepath.Base(d)) {
			t.Errorf("test/kubelet/%s is not in test/kubelet/MINORS: add it there, or git rm -r it", filepath.Base(d))
		}
	}

	oldest := releases[len(releases)-1]
	goMod, err := os.ReadFile(filepath.Join(repoRoot, "test/node/kubernetes", minorOf(oldest), "go.mod"))
	if err != nil || !strings.Contains(string(goMod), "\nrequire k8s.io/kubernetes "+oldest+"\n") {
		t.Errorf("CI runs make e2e-node KUBE_VERSION=%s, the oldest of test/kubelet/MINORS, but test/node/kubernetes/%s/go.mod does not pin it (hack/kube-bump.sh --node %s)", oldest, minorOf(oldest), oldest)
	}
}

// The README's compatibility paragraph and docs/compatibility.md's matrix
// name exactly the releases of test/kubelet/MINORS, and both say which
// kubelet is the oldest supported.
func TestCompatibilityNamesTheMatrix(t *testing.T) {
	releases := testedReleases(t)
	want := sorted(releases)
	oldestMinor := minorOf(releases[len(releases)-1])
	supported := "kubelet " + oldestMinor + " and later"

	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Compatibility\n")
	if !ok {
		t.Fatal("README.md has no section ## Compatibility")
	}
	paragraph, _, _ := strings.Cut(strings.TrimLeft(section, "\n"), "\n\n")
	if got := sorted(kubeRelease.FindAllString(paragraph, -1)); !slices.Equal(got, want) {
		t.Errorf("README.md's compatibility paragraph names the releases %v; test/kubelet/MINORS lists %v", got, want)
	}
	if !strings.Contains(paragraph, supported) {
		t.Errorf("README.md's compatibility paragraph does not say %q (the oldest of test/kubelet/MINORS)", supported)
	}

	compatibility, err := os.ReadFile(filepath.Join(repoRoot, "docs/compatibility.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok = strings.Cut(string(compatibility), "\n## The matrix\n")
	if !ok {
		t.Fatal("docs/compatibility.md has no section ## The matrix")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var rows []string
	for line := range strings.SplitSeq(section, "\n") {
		if cell, ok := strings.CutPrefix(line, "| "); ok {
			if r := kubeRelease.FindString(cell); r != "" && strings.HasPrefix(cell, r) {
				rows = append(rows, r)
			}
		}
	}
	if got := sorted(rows); !slices.Equal(got, want) || len(rows) != len(want) {
		t.Errorf("docs/compatibility.md's matrix has rows for %v; test/kubelet/MINORS lists %v, one row each", rows, want)
	}
	if !strings.Contains(string(compatibility), "Supported: "+supported) {
		t.Errorf("docs/compatibility.md does not say %q (the oldest of test/kubelet/MINORS)", "Supported: "+supported)
	}
}
