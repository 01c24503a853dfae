package integration

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/poll"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// A manifest or script written for upstream v2.17 sees the same exit codes:
// 2 only when the command line does not parse (Go's flag package, in both),
// 1 when a value that parses cannot be used; every such value is named
// before anything starts (docs/flags.md, "Exit codes").
func TestExitCodesAsUpstream(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"--kubelet-registration-path missing", nil, 1, []string{"--kubelet-registration-path: the endpoint is required"}},
		{"unknown flag", []string{"--kubelet-registration-path=/k/csi.sock", "--no-such-flag"}, 2, []string{"flag provided but not defined: -no-such-flag"}},
		{"value that does not parse", []string{"--kubelet-registration-path=/k/csi.sock", "--timeout=abc"}, 2, []string{`invalid value "abc" for flag -timeout`}},
		{"values that parse but cannot be used", []string{"--kubelet-registration-path=/k/csi.sock", "--rejection-policy=retyr", "--unhealthy-after=-5s", "--driver-health-endpoint=bad::addr", "--http-endpoint=notaport"}, 1, []string{
			`--rejection-policy: rejection policy "retyr" is not supported`,
			"--unhealthy-after=-5s is negative",
			`--driver-health-endpoint="bad::addr": not host:port`,
			`--http-endpoint="notaport": not host:port`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			n.startDriver(t, "exit.csi.example.com")
			args := append([]string{
				"--csi-address=" + n.driverSocket,
				"--plugin-registration-path=" + n.registry,
				"--termination-message-path=" + n.termination,
			}, tc.args...)
			argv := registrarArgv(args...)
			registrar := startProcess(t, "registrar", argv[0], argv[1:]...)
			if code := registrar.wait(t); code != tc.code {
				t.Errorf("exit code = %d, want %d", code, tc.code)
			}
			// klog quotes the error, escaping its quotes.
			stderr := strings.ReplaceAll(registrar.stderr.String(), `\"`, `"`)
			msg, _ := os.ReadFile(n.termination)
			for _, want := range tc.want {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, stderr)
				}
				if tc.code == 1 && !strings.Contains(string(msg), want) {
					t.Errorf("termination message = %q, want %q in it", msg, want)
				}
			}
			if entries, _ := os.ReadDir(n.registry); len(entries) != 0 {
				t.Errorf("files published in the registry: %v", entries)
			}
		})
	}
}

// upstreamRegistrarEnv names upstream's registrar binary when it is not at
// ../shared/interop/ beside the repository, as for the e2e suite
// (harness.FindUpstreamRegistrar).
const upstreamRegistrarEnv = "UPSTREAM_REGISTRAR_BIN"

// upstreamRegistrar is the path of upstream's registrar, the binary users
// run today (linux/amd64); where it is missing or cannot run the test is
// skipped, saying why, except in CI, which always has it.
func upstreamRegistrar(t *testing.T) string {
	t.Helper()
	path := os.Getenv(upstreamRegistrarEnv)
	if path == "" {
		path = filepath.Join("..", "..", "..", "shared", "interop", "upstream-csi-node-driver-registrar")
	}
	path, err := filepath.Abs(path)
	if err == nil {
		err = exec.Command(path, "--version").Run()
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("upstream's registrar %s: %v: CI must have it", path, err)
		}
		t.Skipf("upstream's registrar is not available (%v): set %s to its binary", err, upstreamRegistrarEnv)
	}
	return path
}

// exitCode runs argv in dir and returns its exit code.
func exitCode(t *testing.T, dir string, argv ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), slowTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if ctx.Err() != nil || (err != nil && !errors.As(err, &exit)) {
		t.Fatalf("%q: %v (%v); stderr:\n%s", argv, err, ctx.Err(), stderr.String())
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// Each command line here ends before a registration starts, in upstream's
// registrar as in this one, and both exit with the same code, unless a
// difference is documented (docs/flags.md) and given as ours: a difference
// found later fails here. Every argument is upstream's, so that upstream
// runs each as a user's manifest would.
func TestExitCodesSameAsUpstreamBinary(t *testing.T) {
	upstream := upstreamRegistrar(t)
	const probe = "--mode=kubelet-registration-probe"
	cases := []struct {
		args     []string
		upstream int
		// ours, when it differs on purpose, and why.
		ours   int
		reason string
		// says is what our stderr must say.
		says string
	}{
		{args: []string{"--version"}},
		{args: []string{"--version", "--logging-format=xml"}, upstream: 1},
		{args: []string{"--version", "--log-flush-frequency=0s"}, upstream: 1},
		{args: []string{"--version", "--logging-format=json", "--vmodule=a=1"}, upstream: 1},
		{args: []string{"--version", "--logging-format=JSON"}, upstream: 1},
		{args: []string{"--version", "--log-flush-frequency=-1s"}, upstream: 1},
		{args: []string{"--version", "-v=high"}, upstream: 2},
		{args: []string{"--version", "--vmodule=a"}, upstream: 2},
		{args: []string{"--version", "--timeout=abc"}, upstream: 2},
		{args: []string{"--version", "--no-such-flag"}, upstream: 2},
		{args: []string{"--version=maybe"}, upstream: 2},
		{args: []string{"-version"}},
		// Parsing stops at the first argument that is not a flag.
		{args: []string{"--version", "x", "--no-such-flag"}},
		{args: []string{"--version", probe}},
		{args: []string{probe}, upstream: 1, says: "needs --kubelet-registration-path"},
		{args: []string{probe, "--kubelet-registration-path="}, upstream: 1, says: "needs --kubelet-registration-path"},
		{args: []string{probe, "--kubelet-registration-path=/k/csi.sock"}},
		{args: []string{probe, "--kubelet-registration-path=/k/csi.sock", "--logging-format=xml"}, upstream: 1},
		{args: []string{probe, "--kubelet-registration-path=/k/csi.sock", "--log-flush-frequency=0s"}, upstream: 1},
		// Upstream checks these after the probe mode.
		{args: []string{probe, "--kubelet-registration-path=/k/csi.sock", "--health-port=1", "--http-endpoint=:2"}},
		{args: []string{probe, "--kubelet-registration-path=/k/csi.sock", "--csi-address=tcp://localhost:1"}},
		{args: []string{"-h"}},
		{args: []string{"--help"}},
		{args: []string{"-help"}},
		{args: []string{"--no-such-flag"}, upstream: 2},
		{args: []string{"--kubelet-registration-path"}, upstream: 2},
		{args: nil, upstream: 1},
		{args: []string{"registration"}, upstream: 1},
		{args: []string{"--kubelet-registration-path=/k/csi.sock", "--health-port=1", "--http-endpoint=:2"}, upstream: 1},
		{args: []string{"--version", "--log-text-split-stream"}, upstream: 1, ours: 0, reason: "the registrar turns component-base's LoggingAlphaOptions on"},
		{args: []string{"--version", "--log-json-info-buffer-size=1Mi"}, upstream: 1, ours: 0, reason: "the registrar turns component-base's LoggingAlphaOptions on"},
		{args: []string{"--version", "--logtostderr"}, upstream: 2, ours: 0, reason: "klog's own flags of upstream v2.10 are accepted again"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			dir := t.TempDir()
			want := tc.upstream
			if tc.reason != "" {
				want = tc.ours
			}
			if got, stderr := exitCode(t, dir, append([]string{upstream}, tc.args...)...); got != tc.upstream {
				t.Errorf("upstream's registrar exits %d, the test expects %d; stderr:\n%s", got, tc.upstream, stderr)
			}
			// A registrar that stops on a value writes the reason to the
			// termination message: not to /dev/termination-log of the
			// container the test may run in.
			ours := append([]string{"--termination-message-path=" + filepath.Join(dir, "absent")}, tc.args...)
			got, stderr := exitCode(t, dir, registrarArgv(ours...)...)
			if got != want && tc.reason != "" {
				t.Errorf("exit code %d, want %d, not upstream's %d: %s; stderr:\n%s", got, want, tc.upstream, tc.reason, stderr)
			} else if got != want {
				t.Errorf("exit code %d, want upstream's, %d; stderr:\n%s", got, want, stderr)
			}
			if !strings.Contains(stderr, tc.says) {
				t.Errorf("stderr does not say %q:\n%s", tc.says, stderr)
			}
		})
	}
}

// Values that upstream v2.17 accepts and runs with: the registrar registers
// the driver, and says what it made of the value in a line of klog's warning
// severity.
func TestAcceptsWhatUpstreamAccepts(t *testing.T) {
	cases := []struct {
		name, flag, warning string
	}{
		// Upstream registers with any mode but the probe's.
		{"unknown mode", "--mode=foo", `--mode="foo" is not a mode: registering the driver`},
		// kubelet dials it from its own working directory.
		{"relative registration path", "--kubelet-registration-path=csi.sock", `--kubelet-registration-path="csi.sock" is not an absolute path`},
		// Upstream starts no server for it; with --http-endpoint (set by
		// startRegistrar) it is no conflict.
		{"negative health port", "--health-port=-1", "--health-port=-1 is not a port: ignored"},
		// Upstream accepts it, then fails GetPluginInfo at once and exits 1.
		{"zero timeout", "--timeout=0", "--timeout=0s is not positive: using the default, 1s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "accepts.csi.example.com"
			n := newNode(t)
			n.startDriver(t, name)
			registrar := n.startRegistrar(t, tc.flag)
			n.waitForSocket(t, name, registrar)
			info, err := kubeletClient(t, n.socketPath(name)).GetInfo(context.Background(), &registerapi.InfoRequest{})
			if err != nil || info.Name != name {
				t.Fatalf("GetInfo = %v, %v; want the driver %q", info, err, name)
			}
			if code, body := n.healthz(t); code != http.StatusOK {
				t.Errorf("/healthz on --http-endpoint = %d %q, want 200", code, body)
			}
			var line string
			poll.UntilWithin(t, slowTimeout, "the registrar logs the warning", func() bool {
				for l := range strings.Lines(registrar.stderr.String()) {
					if strings.Contains(l, tc.warning) {
						line = l
						return true
					}
				}
				return false
			})
			if !strings.HasPrefix(line, "W") {
				t.Errorf("the warning is not of klog's warning severity (W): %q", line)
			}
		})
	}
}

// A TCP --csi-address, which upstream dials (host:port through gRPC's
// default resolver; tcp://host:port never connects), is refused at once on
// purpose, with what to use instead: kubelet reaches the driver only through
// its Unix socket, which the registrar then shares.
func TestRefusesATCPDriverAddress(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	hostPort := listener.Addr().String()
	cases := []struct{ address, want string }{
		{hostPort, "is a network address (host:port), which is not supported"},
		{"tcp://" + hostPort, `has the scheme "tcp", which is not supported`},
	}
	for _, tc := range cases {
		t.Run(tc.address, func(t *testing.T) {
			n := newNode(t)
			registrar := n.startRegistrar(t, "--csi-address="+tc.address)
			if code := registrar.wait(t); code != 1 {
				t.Errorf("exit code = %d, want 1", code)
			}
			// klog quotes the error, escaping its quotes.
			stderr := strings.ReplaceAll(registrar.stderr.String(), `\"`, `"`)
			for _, want := range []string{tc.want, "--csi-address: ", "only through its Unix domain socket", "/csi/csi.sock"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("the error does not say %q:\n%s", want, stderr)
				}
			}
			if msg, _ := os.ReadFile(n.termination); !strings.Contains(string(msg), tc.want) {
				t.Errorf("termination message = %q, want the error", msg)
			}
			if entries, _ := os.ReadDir(n.registry); len(entries) != 0 {
				t.Errorf("files published in the registry: %v", entries)
			}
		})
	}
	// The registrar has exited: a connection it made would be waiting.
	if err := listener.(*net.TCPListener).SetDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	if conn, err := listener.Accept(); err == nil {
		conn.Close()
		t.Error("the registrar connected to the TCP address")
	}
}
