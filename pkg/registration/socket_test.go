package registration

import "testing"

func TestHiddenSocketDriver(t *testing.T) {
	for _, tc := range []struct {
		name, driver string
		ok           bool
	}{
		{".hostpath.csi.k8s.io.0a9f3c", "hostpath.csi.k8s.io", true},
		{".x.abcdef", "x", true},
		{"..abcdef", "", false},
		{".hostpath.csi.k8s.io.0A9F3C", "", false}, // upper-case hex is not ours
		{".hostpath.csi.k8s.io.0a9f3", "", false},
		{"hostpath.csi.k8s.io.0a9f3c", "", false},
		{".hostpath.csi.k8s.io-0a9f3c", "", false},
		{"hostpath.csi.k8s.io-reg.sock", "", false},
	} {
		driver, ok := HiddenSocketDriver(tc.name)
		if driver != tc.driver || ok != tc.ok {
			t.Errorf("HiddenSocketDriver(%q) = %q, %v; want %q, %v", tc.name, driver, ok, tc.driver, tc.ok)
		}
	}
	path := SocketPath("/registry", "hostpath.csi.k8s.io")
	if !isHiddenName(path, ".hostpath.csi.k8s.io.0a9f3c") || isHiddenName(path, ".other.csi.k8s.io.0a9f3c") {
		t.Error("isHiddenName does not tell the driver's hidden names from another driver's")
	}
}
