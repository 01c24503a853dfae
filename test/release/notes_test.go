package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// releaseNotes runs hack/release-notes.sh on the changelog file, with the
// version file versionFile ("": the repository's).
func releaseNotes(t *testing.T, changelog, versionFile string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	script, err := filepath.Abs("../../hack/release-notes.sh")
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	cmd := exec.Command(script, args...)
	cmd.Env = append(os.Environ(), "CHANGELOG="+changelog)
	if versionFile != "" {
		cmd.Env = append(cmd.Env, "VERSION_FILE="+versionFile)
	}
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

const testChangelog = "# Changelog\n" +
	"\n" +
	"A release's heading looks like this:\n" +
	"\n" +
	"```\n" +
	"## v0.1.0 - 2025-01-31\n" +
	"```\n" +
	"\n" +
	"## v0.11.0 - Unreleased\n" +
	"\n" +
	"### Fixed\n" +
	"- the third change\n" +
	"\n" +
	"## v0.10.0 - 2025-03-01\n" +
	"\n" +
	"### Added\n" +
	"- the second change\n" +
	"\n" +
	"## v0.1.0 - 2025-01-31\n" +
	"\n" +
	"### Added\n" +
	"- the first change\n" +
	"\n" +
	"```sh\n" +
	"## not a heading\n" +
	"```\n" +
	"\n" +
	"## v0.0.9 - 2025-01-01\n" +
	"\n" +
	"## v0.0.8\n" +
	"- the oldest change\n"

func TestReleaseNotes(t *testing.T) {
	dir := t.TempDir()
	changelog := filepath.Join(dir, "CHANGELOG.md")
	if err := os.WriteFile(changelog, []byte(testChangelog), 0o644); err != nil {
		t.Fatal(err)
	}
	versionFile := filepath.Join(dir, "VERSION")
	cases := []struct {
		name, release string // release "": no argument
		version       string // the VERSION file's line
		want          string
		wantErr       string
	}{
		{name: "no argument: VERSION's, unreleased", version: "v0.11.0", want: "### Fixed\n- the third change\n"},
		{name: "no argument: VERSION's, released", version: "v0.10.0", want: "### Added\n- the second change\n"},
		{name: "no argument: VERSION has no section", version: "v0.12.0", wantErr: `no section "## v0.12.0"`},
		{name: "the unreleased one by name", release: "v0.11.0", want: "### Fixed\n- the third change\n"},
		{name: "a release", release: "v0.10.0", want: "### Added\n- the second change\n"},
		{name: "a release whose version prefixes another's", release: "v0.1.0",
			want: "### Added\n- the first change\n\n```sh\n## not a heading\n```\n"},
		{name: "the last section, without a date", release: "v0.0.8", want: "- the oldest change\n"},
		{name: "no such release", release: "v0.2.0", wantErr: `no section "## v0.2.0"`},
		{name: "a version's prefix", release: "v0.1", wantErr: `no section "## v0.1"`},
		{name: "an empty section", release: "v0.0.9", wantErr: `"## v0.0.9" of ` + changelog + " is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(versionFile, []byte(tc.version+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			var args []string
			if tc.release != "" {
				args = []string{tc.release}
			}
			got, stderr, err := releaseNotes(t, changelog, versionFile, args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(stderr, tc.wantErr) {
					t.Fatalf("err %v, stderr %q, stdout %q; want a failure saying %q", err, stderr, got, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("hack/release-notes.sh: %v\n%s", err, stderr)
			}
			if got != tc.want {
				t.Errorf("printed %q, want %q", got, tc.want)
			}
		})
	}
}

// The repository's own CHANGELOG has a section for the version in VERSION,
// the one make release-notes prints, and every section's heading is a
// version and a date, or Unreleased.
func TestReleaseNotesOfThisChangelog(t *testing.T) {
	changelog, err := filepath.Abs("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	got, stderr, err := releaseNotes(t, changelog, "")
	if err != nil {
		t.Fatalf("hack/release-notes.sh: %v\n%s", err, stderr)
	}
	if !strings.HasPrefix(got, "### ") && !strings.Contains(got, "\n### ") {
		t.Errorf("the section of VERSION's version has no group heading such as ### Added:\n%s", got)
	}
	text, err := os.ReadFile(changelog)
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile(`^## (v\S+) - (Unreleased|\d{4}-\d{2}-\d{2})$`)
	fenced := false
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "## ") {
			continue
		}
		if m := heading.FindStringSubmatch(line); m == nil || !semver.MatchString(m[1]) {
			t.Errorf("CHANGELOG.md heading %q is not \"## v<x.y.z> - <yyyy-mm-dd>\" or \"## v<x.y.z> - Unreleased\"", line)
		}
	}
}
