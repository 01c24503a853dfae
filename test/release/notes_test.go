package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// releaseNotes runs hack/release-notes.sh on the changelog file.
func releaseNotes(t *testing.T, changelog string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	script, err := filepath.Abs("../../hack/release-notes.sh")
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	cmd := exec.Command(script, args...)
	cmd.Env = append(os.Environ(), "CHANGELOG="+changelog)
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
	"## Unreleased\n" +
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
	changelog := filepath.Join(t.TempDir(), "CHANGELOG.md")
	if err := os.WriteFile(changelog, []byte(testChangelog), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, release string // release "": no argument
		want          string
		wantErr       string
	}{
		{name: "Unreleased", want: "### Fixed\n- the third change\n"},
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
			var args []string
			if tc.release != "" {
				args = []string{tc.release}
			}
			got, stderr, err := releaseNotes(t, changelog, args...)
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

// The repository's own CHANGELOG has the section make release-notes prints.
func TestReleaseNotesOfThisChangelog(t *testing.T) {
	changelog, err := filepath.Abs("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	got, stderr, err := releaseNotes(t, changelog)
	if err != nil {
		t.Fatalf("hack/release-notes.sh: %v\n%s", err, stderr)
	}
	if !strings.HasPrefix(got, "### ") {
		t.Errorf("the Unreleased section starts with %q, want a group heading such as ### Added", strings.SplitN(got, "\n", 2)[0])
	}
}
