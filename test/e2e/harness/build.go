package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// E2EModule is the module path of the end-to-end suite.
const E2EModule = "github.com/csi-registrar/node-driver-registrar/test/e2e"

// Binaries are the programs of an end-to-end run.
type Binaries struct {
	Registrar   string
	MockDriver  string
	FakeKubelet string
}

// What each binary is built from, and the environment variable that names a
// prebuilt one instead.
type binarySource struct {
	env     string
	name    string
	inRepo  bool // package path relative to the repository root, else to the e2e module
	pkg     string
	ldflags string
	target  *string
}

// BuildBinaries builds, into dir, each binary that no environment variable
// names: REGISTRAR_BIN (./cmd/registrar of the repository), MOCKDRIVER_BIN
// (./test/mockdriver) and FAKEKUBELET_BIN (./cmd/fakekubelet of the e2e
// module). The working directory must be inside the e2e module.
//
// The builds run at once: with a warm build cache they are mostly linking,
// and linking kubelet's tree takes longer than the other two together.
// The test helpers are linked without DWARF (-w), which halves that; stack
// traces keep their symbols. The registrar is built as it is shipped.
func BuildBinaries(ctx context.Context, dir string) (Binaries, error) {
	e2eRoot, err := findE2EModule()
	if err != nil {
		return Binaries{}, err
	}
	repoRoot := filepath.Join(e2eRoot, "..", "..")
	var bins Binaries
	sources := []binarySource{
		{env: "REGISTRAR_BIN", name: "registrar", inRepo: true, pkg: "./cmd/registrar", target: &bins.Registrar},
		{env: "MOCKDRIVER_BIN", name: "mockdriver", inRepo: true, pkg: "./test/mockdriver", ldflags: "-w", target: &bins.MockDriver},
		{env: "FAKEKUBELET_BIN", name: "fakekubelet", pkg: "./cmd/fakekubelet", ldflags: "-w", target: &bins.FakeKubelet},
	}
	errs := make([]error, len(sources))
	var builds sync.WaitGroup
	for i, src := range sources {
		if prebuilt := os.Getenv(src.env); prebuilt != "" {
			abs, err := filepath.Abs(prebuilt)
			if err == nil {
				_, err = os.Stat(abs)
			}
			if err != nil {
				errs[i] = fmt.Errorf("%s=%s: %w", src.env, prebuilt, err)
				continue
			}
			*src.target = abs
			continue
		}
		builds.Go(func() {
			out := filepath.Join(dir, src.name)
			args := []string{"build", "-o", out}
			if src.ldflags != "" {
				args = append(args, "-ldflags="+src.ldflags)
			}
			cmd := exec.CommandContext(ctx, "go", append(args, src.pkg)...)
			cmd.Dir = e2eRoot
			if src.inRepo {
				cmd.Dir = repoRoot
			}
			if output, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("building %s (go %s in %s; set %s to use a prebuilt one): %w\n%s",
					src.name, strings.Join(cmd.Args[1:], " "), cmd.Dir, src.env, err, output)
				return
			}
			*src.target = out
		})
	}
	builds.Wait()
	if err := errors.Join(errs...); err != nil {
		return Binaries{}, err
	}
	return bins, nil
}

// findE2EModule walks up from the working directory to the e2e module's
// root.
func findE2EModule() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isModule(filepath.Join(dir, "go.mod"), E2EModule) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the e2e module " + E2EModule + ": run from test/e2e")
		}
		dir = parent
	}
}

func isModule(goMod, path string) bool {
	data, err := os.ReadFile(goMod)
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && fields[0] == "module" {
			return fields[1] == path
		}
	}
	return false
}
