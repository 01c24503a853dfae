// Package release tests the release tooling in hack/: the version that make
// stamps into the binaries and images (hack/version.sh, which reads the
// file VERSION), and the release notes taken from the CHANGELOG
// (hack/release-notes.sh).
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

// An image tag: [A-Za-z0-9_.-], at most 128 characters. The version is
// also the image's tag.
var imageTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// tree is a copy of hack/version.sh at hack/ in a temporary directory, with
// VERSION beside hack/ as in the repository.
func tree(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	script, err := os.ReadFile("../../hack/version.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "hack"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hack", "version.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "VERSION"), []byte(version), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// version runs the tree's hack/version.sh from the directory cwd, without
// the environment's VERSION_FILE.
func version(t *testing.T, dir, cwd string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut strings.Builder
	cmd := exec.Command(filepath.Join(dir, "hack", "version.sh"))
	cmd.Dir = cwd
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VERSION_FILE=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// git runs git in dir with fixed identities and without the user's or the
// system's configuration.
func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir),
		"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestVersion(t *testing.T) {
	cases := []struct {
		name, file, want string
	}{
		{"a release", "v0.1.0\n", "v0.1.0"},
		{"without a newline", "v0.1.0", "v0.1.0"},
		{"with a carriage return and spaces", " v1.2.3 \r\n", "v1.2.3"},
		{"blank lines around it", "\nv0.2.0\n\n", "v0.2.0"},
		{"a prerelease", "v0.2.0-rc.1\n", "v0.2.0-rc.1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := tree(t, tc.file)
			got, stderr, err := version(t, dir, t.TempDir())
			if err != nil {
				t.Fatalf("hack/version.sh: %v\n%s", err, stderr)
			}
			if got != tc.want+"\n" {
				t.Errorf("printed %q, want %q", got, tc.want+"\n")
			}
			if !semver.MatchString(tc.want) || !imageTag.MatchString(tc.want) {
				t.Errorf("%q is not a semantic version and an image tag", tc.want)
			}
		})
	}
}

// What git says of the tree changes nothing: a tag that disagrees, a commit
// after it, uncommitted changes. A clone and a tarball say the same.
func TestVersionIgnoresGit(t *testing.T) {
	dir := tree(t, "v0.3.0\n")
	git(t, dir, "init", "-q")
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-q", "-m", "first")
	git(t, dir, "tag", "v9.9.9")
	if err := os.WriteFile(filepath.Join(dir, "hack", "new"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-q", "-m", "second")
	if err := os.WriteFile(filepath.Join(dir, "hack", "new"), []byte("uncommitted"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cwd := range []string{dir, filepath.Join(dir, "hack"), t.TempDir()} {
		got, stderr, err := version(t, dir, cwd)
		if err != nil || got != "v0.3.0\n" {
			t.Errorf("run from %s: printed %q (%v, %s), want v0.3.0", cwd, got, err, stderr)
		}
	}
}

// A file that does not hold one semantic version stops the build with an
// error that names the file and shows what it holds.
func TestVersionRefusesABadFile(t *testing.T) {
	cases := []struct{ name, file string }{
		{"empty", ""},
		{"blank", "\n \n"},
		{"without the v", "0.1.0\n"},
		{"four numbers", "v1.2.3.4\n"},
		{"two numbers", "v1.2\n"},
		{"a leading zero", "v01.2.3\n"},
		{"build metadata, which an image tag cannot carry", "v0.1.0+abc\n"},
		{"two lines", "v0.1.0\nv0.2.0\n"},
		{"a sentence", "version 0.1.0\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := tree(t, tc.file)
			got, stderr, err := version(t, dir, dir)
			if err == nil {
				t.Fatalf("printed %q and exited 0, want a failure", got)
			}
			if !strings.Contains(stderr, "VERSION") || !strings.Contains(stderr, "semantic version") {
				t.Errorf("the error does not name the file and say what it must hold: %q", stderr)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		dir := tree(t, "")
		if err := os.Remove(filepath.Join(dir, "VERSION")); err != nil {
			t.Fatal(err)
		}
		got, stderr, err := version(t, dir, dir)
		if err == nil || !strings.Contains(stderr, "cannot read") {
			t.Errorf("printed %q, err %v, stderr %q; want a failure saying the file cannot be read", got, err, stderr)
		}
	})
}

// The repository's own VERSION is what make stamps, and it is valid.
func TestThisRepositorysVersion(t *testing.T) {
	var out, errOut strings.Builder
	cmd := exec.Command("../../hack/version.sh")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/version.sh: %v\n%s", err, errOut.String())
	}
	got := strings.TrimSuffix(out.String(), "\n")
	if !semver.MatchString(got) || !imageTag.MatchString(got) {
		t.Errorf("VERSION holds %q: not a semantic version usable as an image tag", got)
	}
}
