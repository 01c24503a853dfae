package integration

import (
	"context"
	"net"
	"net/http"
	"os"
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
