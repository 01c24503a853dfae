package sockfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestIsHiddenName(t *testing.T) {
	for _, tc := range []struct {
		driver, name string
		ok           bool
	}{
		{"hostpath.csi.k8s.io", ".hostpath.csi.k8s.io.0a9f3c", true},
		{"x", ".x.abcdef", true},
		{"", "..abcdef", false},
		{"hostpath.csi.k8s.io", ".hostpath.csi.k8s.io.0A9F3C", false}, // upper-case hex is not ours
		{"hostpath.csi.k8s.io", ".hostpath.csi.k8s.io.0a9f3", false},
		{"hostpath.csi.k8s.io", "hostpath.csi.k8s.io.0a9f3c", false},
		{"hostpath.csi.k8s.io", ".hostpath.csi.k8s.io-0a9f3c", false},
		{"hostpath.csi.k8s.io", "hostpath.csi.k8s.io-reg.sock", false},
		{"other.csi.k8s.io", ".hostpath.csi.k8s.io.0a9f3c", false},
		{"csi.k8s.io", ".hostpath.csi.k8s.io.0a9f3c", false},
		{"hostpath", ".hostpath.csi.k8s.io.0a9f3c", false},
	} {
		path := "/registry/" + tc.driver + "-reg.sock"
		if ok := IsHiddenName(path, tc.name); ok != tc.ok {
			t.Errorf("IsHiddenName(%q, %q) = %v, want %v", path, tc.name, ok, tc.ok)
		}
	}
}

// Lstat tells files apart as the registration compares them: one file is
// one identity under two names and at two looks, a file renamed into its
// place is another. On Windows the identity is asked of the file itself.
func TestLstatIdentity(t *testing.T) {
	dir, err := os.MkdirTemp("", "id")
	if err != nil {
		t.Fatal(err)
	}
	a, b, link := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "link")
	// One file at a time: os.RemoveAll cannot delete files under Wine 8.
	t.Cleanup(func() {
		for _, name := range []string{a, b, link, dir} {
			_ = os.Remove(name)
		}
	})
	for _, name := range []string{a, b} {
		if err := os.WriteFile(name, []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(a, link); err != nil {
		t.Fatal(err)
	}
	id := func(path string) ID {
		t.Helper()
		got, mode, err := Lstat(path)
		if err != nil || !mode.IsRegular() {
			t.Fatalf("Lstat(%s) = %v, %v, %v; want a regular file", path, got, mode, err)
		}
		return got
	}
	idA, idB := id(a), id(b)
	switch {
	case idA == ID{} || idB == ID{}:
		t.Fatalf("identities %v and %v, want neither zero", idA, idB)
	case idA == idB:
		t.Fatalf("two files share the identity %v", idA)
	case id(a) != idA || id(link) != idA:
		t.Fatalf("a second look at %s, or its second name, is not %v", a, idA)
	}
	if err := os.Rename(b, a); err != nil {
		t.Fatal(err)
	}
	if now := id(a); now != idB {
		t.Errorf("after %s was renamed over %s: %v, want %v", b, a, now, idB)
	}
	if _, _, err := Lstat(b); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Lstat of a name removed = %v, want not found", err)
	}
}
