// Package integration runs the built registrar binary against the test CSI
// driver (test/mockdriver, on csi-test's mock driver) over real Unix
// sockets, with a gRPC client in kubelet's place. The suite with kubelet's
// own plugin manager is in test/e2e.
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/poll"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The version the suite builds the registrar with.
const testVersion = "v0.0.0-integration"

// registrarBin is the registrar under test; registrarVersion, the version
// it prints; registrarEmulator, when not empty, the command that runs it
// (qemu user emulation: it is started as "<emulator> <registrarBin> args").
// driverBin is the test driver, always built here for this machine.
var registrarBin, registrarVersion, registrarEmulator, driverBin string

// The environment that points the suite at a registrar built elsewhere,
// such as make build-all's binary of another architecture (make
// arch-test): its path, the version it was built with, and the emulator
// that runs it, if any. Without REGISTRAR_BIN the suite builds one.
const (
	registrarBinEnv      = "REGISTRAR_BIN"
	registrarVersionEnv  = "REGISTRAR_VERSION"
	registrarEmulatorEnv = "REGISTRAR_EMULATOR"
)

// slowTimeout bounds the waits for the binary, which may run under
// emulation (make arch-test).
const slowTimeout = 30 * time.Second

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "itbin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := chooseRegistrar(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	driverBin = filepath.Join(dir, "mockdriver")
	builds := []struct{ out, pkg string }{{driverBin, "./test/mockdriver"}}
	if os.Getenv(registrarBinEnv) == "" {
		builds = append(builds, struct{ out, pkg string }{registrarBin, "./cmd/registrar"})
	}
	for _, b := range builds {
		cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+testVersion, "-o", b.out, b.pkg)
		cmd.Dir = "../.."
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n", b.pkg, err)
			return 1
		}
	}
	return m.Run()
}

// chooseRegistrar sets registrarBin, registrarVersion and
// registrarEmulator from the environment, or to the binary the suite
// builds in dir.
func chooseRegistrar(dir string) error {
	bin := os.Getenv(registrarBinEnv)
	registrarVersion = os.Getenv(registrarVersionEnv)
	registrarEmulator = os.Getenv(registrarEmulatorEnv)
	if bin == "" {
		if registrarVersion != "" || registrarEmulator != "" {
			return fmt.Errorf("%s or %s is set without %s: set %s to the registrar binary they are about", registrarVersionEnv, registrarEmulatorEnv, registrarBinEnv, registrarBinEnv)
		}
		registrarBin, registrarVersion = filepath.Join(dir, "csi-node-driver-registrar"), testVersion
		return nil
	}
	if registrarVersion == "" {
		return fmt.Errorf("%s=%s needs %s, the version it was built with (make version)", registrarBinEnv, bin, registrarVersionEnv)
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		return fmt.Errorf("%s: %w", registrarBinEnv, err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.Mode().IsRegular() {
		relative := ""
		if !filepath.IsAbs(bin) {
			relative = " (a relative path is taken from test/integration, where go test runs: give an absolute one)"
		}
		return fmt.Errorf("%s=%s: not a file (%v)%s: build it first (make build, or make build-all)", registrarBinEnv, bin, err, relative)
	}
	if registrarEmulator != "" {
		if registrarEmulator, err = exec.LookPath(registrarEmulator); err != nil {
			return fmt.Errorf("%s: %w: install it (Debian: qemu-user-static)", registrarEmulatorEnv, err)
		}
	}
	registrarBin = abs
	return nil
}

// registrarArgv is the command line that runs the registrar with args:
// through the emulator when there is one.
func registrarArgv(args ...string) []string {
	argv := append([]string{registrarBin}, args...)
	if registrarEmulator != "" {
		argv = append([]string{registrarEmulator}, argv...)
	}
	return argv
}

// registrarCommand is exec.Command for the registrar with args.
func registrarCommand(args ...string) *exec.Cmd {
	argv := registrarArgv(args...)
	return exec.Command(argv[0], argv[1:]...)
}

// syncBuffer collects a process's output while tests read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type process struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	exited         chan struct{}
	err            error
}

func startProcess(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	return startProcessWithEnv(t, name, nil, bin, args...)
}

// startProcessWithEnv starts bin with env as its whole environment, or with
// the test's environment when env is nil.
func startProcessWithEnv(t *testing.T, name string, env []string, bin string, args ...string) *process {
	t.Helper()
	return newProcess(name, env, bin, args...).start(t)
}

// newProcess is the process of bin with args, not started yet, its output
// collected in stdout and stderr, with env as startProcessWithEnv's.
func newProcess(name string, env []string, bin string, args ...string) *process {
	p := &process{name: name, cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.Env = env
	return p
}

// start starts p; it is killed at the end of the test if still running.
func (p *process) start(t *testing.T) *process {
	t.Helper()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%s stdout:\n%s\n%s stderr:\n%s", p.name, p.stdout.String(), p.name, p.stderr.String())
		}
	})
	return p
}

// wait returns the exit code once the process has exited.
func (p *process) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not exit", p.name)
	}
	var exitErr *exec.ExitError
	if errors.As(p.err, &exitErr) {
		return exitErr.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("%s: %v", p.name, p.err)
	}
	return 0
}

func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// node is one test's set-up: a driver socket directory and a registry
// directory, as a DaemonSet pod mounts them.
type node struct {
	root, driverSocket, registry, termination, httpAddr string
}

func newNode(t *testing.T) *node {
	t.Helper()
	root, err := os.MkdirTemp("", "it")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	n := &node{
		root:         root,
		driverSocket: filepath.Join(root, "csi.sock"),
		registry:     filepath.Join(root, "registry"),
		termination:  filepath.Join(root, "termination-log"),
		httpAddr:     freeAddress(t),
	}
	if err := os.Mkdir(n.registry, 0o755); err != nil {
		t.Fatal(err)
	}
	// kubelet creates the termination message file before the container starts.
	if err := os.WriteFile(n.termination, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (n *node) startDriver(t *testing.T, name string, args ...string) *process {
	t.Helper()
	p := startProcess(t, "mockdriver", driverBin, append([]string{"--endpoint=" + n.driverSocket, "--name=" + name}, args...)...)
	poll.UntilWithin(t, slowTimeout, "the driver listens", func() bool {
		_, err := os.Stat(n.driverSocket)
		return err == nil || !p.running()
	})
	return p
}

func (n *node) startRegistrar(t *testing.T, args ...string) *process {
	t.Helper()
	return n.startRegistrarWithEnv(t, nil, args...)
}

// startRegistrarWithEnv is startRegistrar with env as the whole
// environment (see startProcessWithEnv).
func (n *node) startRegistrarWithEnv(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	return n.registrarProcess(env, args...).start(t)
}

// registrarProcess is the registrar of startRegistrarWithEnv, not started.
func (n *node) registrarProcess(env []string, args ...string) *process {
	base := []string{
		"--csi-address=" + n.driverSocket,
		"--kubelet-registration-path=/var/lib/kubelet/plugins/test/csi.sock",
		"--plugin-registration-path=" + n.registry,
		"--http-endpoint=" + n.httpAddr,
		"--termination-message-path=" + n.termination,
		"-v=4",
	}
	argv := registrarArgv(append(base, args...)...)
	return newProcess("registrar", env, argv[0], argv[1:]...)
}

func (n *node) socketPath(name string) string {
	return filepath.Join(n.registry, name+"-reg.sock")
}

func (n *node) waitForSocket(t *testing.T, name string, registrar *process) {
	t.Helper()
	poll.UntilWithin(t, slowTimeout, "the registration socket is published", func() bool {
		if !registrar.running() {
			t.Fatalf("the registrar exited: %v", registrar.err)
		}
		fi, err := os.Lstat(n.socketPath(name))
		return err == nil && fi.Mode().Type() == fs.ModeSocket
	})
}

func (n *node) healthz(t *testing.T) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + n.httpAddr + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func kubeletClient(t *testing.T, socket string) registerapi.RegistrationClient {
	t.Helper()
	conn, err := grpc.NewClient("unix:"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return registerapi.NewRegistrationClient(conn)
}

func TestVersion(t *testing.T) {
	out, err := registrarCommand("--version").CombinedOutput()
	if err != nil {
		t.Fatalf("--version: %v: %s", err, out)
	}
	if want := registrarBin + " " + registrarVersion + "\n"; string(out) != want {
		t.Errorf("--version printed %q, want %q", out, want)
	}
}

func TestExecProbeModeExitsAtOnce(t *testing.T) {
	// As in old manifests' exec liveness probes: nothing else is set up.
	cmd := registrarCommand("--kubelet-registration-path=/var/lib/kubelet/plugins/x/csi.sock", "--mode=kubelet-registration-probe")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("probe mode: %v: %s", err, out)
	}
}

// TestRegistersAndStopsCleanly is the happy path, which make arch-test
// also runs on every architecture's binary under emulation: what kubelet
// and the probes see must not depend on the word size or the byte order.
func TestRegistersAndStopsCleanly(t *testing.T) {
	const name = "it.csi.example.com"
	started := time.Now()
	n, registrar := published(t, name)

	fi, err := os.Lstat(n.socketPath(name))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("registration socket mode %v gives access to group or others", perm)
	}

	client := kubeletClient(t, n.socketPath(name))
	ctx := context.Background()
	info, err := client.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != name || info.Endpoint != "/var/lib/kubelet/plugins/test/csi.sock" || strings.Join(info.SupportedVersions, ",") != "1.0.0" {
		t.Errorf("GetInfo = %+v", info)
	}
	if _, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}
	poll.UntilWithin(t, slowTimeout, "the registrar logs the registration", func() bool {
		return strings.Contains(registrar.stderr.String(), "kubelet registered the driver")
	})
	if code, body := n.healthz(t); code != http.StatusOK || !strings.Contains(body, "serving") {
		t.Errorf("/healthz = %d %q, want 200 serving", code, body)
	}
	if code, body := get(n.httpAddr, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d %q, want 200", code, body)
	}
	checkRegisteredStatus(t, n.status(t, n.httpAddr), name, n.socketPath(name), started)
	checkRegisteredMetrics(t, n.metrics(t), name, started)

	registrar.cmd.Process.Signal(syscall.SIGTERM)
	if code := registrar.wait(t); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
	if _, err := os.Lstat(n.socketPath(name)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("registration socket left behind after SIGTERM (err %v)", err)
	}
	entries, _ := os.ReadDir(n.registry)
	if len(entries) != 0 {
		t.Errorf("registry directory not empty after exit: %v", entries)
	}
	if _, err := os.Stat(n.driverSocket); err != nil {
		t.Errorf("the driver's socket was touched: %v", err)
	}
}

func TestWaitsForALateDriver(t *testing.T) {
	const name = "late.csi.example.com"
	n := newNode(t)
	registrar := n.startRegistrar(t)
	poll.UntilWithin(t, slowTimeout, "the registrar waits for the driver", func() bool {
		return strings.Contains(registrar.stderr.String(), "Waiting for the CSI driver")
	})
	// The HTTP server starts beside the first attempt, not before it.
	poll.UntilWithin(t, slowTimeout, "the HTTP endpoint listens", func() bool {
		code, _ := n.healthz(t)
		return code != 0
	})
	if code, body := n.healthz(t); code != http.StatusOK || !strings.Contains(body, "waiting") {
		t.Errorf("/healthz while waiting = %d %q, want 200", code, body)
	}
	// /readyz says why the driver cannot be asked, with what to do.
	want := "waiting for the CSI driver: cannot connect to " + n.driverSocket + " (no such file or directory): the driver's socket is not there"
	poll.UntilWithin(t, slowTimeout, "/readyz says why", func() bool {
		code, body := get(n.httpAddr, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, want)
	})
	n.startDriver(t, name)
	n.waitForSocket(t, name, registrar)
	if _, err := kubeletClient(t, n.socketPath(name)).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if got := strings.Count(registrar.stderr.String(), "Waiting for the CSI driver"); got != 1 {
		t.Errorf("logged the wait %d times, want once", got)
	}
}

func TestRetriesADriverThatIsNotReady(t *testing.T) {
	const name = "slow.csi.example.com"
	n := newNode(t)
	driver := n.startDriver(t, name, "--unavailable-calls=3")
	registrar := n.startRegistrar(t)
	n.waitForSocket(t, name, registrar)
	// The driver's output reaches the test through a pipe, possibly after
	// the socket it answered for.
	poll.UntilWithin(t, slowTimeout, "the driver's output shows the fourth call", func() bool {
		return strings.Contains(driver.stdout.String(), "GetPluginInfo call=4")
	})
	if got := strings.Count(driver.stdout.String(), "GetPluginInfo call="); got != 4 {
		t.Errorf("GetPluginInfo called %d times, want 4 (3 Unavailable, then an answer)", got)
	}
}

func TestRejectionByKubelet(t *testing.T) {
	const reason = "RegisterPlugin error -- plugin registration failed with err: NodeGetInfo failed"
	reject := func(t *testing.T, n *node, name string) {
		t.Helper()
		_, err := kubeletClient(t, n.socketPath(name)).NotifyRegistrationStatus(context.Background(),
			&registerapi.RegistrationStatus{PluginRegistered: false, Error: reason})
		if err != nil {
			t.Fatalf("NotifyRegistrationStatus(false) got no reply: %v", err)
		}
	}
	termination := func(t *testing.T, n *node) string {
		t.Helper()
		msg, err := os.ReadFile(n.termination)
		if err != nil {
			t.Fatal(err)
		}
		return string(msg)
	}

	t.Run("retry (default)", func(t *testing.T) {
		const name = "retried.csi.example.com"
		n := newNode(t)
		n.startDriver(t, name)
		registrar := n.startRegistrar(t)
		n.waitForSocket(t, name, registrar)
		before, err := os.Lstat(n.socketPath(name))
		if err != nil {
			t.Fatal(err)
		}
		reject(t, n, name)
		poll.UntilWithin(t, slowTimeout, "the socket is published again after the backoff", func() bool {
			now, err := os.Lstat(n.socketPath(name))
			return err == nil && !os.SameFile(before, now)
		})
		if !registrar.running() {
			t.Fatal("the registrar exited")
		}
		if msg := termination(t, n); !strings.Contains(msg, reason) {
			t.Errorf("termination message = %q, want kubelet's reason", msg)
		}
		resp, err := http.Get("http://" + n.httpAddr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("/readyz is 200 after a rejection")
		}
		// Accepted on the new socket.
		if _, err := kubeletClient(t, n.socketPath(name)).NotifyRegistrationStatus(context.Background(),
			&registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
			t.Fatal(err)
		}
		poll.UntilWithin(t, slowTimeout, "/readyz turns 200", func() bool {
			resp, err := http.Get("http://" + n.httpAddr + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	})

	t.Run("exit", func(t *testing.T) {
		const name = "rejected.csi.example.com"
		n := newNode(t)
		n.startDriver(t, name)
		registrar := n.startRegistrar(t, "--rejection-policy=exit")
		n.waitForSocket(t, name, registrar)
		reject(t, n, name)
		if code := registrar.wait(t); code != 1 {
			t.Errorf("exit code after the rejection = %d, want 1", code)
		}
		if msg := termination(t, n); !strings.Contains(msg, reason) {
			t.Errorf("termination message = %q, want kubelet's reason", msg)
		}
		if _, err := os.Lstat(n.socketPath(name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("registration socket left behind after the rejection (err %v)", err)
		}
		if got := strings.Count(registrar.stderr.String(), reason); got < 1 {
			t.Errorf("the reason is not in the log")
		}
	})
}

func TestLeavesAFileAtTheSocketPath(t *testing.T) {
	const name = "file.csi.example.com"
	n := newNode(t)
	content := []byte("not a socket")
	if err := os.WriteFile(n.socketPath(name), content, 0o644); err != nil {
		t.Fatal(err)
	}
	n.startDriver(t, name)
	registrar := n.startRegistrar(t)
	if code := registrar.wait(t); code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	if got, _ := os.ReadFile(n.socketPath(name)); !bytes.Equal(got, content) {
		t.Errorf("the file at the socket path changed: %q", got)
	}
	if stderr := registrar.stderr.String(); !strings.Contains(stderr, n.socketPath(name)) || !strings.Contains(stderr, "not a socket") {
		t.Errorf("the error does not name the path and the problem:\n%s", stderr)
	}
	if msg, _ := os.ReadFile(n.termination); !strings.Contains(string(msg), n.socketPath(name)) {
		t.Errorf("termination message = %q, want the error", msg)
	}
}

// A taken --http-endpoint is fatal, and whatever the registrar published
// while it was finding out is gone when it exits.
// An address that cannot be listened on fails the start, naming the flag,
// and leaves nothing in the registry.
func TestHTTPEndpointUnusable(t *testing.T) {
	const name = "port.csi.example.com"
	n := newNode(t)
	n.startDriver(t, name)
	// A documentation address (TEST-NET-3): not on this machine.
	const addr = "203.0.113.1:9808"
	registrar := n.startRegistrar(t, "--http-endpoint="+addr)
	if code := registrar.wait(t); code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	if stderr := registrar.stderr.String(); !strings.Contains(stderr, "--http-endpoint") || !strings.Contains(stderr, addr) {
		t.Errorf("the error does not name the flag and the address:\n%s", stderr)
	}
	if entries, _ := os.ReadDir(n.registry); len(entries) != 0 {
		t.Errorf("files left in the registry: %v", entries)
	}
}

// An address in use is waited for, not fatal: with hostNetwork the older
// registrar of a rolling update holds it until it hands the registration
// over. Meanwhile the registrar registers; it listens once the port is free.
func TestHTTPEndpointInUseIsWaitedFor(t *testing.T) {
	const name = "port.csi.example.com"
	n := newNode(t)
	taken, err := net.Listen("tcp", n.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	n.startDriver(t, name)
	registrar := n.startRegistrar(t)
	n.waitForSocket(t, name, registrar)
	poll.UntilWithin(t, slowTimeout, "the registrar says it waits for the port, and for which flag", func() bool {
		return logLineHas(registrar.stderr.String(), "The HTTP endpoint's address is in use: waiting for it", `flag="--http-endpoint"`)
	})
	if _, err := kubeletClient(t, n.socketPath(name)).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo while waiting for the port: %v", err)
	}

	taken.Close()
	poll.UntilWithin(t, slowTimeout, "the registrar serves /healthz", func() bool {
		code, _ := n.healthz(t)
		return code == http.StatusOK
	})
	if !registrar.running() {
		t.Fatal("the registrar exited")
	}
}

func TestRefusesAnInvalidDriverName(t *testing.T) {
	n := newNode(t)
	n.startDriver(t, "../escape")
	registrar := n.startRegistrar(t)
	if code := registrar.wait(t); code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	if stderr := registrar.stderr.String(); !strings.Contains(stderr, `\"../escape\"`) || !strings.Contains(stderr, "GetPluginInfo") {
		t.Errorf("the error does not quote the name and say where it comes from:\n%s", stderr)
	}
	entries, _ := os.ReadDir(n.registry)
	if len(entries) != 0 {
		t.Errorf("files created for an invalid name: %v", entries)
	}
	var names []string
	rootEntries, _ := os.ReadDir(n.root)
	for _, e := range rootEntries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "csi.sock,registry,termination-log" {
		t.Errorf("files next to the registry changed: %v", names)
	}
}

func TestAcceptsLegacyKlogFlags(t *testing.T) {
	const name = "legacy.csi.example.com"
	n := newNode(t)
	n.startDriver(t, name)
	legacy := []string{"logtostderr", "alsologtostderr", "one_output"}
	var args []string
	for _, f := range legacy {
		args = append(args, "--"+f)
	}
	registrar := n.startRegistrar(t, args...)
	n.waitForSocket(t, name, registrar)
	// The warnings come before "Starting"; the pipe from the process may
	// not have delivered either yet.
	poll.UntilWithin(t, slowTimeout, "the registrar's start is in its log", func() bool {
		return strings.Contains(registrar.stderr.String(), `"Starting"`)
	})
	stderr := registrar.stderr.String()
	for _, f := range legacy {
		if got := strings.Count(stderr, "flag --"+f+" is deprecated"); got != 1 {
			t.Errorf("--%s: %d deprecation warnings, want 1", f, got)
		}
	}
}

func TestJSONLogging(t *testing.T) {
	const name = "json.csi.example.com"
	n := newNode(t)
	n.startDriver(t, name)
	registrar := n.startRegistrar(t, "--logging-format=json")
	n.waitForSocket(t, name, registrar)
	registrar.cmd.Process.Signal(syscall.SIGTERM)
	if code := registrar.wait(t); code != 0 {
		t.Fatalf("exit code = %d", code)
	}
	lines := strings.Split(strings.TrimSpace(registrar.stderr.String()), "\n")
	if len(lines) < 3 {
		t.Fatalf("only %d log lines", len(lines))
	}
	for _, line := range lines {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		for _, key := range []string{"ts", "caller", "msg"} {
			if _, ok := entry[key]; !ok {
				t.Errorf("line without %q: %s", key, line)
			}
		}
	}
}

// An info buffer of the cap, 2 GiB (--log-text-info-buffer-size), holds
// every info line until the flush, here at exit. Where int has 32 bits
// (linux/arm, which make arch-test runs this on) the cap once wrapped to a
// negative size, which bufio replaces with 4 KiB. The registrar reserves
// the buffer; the kernel gives it only the pages it writes.
func TestInfoBufferOfTheCapHoldsTheLines(t *testing.T) {
	const name = "buffer.csi.example.com"
	n := newNode(t)
	n.startDriver(t, name)
	stdoutPath := filepath.Join(n.root, "stdout")
	stdout, err := os.Create(stdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	registrar := n.registrarProcess(nil, "--log-text-split-stream", "--log-text-info-buffer-size=3Gi", "--log-flush-frequency=1h", "-v=5")
	// A file, not a pipe: what the registrar writes before it answers a
	// probe is in the file when the answer arrives.
	registrar.cmd.Stdout = stdout
	registrar.start(t)
	stdout.Close()
	n.waitForSocket(t, name, registrar)

	// Each probe is logged at -v=5 before it is answered: 100 of them are
	// more than 4 KiB of lines.
	const probes = 100
	poll.UntilWithin(t, slowTimeout, "/healthz answers", func() bool {
		code, _ := n.healthz(t)
		return code == http.StatusOK
	})
	for range probes {
		if code, body := n.healthz(t); code != http.StatusOK {
			t.Fatalf("/healthz = %d %q", code, body)
		}
	}
	if written, err := os.ReadFile(stdoutPath); err != nil || len(written) != 0 {
		t.Fatalf("%d bytes on stdout before the flush (%v): the buffer holds less than the cap. The first of them:\n%.300s", len(written), err, written)
	}

	registrar.cmd.Process.Signal(syscall.SIGTERM)
	if code := registrar.wait(t); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0", code)
	}
	written, err := os.ReadFile(stdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(written), `"Health probe"`); got < probes {
		t.Errorf("stdout has %d probe lines after the flush at exit, want at least %d:\n%s", got, probes, written)
	}
}

// TestGOMAXPROCS checks the image's GOMAXPROCS=1 and that --automaxprocs
// takes precedence over it: with it, the registrar ends up where it would
// without the variable, as upstream's image (which sets none) does.
func TestGOMAXPROCS(t *testing.T) {
	environ := environWithout("GOMAXPROCS")
	image := environWithout("GOMAXPROCS", "GOMAXPROCS=1")

	if got, _ := startedWith(t, image); got != "1" {
		t.Errorf("with GOMAXPROCS=1: gomaxprocs=%s, want 1", got)
	}
	want, _ := startedWith(t, environ, "--automaxprocs")
	got, stderr := startedWith(t, image, "--automaxprocs")
	if got != want {
		t.Errorf("--automaxprocs with GOMAXPROCS=1 in the environment: gomaxprocs=%s, want %s as without it", got, want)
	}
	if !strings.Contains(stderr, "--automaxprocs overrides GOMAXPROCS from the environment") || strings.Contains(stderr, "Honoring") {
		t.Errorf("--automaxprocs did not say that it overrides GOMAXPROCS=1:\n%s", stderr)
	}
}

var startingProcs = regexp.MustCompile(`"Starting".* gomaxprocs=(\d+)`)

// startedWith starts the registrar with env as its environment (no driver
// is needed), stops it once it has logged its start, and returns the
// GOMAXPROCS it logged, and its log.
func startedWith(t *testing.T, env []string, args ...string) (string, string) {
	t.Helper()
	p := newNode(t).startRegistrarWithEnv(t, env, args...)
	var procs string
	poll.UntilWithin(t, slowTimeout, "the registrar logs its start", func() bool {
		if !p.running() {
			t.Fatalf("the registrar exited: %v\n%s", p.err, p.stderr.String())
		}
		if m := startingProcs.FindStringSubmatch(p.stderr.String()); m != nil {
			procs = m[1]
		}
		return procs != ""
	})
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	return procs, p.stderr.String()
}

// environWithout returns the test's environment without the variable
// name, with extra added.
func environWithout(name string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, name+"=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// logLineHas tells whether one line of log holds every one of parts.
func logLineHas(log string, parts ...string) bool {
	for line := range strings.Lines(log) {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}
