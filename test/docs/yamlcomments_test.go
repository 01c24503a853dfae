package docs

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// commentPath is a word with a slash in a YAML comment.
var commentPath = regexp.MustCompile(`[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]*`)

// Every path of the repository that a YAML file names in its comments
// exists: a word that starts with a top directory (deploy/README.md). Other
// words with a slash (an image, an API group, a host path, another
// project's file given by its URL) start otherwise; a relative path
// (../node-driver-registrar/deploy) is an example of the reader's layout.
func TestYAMLCommentPathsExist(t *testing.T) {
	entries, err := os.ReadDir(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	tops := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			tops[e.Name()] = true
		}
	}
	checked := 0
	yamlFiles := repoFiles(t, func(rel string) bool {
		ext := filepath.Ext(rel)
		return ext == ".yaml" || ext == ".yml"
	})
	for _, rel := range yamlFiles {
		f, err := os.Open(filepath.Join(repoRoot, rel))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for line := 1; sc.Scan(); line++ {
			comment, ok := yamlComment(sc.Text())
			if !ok {
				continue
			}
			for _, p := range commentPath.FindAllString(comment, -1) {
				p = strings.TrimRight(p, ".")
				if !tops[strings.SplitN(p, "/", 2)[0]] || strings.HasPrefix(p, ".") {
					continue
				}
				checked++
				if _, err := os.Stat(filepath.Join(repoRoot, p)); err != nil {
					t.Errorf("%s:%d: a comment names %s, which does not exist", rel, line, p)
				}
			}
		}
		if err := sc.Err(); err != nil {
			t.Error(err)
		}
		f.Close()
	}
	if checked == 0 {
		t.Fatal("no path found in any YAML comment: the search found none")
	}
	t.Logf("%d paths in YAML comments checked", checked)
}

// yamlComment is the comment of a YAML line: after a # that starts the line
// or follows a space (a # inside a word or a quoted string is not one).
func yamlComment(line string) (string, bool) {
	inQuote := rune(0)
	for i, r := range line {
		switch {
		case inQuote != 0:
			if r == inQuote {
				inQuote = 0
			}
		case r == '"' || r == '\'':
			inQuote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[i+1:], true
		}
	}
	return "", false
}

func TestYAMLComment(t *testing.T) {
	for _, tc := range []struct {
		line, want string
		ok         bool
	}{
		{"# deploy/README.md", " deploy/README.md", true},
		{"  - daemonset.yaml # the base", " the base", true},
		{`  value: "a # b"`, "", false},
		{"  image: x#y", "", false},
		{"key: v", "", false},
	} {
		if got, ok := yamlComment(tc.line); got != tc.want || ok != tc.ok {
			t.Errorf("yamlComment(%q) = %q, %v; want %q, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}
