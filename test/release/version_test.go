// Package release tests the release tooling in hack/: the version that make
// stamps into the binaries and images (hack/version.sh), run in temporary git
// repositories where the tests create the tags, and the release notes taken
// from the CHANGELOG (hack/release-notes.sh).
package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The regular expression of semver.org, with the leading v of Go and git tags.
var semver = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// repo is a git repository in a temporary directory, with fixed identities
// and dates, and without the user's or the system's git configuration.
type repo struct {
	t   *testing.T
	dir string
}

func newRepo(t *testing.T) *repo {
	r := &repo{t: t, dir: t.TempDir()}
	r.git("init", "-q")
	return r
}

func (r *repo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com",
		// A zone east of UTC: the pseudo-version's time is in UTC.
		"GIT_AUTHOR_DATE=2025-01-02T15:04:05+02:00", "GIT_COMMITTER_DATE=2025-01-02T15:04:05+02:00",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit commits a change of the tracked file f and returns the commit's hash.
func (r *repo) commit() string {
	r.t.Helper()
	f := filepath.Join(r.dir, "f")
	old, _ := os.ReadFile(f)
	if err := os.WriteFile(f, append(old, 'x'), 0o644); err != nil {
		r.t.Fatal(err)
	}
	r.git("add", "f")
	r.git("commit", "-q", "-m", "change")
	return r.git("rev-parse", "HEAD")
}

// modify changes the tracked file without committing it.
func (r *repo) modify() {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.dir, "f"), []byte("uncommitted"), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *repo) untracked() {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.dir, "new"), []byte("new"), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// version runs hack/version.sh in dir.
func version(t *testing.T, dir string) (stdout, stderr string, err error) {
	t.Helper()
	script, err := filepath.Abs("../../hack/version.sh")
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	cmd := exec.Command(script)
	cmd.Dir = dir
	// The ceiling keeps git from finding a repository above dir.
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CEILING_DIRECTORIES="+filepath.Dir(dir))
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return strings.TrimSpace(out.String()), errOut.String(), err
}

func TestVersion(t *testing.T) {
	// Each case builds a repository and returns the version it must give.
	cases := []struct {
		name  string
		setup func(r *repo) string
	}{
		{"no tag", func(r *repo) string {
			h := r.commit()
			return "v0.0.0-20250102130405-" + h[:12]
		}},
		{"no tag, dirty", func(r *repo) string {
			h := r.commit()
			r.modify()
			return "v0.0.0-20250102130405-" + h[:12] + "-dirty"
		}},
		{"an untracked file is not a change", func(r *repo) string {
			h := r.commit()
			r.untracked()
			return "v0.0.0-20250102130405-" + h[:12]
		}},
		{"on a tag", func(r *repo) string {
			r.commit()
			r.git("tag", "v0.1.0")
			return "v0.1.0"
		}},
		{"on an annotated tag", func(r *repo) string {
			r.commit()
			r.git("tag", "-a", "-m", "v0.1.0", "v0.1.0")
			return "v0.1.0"
		}},
		{"on a tag, dirty", func(r *repo) string {
			r.commit()
			r.git("tag", "v0.1.0")
			r.modify()
			return "v0.1.0-dirty"
		}},
		{"between tags", func(r *repo) string {
			r.commit()
			r.git("tag", "v0.1.0")
			r.commit()
			r.commit()
			h := r.commit()
			return "v0.1.0-3-g" + h[:12]
		}},
		{"between tags, dirty", func(r *repo) string {
			r.commit()
			r.git("tag", "v0.1.0")
			h := r.commit()
			r.modify()
			return "v0.1.0-1-g" + h[:12] + "-dirty"
		}},
		{"the latest tag", func(r *repo) string {
			r.commit()
			r.git("tag", "v0.1.0")
			r.commit()
			r.git("tag", "v0.2.0")
			h := r.commit()
			return "v0.2.0-1-g" + h[:12]
		}},
		{"a prerelease tag", func(r *repo) string {
			r.commit()
			r.git("tag", "v0.1.0")
			r.commit()
			r.git("tag", "v0.2.0-rc.1")
			return "v0.2.0-rc.1"
		}},
		{"tags that are not release tags are ignored", func(r *repo) string {
			r.commit()
			r.git("tag", "v0.1.0")
			h := r.commit()
			for _, tag := range []string{"latest", "release-0.2", "0.2.0", "v0.2", "vnext"} {
				r.git("tag", tag)
			}
			return "v0.1.0-1-g" + h[:12]
		}},
		{"no release tag among other tags", func(r *repo) string {
			h := r.commit()
			r.git("tag", "latest")
			return "v0.0.0-20250102130405-" + h[:12]
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRepo(t)
			want := tc.setup(r)
			got, stderr, err := version(t, r.dir)
			if err != nil {
				t.Fatalf("hack/version.sh: %v\n%s", err, stderr)
			}
			if got != want {
				t.Errorf("hack/version.sh printed %q, want %q", got, want)
			}
			if !semver.MatchString(got) {
				t.Errorf("%q is not a semantic version", got)
			}
			// The version is also the image's tag: [A-Za-z0-9_.-], at most 128.
			if !regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`).MatchString(got) {
				t.Errorf("%q is not a valid image tag", got)
			}
		})
	}
}

// A tag that looks like a release but is not a semantic version stops the
// build rather than giving the binary a version no tool can compare.
func TestVersionRefusesATagThatIsNotSemver(t *testing.T) {
	r := newRepo(t)
	r.commit()
	r.git("tag", "v1.2.3.4")
	got, stderr, err := version(t, r.dir)
	if err == nil {
		t.Fatalf("hack/version.sh printed %q and exited 0, want a failure", got)
	}
	if !strings.Contains(stderr, "v1.2.3.4") || !strings.Contains(stderr, "not a semantic version") {
		t.Errorf("the error does not name the tag and the problem: %q", stderr)
	}
}

func TestVersionWithoutACommit(t *testing.T) {
	for name, dir := range map[string]func(t *testing.T) string{
		"not a git work tree": func(t *testing.T) string { return t.TempDir() },
		"a repository, empty": func(t *testing.T) string { return newRepo(t).dir },
	} {
		t.Run(name, func(t *testing.T) {
			got, stderr, err := version(t, dir(t))
			if err != nil {
				t.Fatalf("hack/version.sh: %v\n%s", err, stderr)
			}
			if got != "v0.0.0-unknown" {
				t.Errorf("hack/version.sh printed %q, want v0.0.0-unknown", got)
			}
			if stderr == "" {
				t.Error("no warning on stderr")
			}
		})
	}
}
