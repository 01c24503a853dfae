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

// pinnedRelease finds the k8s.io/kubernetes release that a module's go.mod
// requires, on a require line of its own or in a block (go mod tidy of Go
// 1.27 merges the direct requirements into one).
var pinnedRelease = regexp.MustCompile(`(?m)^(?:require )?[ \t]*k8s\.io/kubernetes (v1\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?)$`)

// pins gives the release goMod requires of k8s.io/kubernetes, and whether it
// is a prerelease.
func pins(goMod []byte) (release string, prerelease bool) {
	m := pinnedRelease.FindSubmatch(goMod)
	if m == nil {
		return "", false
	}
	return string(m[1]), len(m[2]) > 0
}

// Each release of test/kubelet/MINORS has its module, which pins it, and
// no other minor has one but a prerelease's, which CI does not run and
// docs/compatibility.md gives the command of; the oldest also has make
// e2e-node's module.
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
		if got, _ := pins(goMod); got != r {
			t.Errorf("test/kubelet/%s/go.mod does not require k8s.io/kubernetes %s, which test/kubelet/MINORS lists", minorOf(r), r)
		}
	}
	dirs, err := filepath.Glob(filepath.Join(repoRoot, "test/kubelet/v1.*"))
	if err != nil {
		t.Fatal(err)
	}
	compatibility, err := os.ReadFile(filepath.Join(repoRoot, "docs/compatibility.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		minor := filepath.Base(d)
		if slices.Contains(minors, minor) {
			continue
		}
		goMod, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err != nil {
			t.Errorf("test/kubelet/%s: %v", minor, err)
			continue
		}
		release, prerelease := pins(goMod)
		if !prerelease {
			t.Errorf("test/kubelet/%s is not in test/kubelet/MINORS: add it there, or git rm -r it", minor)
			continue
		}
		run := "make e2e KUBELET_MINORS=" + minor
		if !strings.Contains(string(compatibility), run) || !strings.Contains(string(compatibility), release) {
			t.Errorf("test/kubelet/%s pins the prerelease %s, outside test/kubelet/MINORS: docs/compatibility.md must name it and how to run it (%s)", minor, release, run)
		}
	}

	oldest := releases[len(releases)-1]
	goMod, err := os.ReadFile(filepath.Join(repoRoot, "test/node/kubernetes", minorOf(oldest), "go.mod"))
	if got, _ := pins(goMod); err != nil || got != oldest {
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
