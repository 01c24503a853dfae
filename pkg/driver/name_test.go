package driver

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// specName is the CSI specification's rule for a driver name, written as a
// regular expression to check ValidateName against.
var specName = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9.-]{0,61}[a-zA-Z0-9])?$`)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name    string
		problem string // "" when the name is valid
	}{
		{name: "a"},
		{name: "7"},
		{name: "csi.example.com"},
		{name: "hostpath.csi.k8s.io"},
		{name: "Mixed-Case.Driver-2"},
		{name: "a..b"},
		{name: "a--b"},
		{name: strings.Repeat("a", 63)},
		{name: "", problem: "empty"},
		{name: strings.Repeat("a", 64), problem: "64 characters long"},
		{name: "-csi.example.com", problem: `begins with '-'`},
		{name: ".hidden", problem: `begins with '.'`},
		{name: ".", problem: `begins with '.'`},
		{name: "..", problem: `begins with '.'`},
		{name: "csi.example.com.", problem: `ends with '.'`},
		{name: "csi-", problem: `ends with '-'`},
		{name: "a/b", problem: `contains '/'`},
		{name: "../../etc/x", problem: `begins with '.'`},
		{name: `a\b`, problem: `contains '\\'`},
		{name: "csi_driver", problem: `contains '_'`},
		{name: "a b", problem: `contains ' '`},
		{name: "a\x00b", problem: `contains '\x00'`},
		{name: "pilote-é-x", problem: `contains 'é'`},
		{name: "é", problem: `begins with 'é'`},
		{name: "\xff", problem: `begins with`},
	}
	for _, test := range tests {
		t.Run(fmt.Sprintf("%q", test.name), func(t *testing.T) {
			err := ValidateName(test.name)
			if test.problem == "" {
				if err != nil {
					t.Fatalf("ValidateName(%q) = %v, want nil", test.name, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateName(%q) = nil, want an error saying %q", test.name, test.problem)
			}
			msg := err.Error()
			for _, want := range []string{test.problem, "at most 63 characters", "check the CSI driver's GetPluginInfo"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
			if test.name != "" && !strings.Contains(msg, fmt.Sprintf("%q", test.name)) {
				t.Errorf("error %q does not quote the name", msg)
			}
		})
	}
}

func FuzzValidateName(f *testing.F) {
	for _, seed := range []string{
		"", "a", "csi.example.com", "a..b", ".", "..", ".a", "a.", "-a", "a-", "a/b",
		"../x", "x/..", `a\b`, "a\x00b", "é", "\xff", "a b", "A-Z.0-9",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a.", 32),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateName(name)
		if err != nil {
			if specName.MatchString(name) {
				t.Fatalf("ValidateName(%q) = %v, but the name follows the CSI rule", name, err)
			}
			return
		}
		if !specName.MatchString(name) {
			t.Fatalf("ValidateName(%q) accepted a name that breaks the CSI rule", name)
		}
		if len(name) > MaxNameLength {
			t.Fatalf("ValidateName accepted %q, %d bytes long", name, len(name))
		}
		if strings.ContainsAny(name, `/\`) {
			t.Fatalf("ValidateName accepted %q, which has a path separator", name)
		}
		if strings.HasPrefix(name, ".") {
			t.Fatalf("ValidateName accepted %q, which would make a dot-file that kubelet ignores", name)
		}
		socket := name + "-reg.sock"
		if base := filepath.Base(socket); base != socket {
			t.Fatalf("ValidateName accepted %q, but filepath.Base(%q) = %q", name, socket, base)
		}
		dir := filepath.FromSlash("/registration")
		if joined := filepath.Join(dir, socket); filepath.Dir(joined) != dir {
			t.Fatalf("ValidateName accepted %q, but its socket lands at %q", name, joined)
		}
	})
}
