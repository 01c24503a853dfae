package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// makeTarget is a target named in the first cell of a table row:
// `make <target>`.
var makeTarget = regexp.MustCompile("`make ([a-z0-9-]+)`")

// CONTRIBUTING.md's table of make targets lists exactly the Makefile's
// .PHONY targets.
func TestContributingListsEveryMakeTarget(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	phony := map[string]bool{}
	for line := range strings.SplitSeq(string(makefile), "\n") {
		if rest, ok := strings.CutPrefix(line, ".PHONY:"); ok {
			for _, target := range strings.Fields(rest) {
				phony[target] = true
			}
		}
	}
	if len(phony) < 10 {
		t.Fatalf("found only %d .PHONY targets in the Makefile", len(phony))
	}

	contributing, err := os.ReadFile(filepath.Join(repoRoot, "CONTRIBUTING.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(contributing), "\n## Make targets\n")
	if !ok {
		t.Fatal("CONTRIBUTING.md has no section ## Make targets")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	listed := map[string]bool{}
	for line := range strings.SplitSeq(section, "\n") {
		if first, _, ok := strings.Cut(strings.TrimPrefix(line, "|"), "|"); ok && strings.HasPrefix(line, "| `make ") {
			for _, m := range makeTarget.FindAllStringSubmatch(first, -1) {
				listed[m[1]] = true
			}
		}
	}
	for target := range phony {
		if !listed[target] {
			t.Errorf("the Makefile has the target %s, which CONTRIBUTING.md's table of make targets does not list", target)
		}
	}
	for target := range listed {
		if !phony[target] {
			t.Errorf("CONTRIBUTING.md's table of make targets lists %s, which is not a .PHONY target of the Makefile", target)
		}
	}
}
