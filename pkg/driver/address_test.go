package driver

import (
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
		{addr: "tcp://127.0.0.1:10000", wantErr: `scheme "tcp" is not supported`},
		{addr: "dns:///csi.example.com:443", wantErr: `scheme "dns" is not supported`},
		{addr: "unix-abstract:csi", wantErr: `scheme "unix-abstract" is not supported`},
		{addr: "localhost:10000", wantErr: `scheme "localhost" is not supported`},
		{addr: "127.0.0.1:10000", wantErr: "network address"},
		{addr: "[::1]:10000", wantErr: "network address"},
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
			if want := "unix://" + test.wantPath; got.String() != want {
				t.Errorf("ParseAddress(%q).String() = %q, want %q", test.addr, got.String(), want)
			}
		})
	}
}
