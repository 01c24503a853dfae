package sockfile

import "testing"

func TestHiddenDriver(t *testing.T) {
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
		driver, ok := HiddenDriver(tc.name)
		if driver != tc.driver || ok != tc.ok {
			t.Errorf("HiddenDriver(%q) = %q, %v; want %q, %v", tc.name, driver, ok, tc.driver, tc.ok)
		}
	}
	const path = "/registry/hostpath.csi.k8s.io-reg.sock"
	if !IsHiddenName(path, ".hostpath.csi.k8s.io.0a9f3c") || IsHiddenName(path, ".other.csi.k8s.io.0a9f3c") {
		t.Error("IsHiddenName does not tell the driver's hidden names from another driver's")
	}
}
