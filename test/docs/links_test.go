package docs

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// repoRoot is the repository's top directory, seen from this package.
const repoRoot = "../.."

// documents are the Markdown files whose links are checked, as globs
// relative to the repository's top; ** is any depth of directories.
var documents = []string{
	"README.md", "CONTRIBUTING.md", "CHANGELOG.md", "SECURITY.md", "docs/*.md",
	"deploy/README.md", "deploy/**/README.md", "test/**/README.md",
}

var markdown = goldmark.New(goldmark.WithExtensions(extension.GFM))

// page is one parsed document: its headings' anchors and its links.
type page struct {
	anchors map[string]bool
	links   []string
}

func parse(t *testing.T, path string) page {
	t.Helper()
	source, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := page{anchors: map[string]bool{}}
	seen := map[string]int{}
	doc := markdown.Parser().Parse(text.NewReader(source))
	err = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			slug := githubSlug(plainText(n, source))
			// GitHub numbers a repeated anchor: x, x-1, x-2.
			if k := seen[slug]; k > 0 {
				p.anchors[fmt.Sprintf("%s-%d", slug, k)] = true
			} else {
				p.anchors[slug] = true
			}
			seen[slug]++
		case *ast.Link:
			p.links = append(p.links, string(n.Destination))
		case *ast.Image:
			p.links = append(p.links, string(n.Destination))
		}
		return ast.WalkContinue, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// plainText is the text of a heading as GitHub renders it: code spans'
// content included, emphasis and link markup left out.
func plainText(n ast.Node, source []byte) string {
	var b strings.Builder
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(source))
		case *ast.String:
			b.Write(c.Value)
		default:
			b.WriteString(plainText(c, source))
		}
	}
	return b.String()
}

// githubSlug is the anchor GitHub gives a heading's text: lower case,
// every character that is not a letter, mark, number, connector
// punctuation (_), space or hyphen removed, each space a hyphen.
func githubSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-', unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.Pc):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGitHubSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Quick start":        "quick-start",
		"/healthz: liveness": "healthz-liveness",
		"The driver's liveness: --driver-health-endpoint": "the-drivers-liveness---driver-health-endpoint",
		"Behaviour, and how it differs from upstream":     "behaviour-and-how-it-differs-from-upstream",
		"make e2e-node (root)":                            "make-e2e-node-root",
		"GOMAXPROCS=1 and GOGC_25":                        "gomaxprocs1-and-gogc_25",
		"Überblick: Größe":                                "überblick-größe",
	} {
		if got := githubSlug(heading); got != want {
			t.Errorf("githubSlug(%q) = %q, want %q", heading, got, want)
		}
	}
}

// files expands documents into the repository's paths, relative to its top.
func files(t *testing.T) []string {
	t.Helper()
	return repoFiles(t, func(rel string) bool {
		return slices.ContainsFunc(documents, func(pattern string) bool { return matchGlob(pattern, filepath.ToSlash(rel)) })
	})
}

// repoFiles is the repository's files that keep selects, relative to its
// top; build output, tools and the node test's downloads are left out.
func repoFiles(t *testing.T, keep func(rel string) bool) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "bin" || name == "_output" || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if keep(rel) {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// matchGlob is path.Match with ** for any number of directories.
func matchGlob(pattern, name string) bool {
	if before, after, ok := strings.Cut(pattern, "**/"); ok {
		if !strings.HasPrefix(name, before) {
			return false
		}
		rest := strings.Split(strings.TrimPrefix(name, before), "/")
		for i := range rest {
			if ok, _ := filepath.Match(after, strings.Join(rest[i:], "/")); ok {
				return true
			}
		}
		return false
	}
	ok, _ := filepath.Match(pattern, name)
	return ok
}

// Every relative link of every document reaches a file or directory of the
// repository, and every #anchor, in the same page or another Markdown page,
// a heading there.
func TestLinksResolve(t *testing.T) {
	docs := files(t)
	for _, want := range []string{"README.md", "CONTRIBUTING.md", "docs/architecture.md"} {
		if !slices.Contains(docs, want) {
			t.Fatalf("%s is not among the documents checked (%v)", want, docs)
		}
	}
	pages := map[string]page{}
	for _, doc := range docs {
		pages[doc] = parse(t, filepath.Join(repoRoot, doc))
	}
	anchorsOf := func(doc string) (map[string]bool, error) {
		if p, ok := pages[doc]; ok {
			return p.anchors, nil
		}
		p := parse(t, filepath.Join(repoRoot, doc))
		pages[doc] = p
		return p.anchors, nil
	}
	checked := 0
	for _, doc := range docs {
		for _, link := range pages[doc].links {
			u, err := url.Parse(link)
			if err != nil {
				t.Errorf("%s: link %q does not parse: %v", doc, link, err)
				continue
			}
			if u.Scheme != "" || u.Host != "" {
				continue // another site
			}
			checked++
			target := doc
			if u.Path != "" {
				if strings.HasPrefix(u.Path, "/") {
					t.Errorf("%s: link %q is absolute: GitHub resolves it against its own root; make it relative", doc, link)
					continue
				}
				target = filepath.Clean(filepath.Join(filepath.Dir(doc), filepath.FromSlash(u.Path)))
				if target == ".." || strings.HasPrefix(target, ".."+string(filepath.Separator)) {
					t.Errorf("%s: link %q leaves the repository", doc, link)
					continue
				}
				if _, err := os.Stat(filepath.Join(repoRoot, target)); err != nil {
					t.Errorf("%s: link %q: %s does not exist", doc, link, target)
					continue
				}
			}
			if u.Fragment == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s: link %q has an anchor into %s, which is not a Markdown page", doc, link, target)
				continue
			}
			anchors, _ := anchorsOf(target)
			if !anchors[u.Fragment] {
				t.Errorf("%s: link %q: %s has no heading with the anchor #%s", doc, link, target, u.Fragment)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the parser found none")
	}
	t.Logf("%d relative links checked in %d documents", checked, len(docs))
}

func TestMatchGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"docs/*.md", "docs/diagnose.md", true},
		{"docs/*.md", "docs/sub/page.md", false},
		{"deploy/**/README.md", "deploy/node-gate/README.md", true},
		{"deploy/**/README.md", "deploy/a/b/README.md", true},
		{"deploy/**/README.md", "deploy/README.md", true},
		{"deploy/**/README.md", "deploy/node-gate/rbac.yaml", false},
		{"test/**/README.md", "deploy/x/README.md", false},
		{"README.md", "docs/README.md", false},
	} {
		if got := matchGlob(tc.pattern, tc.name); got != tc.want {
			t.Errorf("matchGlob(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}
