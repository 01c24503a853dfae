package harness

import (
	"fmt"
	"os"
	"path/filepath"
)

// UpstreamRegistrarEnv names upstream's registrar binary when it is not at
// its usual place.
const UpstreamRegistrarEnv = "UPSTREAM_REGISTRAR_BIN"

// upstreamRegistrarPath is where upstream's registrar is kept for
// interoperability tests, relative to the repository's root.
var upstreamRegistrarPath = filepath.Join("..", "shared", "interop", "upstream-csi-node-driver-registrar")

// FindUpstreamRegistrar returns the path of upstream's registrar binary
// (kubernetes-csi/node-driver-registrar), the one users run today: the
// file UPSTREAM_REGISTRAR_BIN names, or ../shared/interop/ from the
// repository's root. The error says where it looked and why the binary
// cannot be used, for a test to skip with.
func FindUpstreamRegistrar() (string, error) {
	path := os.Getenv(UpstreamRegistrarEnv)
	if path == "" {
		e2eRoot, err := findE2EModule()
		if err != nil {
			return "", err
		}
		path = filepath.Join(e2eRoot, "..", "..", upstreamRegistrarPath)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	switch {
	case err != nil:
		return "", fmt.Errorf("upstream's registrar is not available (set %s to its binary): %w", UpstreamRegistrarEnv, err)
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("upstream's registrar %s is not an executable file (mode %v; set %s to its binary)", abs, fi.Mode(), UpstreamRegistrarEnv)
	}
	return abs, nil
}
