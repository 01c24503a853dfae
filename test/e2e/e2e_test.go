// End-to-end tests: the registrar binary between the mock CSI driver and
// kubelet's real plugin manager and CSI registration handler (test/kubelet).
// Each test has its own directory, kubelet process and driver name, so the
// tests run in parallel.
package e2e_test

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/csi-registrar/node-driver-registrar/test/e2e/harness"
	"github.com/csi-registrar/node-driver-registrar/test/kubelet/report"
)

const (
	// waitTimeout bounds every wait for kubelet or a process: kubelet
	// reconciles every second and backs off up to a few seconds here.
	waitTimeout = 30 * time.Second
	// exitTimeout bounds the wait for a process to exit after a signal or a
	// fatal condition.
	exitTimeout = 15 * time.Second
	// maxSocketPath is the longest Unix socket path Linux accepts.
	maxSocketPath = 107
	// pollInterval is how often an HTTP endpoint is asked again while
	// waiting for an answer.
	pollInterval = 50 * time.Millisecond
	// parallelism is how many tests run at once unless -test.parallel
	// says otherwise. Each test spends its time waiting for kubelet's
	// one-second reconcile loop, not computing; with the default
	// (GOMAXPROCS) a small machine would run them nearly one by one.
	parallelism = 8
)

var bins harness.Binaries

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	if !flagGiven("test.parallel") {
		if err := flag.Set("test.parallel", strconv.Itoa(max(parallelism, runtime.GOMAXPROCS(0)))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	start := time.Now()
	var cleanup func()
	var err error
	bins, cleanup, err = harness.BuildBinariesForMain("e2e")
	defer cleanup()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: binaries ready in %v: %+v\n", time.Since(start).Round(time.Millisecond), bins)
	return m.Run()
}

// flagGiven tells whether the named flag was on the command line.
func flagGiven(name string) bool {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// env is one test's node: a short temp directory holding the registry
// directory, the driver's socket and the termination message file.
type env struct {
	t           *testing.T
	dir         string
	registry    string
	driverSock  string
	termination string
	driver      string
	nodeID      string
}

func newEnv(t *testing.T, driver string) *env {
	t.Helper()
	dir, err := os.MkdirTemp("", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &env{
		t:           t,
		dir:         dir,
		registry:    filepath.Join(dir, "registry"),
		driverSock:  filepath.Join(dir, "csi.sock"),
		termination: filepath.Join(dir, "termination-log"),
		driver:      driver,
		nodeID:      "node-of-" + driver,
	}
	if n := len(e.regSocket()); n > maxSocketPath {
		t.Fatalf("socket path %s is %d bytes, over the %d Linux allows: set TMPDIR to a shorter directory", e.regSocket(), n, maxSocketPath)
	}
	// In a pod the registry is kubelet's plugins_registry, which exists,
	// and kubelet creates the (empty) termination message file.
	if err := os.MkdirAll(e.registry, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.termination, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

// regSocket is where the registrar serves kubelet.
func (e *env) regSocket() string { return harness.RegistrationSocket(e.registry, e.driver) }

// track kills p when the test ends and shows its output if the test failed
// (or E2E_LOGS is set).
func (e *env) track(p *harness.Process, extra func() string) {
	e.t.Cleanup(func() {
		p.Kill()
		if e.t.Failed() || os.Getenv("E2E_LOGS") != "" {
			e.t.Logf("---- output of %s (pid %d) ----\n%s", p.Name, p.Pid(), p.Output())
			if extra != nil {
				e.t.Logf("---- %s ----\n%s", p.Name, extra())
			}
		}
	})
}

func (e *env) startKubelet() *harness.Kubelet {
	e.t.Helper()
	k, err := harness.StartKubelet(bins.FakeKubelet, harness.KubeletConfig{RegistryDir: e.registry, Verbosity: 2})
	if err != nil {
		e.t.Fatalf("starting the kubelet: %v", err)
	}
	e.track(k.Process, func() string { return "kubelet reports:\n" + k.Summary() })
	// Nothing the registrar does to publish its socket, or --diagnose to
	// check the directory, may show in kubelet's log as an error: a name
	// created and gone before kubelet's plugin watcher stats it does.
	e.t.Cleanup(func() {
		for _, line := range k.WatcherErrors() {
			e.t.Errorf("kubelet's plugin watcher logged an error: %s", line)
		}
	})
	return k
}

func (e *env) startDriver(failNodeGetInfo bool) *harness.Process {
	e.t.Helper()
	return e.startNamedDriver(e.driver, failNodeGetInfo)
}

// startNamedDriver starts the mock driver on the env's socket under name.
func (e *env) startNamedDriver(name string, failNodeGetInfo bool) *harness.Process {
	e.t.Helper()
	d, err := harness.StartMockDriver(bins.MockDriver, harness.MockDriverConfig{
		Endpoint:        e.driverSock,
		Name:            name,
		NodeID:          e.nodeID,
		FailNodeGetInfo: failNodeGetInfo,
	})
	if err != nil {
		e.t.Fatalf("starting the mock driver: %v", err)
	}
	e.track(d, nil)
	return d
}

// stop sends p SIGTERM and expects it to exit 0.
func (e *env) stop(p *harness.Process) {
	e.t.Helper()
	code, err := p.Stop(exitTimeout)
	if err != nil || code != 0 {
		e.t.Fatalf("stopping %s: exit %d, %v", p.Name, code, err)
	}
}

// startRegistrar starts a registrar for the env; configure, if given,
// changes its command line first.
func (e *env) startRegistrar(name string, configure ...func(*harness.RegistrarConfig)) *harness.Registrar {
	e.t.Helper()
	return e.startRegistrarBinary(name, bins.Registrar, configure...)
}

// startRegistrarBinary is startRegistrar with another registrar binary,
// such as upstream's.
func (e *env) startRegistrarBinary(name, bin string, configure ...func(*harness.RegistrarConfig)) *harness.Registrar {
	e.t.Helper()
	addr, err := harness.FreeLocalAddr()
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := harness.RegistrarConfig{
		CSIAddress: e.driverSock,
		// kubelet dials the endpoint itself, so it is the real path here.
		KubeletRegistrationPath: e.driverSock,
		PluginRegistrationPath:  e.registry,
		HTTPEndpoint:            addr,
		TerminationMessagePath:  e.termination,
		Verbosity:               5,
	}
	for _, f := range configure {
		f(&cfg)
	}
	r, err := harness.StartRegistrar(name, bin, cfg)
	if err != nil {
		e.t.Fatalf("starting %s: %v", name, err)
	}
	e.track(r.Process, nil)
	return r
}

// exitOnRejection makes the registrar exit 1 when kubelet rejects the
// driver, as upstream does, instead of publishing its socket again.
func exitOnRejection(cfg *harness.RegistrarConfig) { cfg.RejectionPolicy = "exit" }

// assertRunning fails the test if p has exited: the registrar must cope
// without a restart.
func assertRunning(t *testing.T, p *harness.Process) {
	t.Helper()
	if exited, code := p.Exited(); exited {
		t.Fatalf("%s (pid %d) exited with %d, want it still running", p.Name, p.Pid(), code)
	}
}

// waitRegistered waits until kubelet lists the driver in CSINode with the
// mock driver's node ID.
func (e *env) waitRegistered(k *harness.Kubelet) {
	e.t.Helper()
	d, err := k.WaitForDriver(waitTimeout, e.driver)
	if err != nil {
		e.t.Fatal(err)
	}
	if d.NodeID != e.nodeID {
		e.t.Fatalf("CSINode lists driver %q with node ID %q, want %q", e.driver, d.NodeID, e.nodeID)
	}
}

// registered starts kubelet, the driver and a registrar called name, and
// returns once kubelet lists the driver and the registrar's /readyz says it
// is registered.
func (e *env) registered(name string) (*harness.Kubelet, *harness.Registrar) {
	e.t.Helper()
	k := e.startKubelet()
	e.startDriver(false)
	r := e.startRegistrar(name)
	e.waitRegistered(k)
	if _, err := r.WaitForReadyz(waitTimeout, 200, "registered"); err != nil {
		e.t.Fatal(err)
	}
	return k, r
}

// socketInode returns the inode of the socket at path, failing the test if
// there is no socket there.
func socketInode(t *testing.T, path string) uint64 {
	t.Helper()
	ino, err := statSocket(path)
	if err != nil {
		t.Fatal(err)
	}
	return ino
}

// statSocket returns the inode of the socket at path, or an error if there
// is no socket there.
func statSocket(path string) (uint64, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0, fmt.Errorf("registration socket: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return 0, fmt.Errorf("%s is %v, want a socket", path, fi.Mode())
	}
	return fi.Sys().(*syscall.Stat_t).Ino, nil
}

func assertNoFile(t *testing.T, path string) {
	t.Helper()
	if fi, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		mode := "?"
		if fi != nil {
			mode = fi.Mode().String()
		}
		t.Errorf("%s still exists (mode %s, err %v), want it removed", path, mode, err)
	}
}

// assertRegistryHolds fails the test unless the registry directory holds
// the registration socket of each driver given and nothing else, apart from
// at most one hidden second name per socket (".<driver>.<suffix>", which
// kubelet ignores): nothing left behind by earlier sockets or processes.
func assertRegistryHolds(t *testing.T, registry string, drivers ...string) {
	t.Helper()
	entries, err := os.ReadDir(registry)
	if err != nil {
		t.Fatal(err)
	}
	sockets := map[string]bool{}
	hidden := map[string]int{}
	var unexpected []string
	for _, entry := range entries {
		name := entry.Name()
		known := false
		for _, d := range drivers {
			switch {
			case name == d+"-reg.sock":
				sockets[d], known = true, true
			case strings.HasPrefix(name, "."+d+"."):
				hidden[d]++
				known = true
			}
		}
		if !known {
			unexpected = append(unexpected, name)
		}
	}
	for _, d := range drivers {
		if !sockets[d] {
			t.Errorf("%s has no registration socket for %q", registry, d)
		}
		if hidden[d] > 1 {
			t.Errorf("%s holds %d hidden names of %q sockets, want at most 1: earlier sockets left behind", registry, hidden[d], d)
		}
	}
	if len(unexpected) > 0 {
		t.Errorf("%s holds %q, want only the registration sockets of %q", registry, unexpected, drivers)
	}
}

func wantExit(t *testing.T, r *harness.Registrar, want int) {
	t.Helper()
	code, err := r.Wait(exitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if code != want {
		t.Fatalf("%s exited with %d, want %d", r.Name, code, want)
	}
}

// Registration: kubelet lists the driver in CSINode with the driver's node ID,
// writes the node annotation, and was given --kubelet-registration-path as
// the endpoint.
func TestRegistration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "registration.e2e.example.com")
	k := e.startKubelet()
	e.startDriver(false)
	r := e.startRegistrar("registrar")

	e.waitRegistered(k)
	nodeID, err := k.WaitForNodeIDAnnotation(waitTimeout, e.driver)
	if err != nil {
		t.Fatal(err)
	}
	if nodeID != e.nodeID {
		t.Errorf("node annotation %s gives driver %q node ID %q, want %q", report.NodeIDAnnotation, e.driver, nodeID, e.nodeID)
	}
	reg, err := k.WaitForEvents(waitTimeout, e.driver, report.Register, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	if reg.Endpoint != r.Config.KubeletRegistrationPath {
		t.Errorf("kubelet registered endpoint %q, want --kubelet-registration-path %q", reg.Endpoint, r.Config.KubeletRegistrationPath)
	}

	info, err := harness.GetInfo(e.regSocket(), 5*time.Second)
	if err != nil {
		t.Fatalf("GetInfo on %s: %v", e.regSocket(), err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != e.driver || info.Endpoint != r.Config.KubeletRegistrationPath ||
		strings.Join(info.SupportedVersions, ",") != "1.0.0" {
		t.Errorf("GetInfo = {Type:%q Name:%q Endpoint:%q SupportedVersions:%q}, want {%q %q %q [1.0.0]}",
			info.Type, info.Name, info.Endpoint, info.SupportedVersions, registerapi.CSIPlugin, e.driver, r.Config.KubeletRegistrationPath)
	}

	fi, err := os.Lstat(e.regSocket())
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("registration socket mode %v, want 0600", perm)
	}
	if err := r.WaitForHealthz(waitTimeout, 200); err != nil {
		t.Error(err)
	}
}

// SIGTERM: the registrar removes its socket and exits 0, and kubelet
// deregisters the driver.
func TestSIGTERMDeregisters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sigterm.e2e.example.com")
	k := e.startKubelet()
	e.startDriver(false)
	r := e.startRegistrar("registrar")
	e.waitRegistered(k)

	if err := r.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantExit(t, r, 0)
	assertNoFile(t, e.regSocket())
	assertRegistryHolds(t, e.registry)
	if err := k.WaitForNoDriver(waitTimeout, e.driver); err != nil {
		t.Fatal(err)
	}
	if _, err := k.WaitForEvents(waitTimeout, e.driver, report.Deregister, false, 1); err != nil {
		t.Error(err)
	}
}

// A socket left behind by a registrar that died (nobody listens on it) is
// replaced at start, and registration succeeds.
func TestStaleSocketReplaced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "stale.e2e.example.com")
	l, err := net.Listen("unix", e.regSocket())
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	staleInode := socketInode(t, e.regSocket())

	k := e.startKubelet()
	e.startDriver(false)
	r := e.startRegistrar("registrar")
	e.waitRegistered(k)

	if ino := socketInode(t, e.regSocket()); ino == staleInode {
		t.Errorf("the socket at %s is still the stale one (inode %d)", e.regSocket(), ino)
	}
	if exited, code := r.Exited(); exited {
		t.Errorf("registrar exited with %d, want it running", code)
	}
}

// A regular file where the socket belongs: the registrar refuses to touch it,
// exits 1 and names the path.
func TestRegularFileAtSocketPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "regular-file.e2e.example.com")
	const content = "not a socket: the registrar must leave this file alone\n"
	if err := os.WriteFile(e.regSocket(), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	e.startDriver(false)
	r := e.startRegistrar("registrar")

	wantExit(t, r, 1)
	if !strings.Contains(r.Stderr(), e.regSocket()) {
		t.Errorf("registrar's stderr does not name %s", e.regSocket())
	}
	got, err := os.ReadFile(e.regSocket())
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != content {
		t.Errorf("file content is now %q, want %q", got, content)
	}
}

// kubelet rejects the driver (its NodeGetInfo fails) and the registrar runs
// with --rejection-policy=exit, upstream's behaviour: it answers
// NotifyRegistrationStatus, writes kubelet's reason to the termination
// message file, removes its socket and exits 1. (The default policy, retry,
// is TestRejectedThenAccepted.)
func TestKubeletRejects(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rejected.e2e.example.com")
	k := e.startKubelet()
	e.startDriver(true)
	r := e.startRegistrar("registrar", exitOnRejection)

	wantExit(t, r, 1)
	assertNoFile(t, e.regSocket())
	assertRegistryHolds(t, e.registry)

	rejected, err := k.WaitForEvents(waitTimeout, e.driver, report.Register, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	if rejected.Error == "" {
		t.Fatalf("kubelet's CSI handler accepted the driver; the mock driver was to fail NodeGetInfo")
	}
	// The reason kubelet sends (operationexecutor/operation_generator.go).
	reason := "RegisterPlugin error -- plugin registration failed with err: " + rejected.Error

	msg, err := os.ReadFile(e.termination)
	if err != nil {
		t.Fatalf("termination message: %v", err)
	}
	if !strings.Contains(string(msg), reason) {
		t.Errorf("termination message is %q, want it to contain kubelet's reason %q", msg, reason)
	}

	// kubelet logs the operation's error; had sending the notification
	// failed, the gRPC error would follow the reason.
	failure, err := k.WaitForOperationFailure(waitTimeout, e.regSocket())
	if err != nil {
		t.Fatal(err)
	}
	if failure.Error != reason {
		t.Errorf("kubelet's operation ended with %q, want exactly the reason %q (anything after it means NotifyRegistrationStatus failed)", failure.Error, reason)
	}
	if _, listed := k.State().Driver(e.driver); listed {
		t.Errorf("CSINode lists the rejected driver")
	}
}

// A rolling update with maxSurge: a second registrar takes the socket over,
// kubelet registers it again, and the first one steps aside: not ready
// ("superseded" in /readyz, /status and /metrics) but alive (/healthz 200,
// so that its liveness probe does not restart it and take the socket back).
// The first one's SIGTERM must not take the second one's socket with it.
func TestMaxSurgeTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "max-surge.e2e.example.com")
	k := e.startKubelet()
	e.startDriver(false)
	a := e.startRegistrar("registrar-A")
	e.waitRegistered(k)
	if _, err := k.WaitForEvents(waitTimeout, e.driver, report.Register, true, 1); err != nil {
		t.Fatal(err)
	}
	inodeA := socketInode(t, e.regSocket())

	b := e.startRegistrar("registrar-B")
	if _, err := b.WaitForLine(waitTimeout, "Took the registration socket over"); err != nil {
		t.Fatalf("B did not take A's socket over: %v", err)
	}
	// Handed over: the same file, now B's.
	inodeB := socketInode(t, e.regSocket())
	if inodeB != inodeA {
		t.Fatalf("the socket at the path has inode %d after the handover, want A's %d", inodeB, inodeA)
	}
	if err := b.WaitForHealthz(waitTimeout, 200); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WaitForReadyz(waitTimeout, 200, "registered"); err != nil {
		t.Fatal(err)
	}
	waitForMetrics(t, b, registeredSamples(stateRegistered, is(1, metricPublications, "reason", "handover"))...)
	assertSuperseded(t, a)

	deregistrations := k.CountEvents(e.driver, report.Deregister, false)
	if err := a.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantExit(t, a, 0)

	// A's exit is complete: had it removed B's socket, the file would be gone now.
	if ino := socketInode(t, e.regSocket()); ino != inodeB {
		t.Errorf("the socket at %s has inode %d, want B's %d", e.regSocket(), ino, inodeB)
	}
	assertRegistryHolds(t, e.registry, e.driver)
	// kubelet would notice a removal within a reconcile period (1 s): give
	// it three and expect no deregistration.
	err := k.WaitUntil(3*time.Second, "a deregistration", func() bool {
		return k.CountEvents(e.driver, report.Deregister, false) > deregistrations
	})
	if err == nil {
		t.Errorf("kubelet deregistered the driver after A exited")
	} else if exited, _ := k.Exited(); exited {
		t.Fatal(err)
	}
	if d, ok := k.State().Driver(e.driver); !ok || d.NodeID != e.nodeID {
		t.Errorf("CSINode lists %+v (listed: %v), want driver %q with node ID %q", d, ok, e.driver, e.nodeID)
	}
	if code, err := b.Healthz(); err != nil || code != 200 {
		t.Errorf("B's /healthz: %d, %v; want 200", code, err)
	}
	if code, body, err := b.Readyz(); err != nil || code != 200 {
		t.Errorf("B's /readyz: %d %q, %v; want 200", code, body, err)
	}
	waitForMetrics(t, b, registeredSamples(stateRegistered)...)
	if exited, code := b.Exited(); exited {
		t.Errorf("B exited with %d", code)
	}
}

// assertSuperseded checks that r has stepped aside for a newer instance:
// not ready, superseded, not registered, yet live.
func assertSuperseded(t *testing.T, r *harness.Registrar) {
	t.Helper()
	body, err := r.WaitForReadyz(waitTimeout, 503, "superseded")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s /readyz: 503 %q", r.Name, body)
	st, err := r.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.State != stateSuperseded || st.Ready {
		t.Errorf("%s /status: state %q, ready %v; want %q, false\n%s", r.Name, st.State, st.Ready, stateSuperseded, st.Raw)
	}
	waitForMetrics(t, r, registeredSamples(stateSuperseded)...)
	if code, err := r.Healthz(); err != nil || code != 200 {
		t.Errorf("%s /healthz while superseded: %d, %v; want 200", r.Name, code, err)
	}
}

// kubelet restarts: the fresh kubelet finds the running registrar's socket
// and registers the driver without the registrar restarting.
func TestKubeletRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "kubelet-restart.e2e.example.com")
	first := e.startKubelet()
	e.startDriver(false)
	r := e.startRegistrar("registrar")
	e.waitRegistered(first)
	// kubelet sends its verdict after writing CSINode: let it arrive, so
	// that this kubelet's registration is complete when it stops.
	if _, err := r.WaitForReadyz(waitTimeout, 200, "registered"); err != nil {
		t.Fatal(err)
	}

	if code, err := first.Stop(exitTimeout); err != nil || code != 0 {
		t.Fatalf("stopping the first kubelet: exit %d, %v", code, err)
	}
	second := e.startKubelet()
	if ready := second.Events()[0]; len(ready.State.Drivers) != 0 {
		t.Fatalf("the new kubelet's CSINode already lists %v: not a fresh API server", ready.State.Drivers)
	}
	e.waitRegistered(second)
	if _, err := second.WaitForNodeIDAnnotation(waitTimeout, e.driver); err != nil {
		t.Error(err)
	}
	if exited, code := r.Exited(); exited {
		t.Errorf("registrar exited with %d, want it still running", code)
	}
	if code, err := r.Healthz(); err != nil || code != 200 {
		t.Errorf("/healthz: %d, %v; want 200", code, err)
	}
	// The fresh kubelet's verdict is counted; the socket was not published
	// again for it.
	if _, err := r.WaitForReadyz(waitTimeout, 200, "registered"); err != nil {
		t.Error(err)
	}
	waitForMetrics(t, r, registeredSamples(stateRegistered,
		is(1, metricPublications, "reason", "start"),
		is(2, metricKubeletRPCs, "method", "NotifyRegistrationStatus", "result", "registered"))...)
}

// The driver starts after the registrar: /healthz answers 200 while the
// registrar waits, and registration follows once the driver is up.
func TestLateDriver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "late-driver.e2e.example.com")
	k := e.startKubelet()
	r := e.startRegistrar("registrar")
	started := time.Now()

	if err := r.WaitForHealthz(waitTimeout, 200); err != nil {
		t.Fatal(err)
	}
	// Keep the driver away for at least a second, checking that the
	// registrar stays up and healthy all along.
	for time.Since(started) < 1500*time.Millisecond {
		if code, err := r.Healthz(); err != nil || code != 200 {
			t.Fatalf("/healthz while waiting for the driver: %d, %v; want 200", code, err)
		}
		if exited, code := r.Exited(); exited {
			t.Fatalf("registrar exited with %d while waiting for the driver", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Lstat(e.regSocket()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("registration socket before the driver is up: %v, want it absent", err)
	}

	e.startDriver(false)
	e.waitRegistered(k)
	if code, err := r.Healthz(); err != nil || code != 200 {
		t.Errorf("/healthz after registration: %d, %v; want 200", code, err)
	}
}
