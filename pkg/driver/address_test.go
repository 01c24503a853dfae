package driver

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseAddress(t *testing.T) {
	tests := []struct {
		addr     string
		wantPath string
		wantErr  string // "" when the address is valid
	}{
		{addr: "/csi/csi.sock", wantPath: "/csi/csi.sock"},
		{addr: "unix:///csi/csi.sock", wantPath: "/csi/csi.sock"},
		{addr: "unix:/csi/csi.sock", wantPath: "/csi/csi.sock"},
		{addr: "unix:csi.sock", wantPath: "csi.sock"},
		{addr: "csi.sock", wantPath: "csi.sock"},
		{addr: "run/csi/csi.sock", wantPath: "run/csi/csi.sock"},
		{addr: "/var/lib/kubelet/plugins/a%20b/csi.sock", wantPath: "/var/lib/kubelet/plugins/a%20b/csi.sock"},
		// Windows manifests, with the backslashes as YAML leaves them.
		{addr: `unix://C:\\csi\\csi.sock`, wantPath: `C:\\csi\\csi.sock`},
		{addr: `unix://C:\csi\csi.sock`, wantPath: `C:\csi\csi.sock`},
		{addr: `C:\csi\csi.sock`, wantPath: `C:\csi\csi.sock`},
		{addr: "", wantErr: "empty"},
		{addr: "unix://", wantErr: "no socket path"},
		{addr: "unix:", wantErr: "no socket path"},
		{addr: "tcp://127.0.0.1:10000", wantErr: `has the scheme "tcp", which is not supported`},
		{addr: "dns:///csi.example.com:443", wantErr: `has the scheme "dns", which is not supported`},
		{addr: "unix-abstract:csi", wantErr: `has the scheme "unix-abstract", which is not supported`},
		{addr: "localhost:10000", wantErr: "is a network address (host:port), which is not supported"},
		{addr: "127.0.0.1:10000", wantErr: "is a network address (host:port), which is not supported"},
		{addr: "[::1]:10000", wantErr: "is a network address (host:port), which is not supported"},
		{addr: "csi.example.com:10000", wantErr: "is a network address (host:port), which is not supported"},
	}
	for _, test := range tests {
		t.Run(test.addr, func(t *testing.T) {
			got, err := ParseAddress(test.addr)
			if test.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseAddress(%q) = %+v, want an error containing %q", test.addr, got, test.wantErr)
				}
				if !strings.Contains(err.Error(), test.wantErr) {
					t.Errorf("ParseAddress(%q) error %q does not contain %q", test.addr, err, test.wantErr)
				}
				if test.addr != "" && !strings.Contains(err.Error(), "Unix") {
					t.Errorf("ParseAddress(%q) error %q does not say a Unix socket is needed", test.addr, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseAddress(%q) = %v", test.addr, err)
			}
			if got.Path != test.wantPath {
				t.Errorf("ParseAddress(%q).Path = %q, want %q", test.addr, got.Path, test.wantPath)
			}
		})
	}
}

func FuzzParseAddress(f *testing.F) {
	for _, seed := range []string{
		"", "/csi/csi.sock", "unix:///csi/csi.sock", "unix:/csi/csi.sock", "unix:csi.sock",
		"unix://", "unix:", "unix:///", "unix://unix://x", "unix:unix:x", "unix:////x", "csi.sock",
		`unix://C:\\csi\\csi.sock`, `C:\csi\csi.sock`, "C:", "c:x", "tcp://127.0.0.1:10000",
		"dns:///csi.example.com:443", "unix-abstract:csi", "UNIX:///csi.sock", "localhost:10000",
		"127.0.0.1:10000", "[::1]:10000", "[::1]:99999", "host:0", ":10000", "a:b/c", "/a:1",
		"/csi/../etc/x", "unix:///csi/\x00x", "\xff:1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		got, err := ParseAddress(addr)
		if err != nil {
			if got != (Address{}) {
				t.Errorf("ParseAddress(%q) = %+v with error %v, want the zero Address", addr, got, err)
			}
			if addr != "" && !strings.Contains(err.Error(), fmt.Sprintf("%q", addr)) {
				t.Errorf("ParseAddress(%q) error %q does not quote the address", addr, err)
			}
			if strings.HasPrefix(addr, "unix:") && strings.TrimPrefix(strings.TrimPrefix(addr, "unix:"), "//") != "" {
				t.Errorf("ParseAddress(%q) rejected a unix: address with a path: %v", addr, err)
			}
			return
		}
		if got.Path == "" {
			t.Fatalf("ParseAddress(%q) accepted an empty path", addr)
		}
		// The path is the address as given, less at most the scheme: the
		// registrar never rewrites it.
		if !strings.HasSuffix(addr, got.Path) {
			t.Errorf("ParseAddress(%q).Path = %q, which is not the end of the address", addr, got.Path)
		}
		switch {
		case strings.HasPrefix(addr, "unix://"):
			if got.Path != addr[len("unix://"):] {
				t.Errorf("ParseAddress(%q).Path = %q, want all after unix://", addr, got.Path)
			}
		case strings.HasPrefix(addr, "unix:"):
			if got.Path != addr[len("unix:"):] {
				t.Errorf("ParseAddress(%q).Path = %q, want all after unix:", addr, got.Path)
			}
		default:
			if got.Path != addr {
				t.Errorf("ParseAddress(%q).Path = %q, want the path as given", addr, got.Path)
			}
		}
		// The "unix://" form of the path means the same path.
		again, err := ParseAddress("unix://" + got.Path)
		if err != nil || again != got {
			t.Errorf("ParseAddress(%q) = %+v, but ParseAddress(%q) = %+v, %v", addr, got, "unix://"+got.Path, again, err)
		}
	})
}
