package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// maxREADME is the README's budget: the operator who swaps the image reads
// it first, so it stays at the scale of upstream's (9 KB).
const maxREADME = 15_000

func TestREADMEFitsItsBudget(t *testing.T) {
	info, err := os.Stat(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() > maxREADME {
		t.Errorf("README.md has %d bytes, more than %d: move the detail to a page in docs/", info.Size(), maxREADME)
	}
}

// helpFlag is a flag line of Go's flag package's usage: "  -name value".
var helpFlag = regexp.MustCompile(`(?m)^  -([A-Za-z0-9_-]+)`)

// tableFlag is a flag in the first cell of a table row: `--name` or `-v`.
var tableFlag = regexp.MustCompile("`--?([A-Za-z0-9_-]+)`")

// The README's flags table lists exactly the flags the registrar accepts,
// as its --help prints them, and each row has the four cells of the table.
func TestREADMEListsEveryFlag(t *testing.T) {
	cmd := exec.Command("go", "run", "./cmd/registrar", "--help")
	cmd.Dir = repoRoot
	help, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./cmd/registrar --help: %v\n%s", err, help)
	}
	var accepted []string
	for _, m := range helpFlag.FindAllStringSubmatch(string(help), -1) {
		accepted = append(accepted, m[1])
	}
	if len(accepted) < 20 {
		t.Fatalf("found only %d flags in --help's output:\n%s", len(accepted), help)
	}

	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Flags\n")
	if !ok {
		t.Fatal("README.md has no section ## Flags")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var listed []string
	rows := 0
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "| `-") {
			continue
		}
		rows++
		// No cell of this table holds a "|".
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			t.Errorf("README.md flags row has %d cells, want 4 (flag, default, new, meaning): %s", len(cells), line)
			continue
		}
		if new := strings.TrimSpace(cells[2]); new != "" && new != "new" {
			t.Errorf("README.md flags row: the \"new\" column holds %q, want \"new\" or nothing: %s", new, line)
		}
		for _, m := range tableFlag.FindAllStringSubmatch(cells[0], -1) {
			listed = append(listed, m[1])
		}
	}
	if rows == 0 {
		t.Fatal("README.md's Flags section has no table rows")
	}
	for _, f := range accepted {
		if !slices.Contains(listed, f) {
			t.Errorf("the registrar accepts -%s, which README.md's flags table does not list", f)
		}
	}
	for _, f := range listed {
		if !slices.Contains(accepted, f) {
			t.Errorf("README.md's flags table lists -%s, which the registrar's --help does not", f)
		}
	}
}
