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
	"time"
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
	env      string
	name     string
	what     string // for the progress lines
	coldTime string // its first build, with empty Go caches on two shared cores (load average 15-68), the three at once
	dir      string // its module's directory, relative to the repository root
	pkg      string // relative to dir
	ldflags  string
	target   *string
}

// NewestKubelet is the module of the e2e kubelet built with the newest
// kubelet minor supported, relative to the repository root; the Makefile
// builds the others' (test/kubelet/v1.*) and names them in FAKEKUBELET_BIN.
const NewestKubelet = "test/kubelet/v1.37"

// BuildBinaries builds, into dir, each binary that no environment variable
// names: REGISTRAR_BIN (./cmd/registrar of the repository), MOCKDRIVER_BIN
// (./test/mockdriver) and FAKEKUBELET_BIN (the e2e kubelet of the newest
// kubelet minor supported, NewestKubelet). The working directory must be inside the e2e module.
//
// The registrar's --version is REGISTRAR_VERSION, as make passes it, or else
// the repository's hack/version.sh (the file VERSION), as make computes it.
//
// progress, unless nil, gets one line as each build starts, one every 30 s
// while it runs and one as it ends, never two calls at once. The first build of kubelet's code takes
// minutes; without these lines that is minutes of silence.
//
// The builds run at once: with a warm build cache they are mostly linking,
// and linking kubelet's tree takes longer than the other two together.
// The test helpers are linked without DWARF (-w), which halves that; stack
// traces keep their symbols.
func BuildBinaries(ctx context.Context, dir string, progress func(line string)) (Binaries, error) {
	e2eRoot, err := findE2EModule()
	if err != nil {
		return Binaries{}, err
	}
	repoRoot := filepath.Join(e2eRoot, "..", "..")
	var progressMu sync.Mutex
	report := func(format string, args ...any) {
		if progress == nil {
			return
		}
		progressMu.Lock()
		defer progressMu.Unlock()
		progress(fmt.Sprintf(format, args...))
	}
	var bins Binaries
	sources := []binarySource{
		{env: "REGISTRAR_BIN", name: "registrar", what: "the registrar", coldTime: "up to 3 min on two cores", dir: ".", pkg: "./cmd/registrar", target: &bins.Registrar},
		{env: "MOCKDRIVER_BIN", name: "mockdriver", what: "the mock CSI driver", coldTime: "up to 4 min on two cores", dir: ".", pkg: "./test/mockdriver", ldflags: "-w", target: &bins.MockDriver},
		{env: "FAKEKUBELET_BIN", name: "fakekubelet", what: "the e2e kubelet", coldTime: "up to 16 min on two cores: kubelet's code", dir: NewestKubelet, pkg: ".", ldflags: "-w", target: &bins.FakeKubelet},
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
			report("using %s from %s=%s", src.what, src.env, prebuilt)
			*src.target = abs
			continue
		}
		what := src.what
		if src.target == &bins.Registrar {
			version, err := registrarVersion(ctx, repoRoot)
			if err != nil {
				errs[i] = err
				continue
			}
			src.ldflags = "-X=main.version=" + version
			what += " " + version
		}
		builds.Go(func() {
			out := filepath.Join(dir, src.name)
			args := []string{"build", "-o", out}
			if src.ldflags != "" {
				args = append(args, "-ldflags="+src.ldflags)
			}
			cmd := exec.CommandContext(ctx, "go", append(args, src.pkg)...)
			cmd.Dir = filepath.Join(repoRoot, src.dir)
			report("building %s (first build: %s) ...", what, src.coldTime)
			start := time.Now()
			if output, err := runSaying(cmd, stillBuildingInterval, func(took time.Duration) {
				report("still building %s (%v so far)", what, took.Round(time.Second))
			}); err != nil {
				errs[i] = fmt.Errorf("building %s (go %s in %s; set %s to use a prebuilt one): %w\n%s",
					src.name, strings.Join(cmd.Args[1:], " "), cmd.Dir, src.env, err, output)
				return
			}
			report("built %s in %v", what, time.Since(start).Round(100*time.Millisecond))
			*src.target = out
		})
	}
	builds.Wait()
	if err := errors.Join(errs...); err != nil {
		return Binaries{}, err
	}
	return bins, nil
}

// BuildBinariesForMain is BuildBinaries into a new temporary directory,
// within 20 minutes, for a TestMain; each progress line is prefixed with
// prefix. cleanup removes the directory.
func BuildBinariesForMain(prefix string) (bins Binaries, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", prefix+"bin")
	if err != nil {
		return Binaries{}, func() {}, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	bins, err = BuildBinaries(ctx, dir, func(line string) { fmt.Fprintf(os.Stderr, "%s: %s\n", prefix, line) })
	return bins, cleanup, err
}

// stillBuildingInterval spaces the lines that say a build still runs, so
// that a cold build is not minutes with one line on screen.
const stillBuildingInterval = 30 * time.Second

// runSaying runs cmd, calling still every interval while it runs, and
// returns its combined output.
func runSaying(cmd *exec.Cmd, interval time.Duration, still func(took time.Duration)) ([]byte, error) {
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case err := <-done:
			return output.Bytes(), err
		case <-ticker.C:
			still(time.Since(start))
		}
	}
}

// registrarVersion is the version the registrar is built with:
// REGISTRAR_VERSION, or hack/version.sh's, as the Makefile computes it.
func registrarVersion(ctx context.Context, repoRoot string) (string, error) {
	version := os.Getenv("REGISTRAR_VERSION")
	if version == "" {
		cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", "version.sh"))
		cmd.Dir = repoRoot
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("hack/version.sh: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
		version = strings.TrimSpace(string(out))
	}
	// go build splits -ldflags at spaces and quotes.
	if strings.ContainsAny(version, " \t\n'\"") {
		return "", fmt.Errorf("REGISTRAR_VERSION=%q: a version must not contain spaces or quotes", version)
	}
	return version, nil
}

// RegistrarBinaryVersion returns the version the registrar binary at path
// prints with --version ("<path> <version>").
func RegistrarBinaryVersion(ctx context.Context, path string) (string, error) {
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", path, err)
	}
	fields := strings.Fields(string(out))
	if len(fields) != 2 {
		return "", fmt.Errorf("%s --version printed %q, want \"<program> <version>\"", path, out)
	}
	return fields[1], nil
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
