package diagnose

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/csi-registrar/node-driver-registrar/test/afunix"
)

const (
	testDriver = "mock.csi.example.com"
	// testTimeout bounds each RPC of a diagnosis in these tests: a safety
	// net for slow CI machines, never a measurement.
	testTimeout = 10 * time.Second
)

// testEndpoint is the driver's socket on the host, absolute on this system:
// on Windows kubelet's paths start with a drive (C:\var\lib\kubelet\...).
var testEndpoint = filepath.Join(filepath.VolumeName(os.TempDir()), filepath.FromSlash("/var/lib/kubelet/plugins/mock.csi.example.com/csi.sock"))

// Indexes of the checks in Run's result.
const (
	checkDir = iota
	checkDriverSocket
	checkDriverInfo
	checkNodeInfo
	checkPathLength
	checkRegSocket
	checkKubeletVerdict
	checkKubeletPath
	numChecks
)

// env is a registrar's surroundings: a registry directory, a CSI driver and
// a registration socket, all in one short temporary directory.
type env struct {
	base, regDir, driverSocket string
	cfg                        Config
	// nodeInfo answers the driver's NodeGetInfo; node ID "node-1" when
	// nil. withoutNodeService: the driver serves no Node service at all.
	nodeInfo           func(ctx context.Context) (*csi.NodeGetInfoResponse, error)
	withoutNodeService bool
}

// regSocket is where the registration socket of name goes.
func (e *env) regSocket(name string) string {
	return filepath.Join(e.regDir, name+"-reg.sock")
}

// answer is the mock driver's GetPluginInfo.
type answer func(ctx context.Context) (*csi.GetPluginInfoResponse, error)

func answerName(name string) answer {
	return func(context.Context) (*csi.GetPluginInfoResponse, error) {
		return &csi.GetPluginInfoResponse{Name: name, VendorVersion: "v1.2.3"}, nil
	}
}

// newEnv prepares the directories and the configuration, with nothing
// running yet.
func newEnv(t *testing.T) *env {
	t.Helper()
	// Short: socket paths must stay under 107 bytes.
	base, err := os.MkdirTemp("", "dg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	e := &env{
		base:         base,
		regDir:       filepath.Join(base, "reg"),
		driverSocket: filepath.Join(base, "csi", "csi.sock"),
	}
	for _, dir := range []string{e.regDir, filepath.Dir(e.driverSocket)} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.cfg = Config{
		CSIAddress:              "unix://" + e.driverSocket,
		KubeletRegistrationPath: testEndpoint,
		RegistrationDir:         e.regDir,
		Timeout:                 testTimeout,
	}
	return e
}

// healthyEnv is a driver and a registration socket as the registrar
// publishes them.
func healthyEnv(t *testing.T) *env {
	e := newEnv(t)
	e.startDriver(t, answerName(testDriver))
	e.publish(t, testDriver, healthyInfo())
	return e
}

// nodeInfoEnv is a setUp of healthyEnv's surroundings whose driver answers
// NodeGetInfo with answer.
func nodeInfoEnv(answer func(ctx context.Context) (*csi.NodeGetInfoResponse, error)) func(t *testing.T) *env {
	return func(t *testing.T) *env {
		e := newEnv(t)
		e.nodeInfo = answer
		e.startDriver(t, answerName(testDriver))
		e.publish(t, testDriver, healthyInfo())
		return e
	}
}

func healthyInfo() *registerapi.PluginInfo {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              testDriver,
		Endpoint:          testEndpoint,
		SupportedVersions: []string{"1.0.0"},
	}
}

// identityServer answers GetPluginInfo with reply.
type identityServer struct {
	csi.UnimplementedIdentityServer
	reply answer
}

func (s identityServer) GetPluginInfo(ctx context.Context, _ *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return s.reply(ctx)
}

// nodeServer answers NodeGetInfo with nodeInfo, node ID "node-1" when nil.
type nodeServer struct {
	csi.UnimplementedNodeServer
	nodeInfo func(ctx context.Context) (*csi.NodeGetInfoResponse, error)
}

func (s nodeServer) NodeGetInfo(ctx context.Context, _ *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	if s.nodeInfo == nil {
		return &csi.NodeGetInfoResponse{NodeId: "node-1"}, nil
	}
	return s.nodeInfo(ctx)
}

// startDriver serves a CSI Identity service, and unless withoutNodeService
// a Node service, at the driver socket, on a gRPC server of its own.
func (e *env) startDriver(t *testing.T, reply answer) {
	t.Helper()
	afunix.Require(t)
	l, err := net.Listen("unix", e.driverSocket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, identityServer{reply: reply})
	if !e.withoutNodeService {
		csi.RegisterNodeServer(srv, nodeServer{nodeInfo: e.nodeInfo})
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(l) // nil or ErrServerStopped once Stop is called
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
}

// registrar is kubelet's registration API answering with a fixed
// PluginInfo.
type registrar struct {
	registerapi.UnimplementedRegistrationServer
	info *registerapi.PluginInfo
}

func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return r.info, nil
}

// serveRegistration serves info on a new socket at path.
func serveRegistration(t *testing.T, path string, info *registerapi.PluginInfo) {
	t.Helper()
	afunix.Require(t)
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	registerapi.RegisterRegistrationServer(s, &registrar{info: info})
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
}

// publish serves info as the registrar publishes its socket: bound under a
// hidden name, which stays as a second name of <name>-reg.sock.
func (e *env) publish(t *testing.T, name string, info *registerapi.PluginInfo) {
	t.Helper()
	hidden := filepath.Join(e.regDir, "."+name+".a1b2c3")
	serveRegistration(t, hidden, info)
	if err := os.Link(hidden, e.regSocket(name)); err != nil {
		t.Fatal(err)
	}
}

// leaveStaleSocket binds a socket at path and closes it without unlinking,
// as a process that was killed leaves it.
func leaveStaleSocket(t *testing.T, path string) {
	t.Helper()
	afunix.Require(t)
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestRun(t *testing.T) {
	tests := []struct {
		name string
		// setUp builds the surroundings; healthyEnv when nil.
		setUp func(t *testing.T) *env
		// want holds the verdicts that are not OK.
		want map[int]Outcome
		// details holds text each check's Detail must contain.
		details map[int][]string
	}{
		{
			name: "healthy",
			details: map[int][]string{
				checkDir:          {"present, writable"},
				checkDriverSocket: {"present, a socket"},
				checkDriverInfo:   {`"` + testDriver + `"`, `"v1.2.3"`},
				checkNodeInfo:     {`node ID "node-1"`},
				checkPathLength:   {testDriver + "-reg.sock"},
				checkRegSocket:    {"CSIPlugin", testDriver, testEndpoint, "1.0.0"},
				checkKubeletPath:  {"same file name"},
			},
		},
		{
			name: "registry directory missing",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.startDriver(t, answerName(testDriver))
				if err := os.Remove(e.regDir); err != nil {
					t.Fatal(err)
				}
				return e
			},
			want: map[int]Outcome{checkDir: Fail, checkRegSocket: Skip},
			details: map[int][]string{
				checkDir:       {"does not exist", "plugins_registry"},
				checkRegSocket: {"skipped"},
			},
		},
		{
			name: "registry directory is a file",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.startDriver(t, answerName(testDriver))
				e.cfg.RegistrationDir = filepath.Join(e.base, "file")
				if err := os.WriteFile(e.cfg.RegistrationDir, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return e
			},
			want:    map[int]Outcome{checkDir: Fail, checkRegSocket: Skip},
			details: map[int][]string{checkDir: {"regular file, not a directory"}},
		},
		{
			name: "driver socket missing",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.publish(t, testDriver, healthyInfo())
				return e
			},
			want: map[int]Outcome{checkDriverSocket: Fail, checkDriverInfo: Skip, checkNodeInfo: Skip, checkPathLength: Skip, checkRegSocket: Skip},
			details: map[int][]string{
				checkDriverSocket: {"does not exist", "mount"},
				checkDriverInfo:   {"skipped"},
			},
		},
		{
			name: "driver address does not parse",
			setUp: func(t *testing.T) *env {
				e := healthyEnv(t)
				e.cfg.CSIAddress = "tcp://127.0.0.1:10000"
				return e
			},
			want: map[int]Outcome{checkDriverSocket: Fail, checkDriverInfo: Skip, checkNodeInfo: Skip, checkPathLength: Skip, checkRegSocket: Skip},
			details: map[int][]string{
				checkDriverSocket: {`has the scheme "tcp", which is not supported`},
				checkKubeletPath:  {"does not parse"},
			},
		},
		{
			name: "driver socket is not a socket",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				if err := os.WriteFile(e.driverSocket, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return e
			},
			want:    map[int]Outcome{checkDriverSocket: Fail, checkDriverInfo: Skip, checkNodeInfo: Skip, checkPathLength: Skip, checkRegSocket: Skip},
			details: map[int][]string{checkDriverSocket: {"regular file, not a socket"}},
		},
		{
			name: "driver socket stale",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				leaveStaleSocket(t, e.driverSocket)
				return e
			},
			want:    map[int]Outcome{checkDriverInfo: Fail, checkNodeInfo: Skip, checkPathLength: Skip, checkRegSocket: Skip},
			details: map[int][]string{checkDriverInfo: {"cannot connect", "refused", "nothing listens"}},
		},
		{
			name: "driver answers an invalid name",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.startDriver(t, answerName("csi/example"))
				return e
			},
			want: map[int]Outcome{checkDriverInfo: Fail, checkNodeInfo: Skip, checkPathLength: Skip, checkRegSocket: Skip},
			details: map[int][]string{
				checkDriverInfo: {`"csi/example"`, `contains '/'`, `"v1.2.3"`},
				checkPathLength: {"skipped", "name"},
			},
		},
		{
			name: "driver answers an error",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.startDriver(t, func(context.Context) (*csi.GetPluginInfoResponse, error) {
					return nil, status.Error(codes.Internal, "disk on fire")
				})
				return e
			},
			want:    map[int]Outcome{checkDriverInfo: Fail, checkNodeInfo: Skip, checkPathLength: Skip, checkRegSocket: Skip},
			details: map[int][]string{checkDriverInfo: {"Internal", "disk on fire"}},
		},
		{
			name: "driver does not answer in time",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.startDriver(t, func(ctx context.Context) (*csi.GetPluginInfoResponse, error) {
					<-ctx.Done()
					return nil, ctx.Err()
				})
				e.cfg.Timeout = 50 * time.Millisecond
				return e
			},
			want:    map[int]Outcome{checkDriverInfo: Fail, checkNodeInfo: Skip, checkPathLength: Skip, checkRegSocket: Skip},
			details: map[int][]string{checkDriverInfo: {"no answer within 50ms"}},
		},
		{
			name: "driver answers NodeGetInfo with limits and topology",
			setUp: nodeInfoEnv(func(context.Context) (*csi.NodeGetInfoResponse, error) {
				return &csi.NodeGetInfoResponse{NodeId: "i-0abc", MaxVolumesPerNode: 25, AccessibleTopology: &csi.Topology{
					Segments: map[string]string{"topology.kubernetes.io/zone": "z1", "example.com/rack": "r7"}}}, nil
			}),
			details: map[int][]string{checkNodeInfo: {`node ID "i-0abc", at most 25 volumes, topology example.com/rack=r7,topology.kubernetes.io/zone=z1`}},
		},
		{
			// The driver reads the deadline that gRPC sent with the call,
			// and answers it as its node ID.
			name: "NodeGetInfo has kubelet's timeout",
			setUp: nodeInfoEnv(func(ctx context.Context) (*csi.NodeGetInfoResponse, error) {
				deadline, ok := ctx.Deadline()
				if !ok {
					return &csi.NodeGetInfoResponse{NodeId: "no deadline"}, nil
				}
				return &csi.NodeGetInfoResponse{NodeId: time.Until(deadline).Round(time.Minute).String()}, nil
			}),
			details: map[int][]string{checkNodeInfo: {`node ID "2m0s"`}},
		},
		{
			name: "driver fails NodeGetInfo",
			setUp: nodeInfoEnv(func(context.Context) (*csi.NodeGetInfoResponse, error) {
				return nil, status.Error(codes.Unavailable, "metadata server unreachable")
			}),
			want:    map[int]Outcome{checkNodeInfo: Fail},
			details: map[int][]string{checkNodeInfo: {"Unavailable: metadata server unreachable", "likely cause of a registration that kubelet never completes", "driver's log"}},
		},
		{
			name: "driver answers an empty node ID",
			setUp: nodeInfoEnv(func(context.Context) (*csi.NodeGetInfoResponse, error) {
				return &csi.NodeGetInfoResponse{MaxVolumesPerNode: 8}, nil
			}),
			want:    map[int]Outcome{checkNodeInfo: Fail},
			details: map[int][]string{checkNodeInfo: {"empty node_id", "kubelet refuses", "driverNodeID must not be empty"}},
		},
		{
			name: "driver serves no Node service",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.withoutNodeService = true
				e.startDriver(t, answerName(testDriver))
				e.publish(t, testDriver, healthyInfo())
				return e
			},
			want:    map[int]Outcome{checkNodeInfo: Fail},
			details: map[int][]string{checkNodeInfo: {"Unimplemented", "does not serve the CSI Node service", "node plugin"}},
		},
		{
			name: "registration socket path too long",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				name := strings.Repeat("x", 63)
				e.startDriver(t, answerName(name))
				e.cfg.RegistrationDir = filepath.Join(e.base, strings.Repeat("r", 40))
				if err := os.Mkdir(e.cfg.RegistrationDir, 0o755); err != nil {
					t.Fatal(err)
				}
				return e
			},
			want:    map[int]Outcome{checkPathLength: Fail, checkRegSocket: Fail},
			details: map[int][]string{checkPathLength: {"more than the 107"}},
		},
		{
			name: "registration socket missing",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.startDriver(t, answerName(testDriver))
				return e
			},
			want:    map[int]Outcome{checkRegSocket: Fail},
			details: map[int][]string{checkRegSocket: {"missing", "not registered", "registrar running"}},
		},
		{
			name: "registration socket stale",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.startDriver(t, answerName(testDriver))
				leaveStaleSocket(t, e.regSocket(testDriver))
				return e
			},
			want:    map[int]Outcome{checkRegSocket: Fail},
			details: map[int][]string{checkRegSocket: {"refused", "stale socket"}},
		},
		{
			name: "registration socket is a file",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.startDriver(t, answerName(testDriver))
				if err := os.WriteFile(e.regSocket(testDriver), nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return e
			},
			want:    map[int]Outcome{checkRegSocket: Fail},
			details: map[int][]string{checkRegSocket: {"regular file, not a socket"}},
		},
		{
			name: "registration socket answers another name",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.startDriver(t, answerName(testDriver))
				info := healthyInfo()
				info.Name = "other.csi.example.com"
				serveRegistration(t, e.regSocket(testDriver), info)
				return e
			},
			want:    map[int]Outcome{checkRegSocket: Fail},
			details: map[int][]string{checkRegSocket: {`for driver "other.csi.example.com", not "` + testDriver + `"`}},
		},
		{
			name: "registration socket answers a wrong type and version",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.startDriver(t, answerName(testDriver))
				info := healthyInfo()
				info.Type = registerapi.DRAPlugin
				info.SupportedVersions = []string{"0.3.0"}
				serveRegistration(t, e.regSocket(testDriver), info)
				return e
			},
			want:    map[int]Outcome{checkRegSocket: Fail},
			details: map[int][]string{checkRegSocket: {`type "DRAPlugin"`, "refuses the versions", "must be v1.x"}},
		},
		{
			// kubelet skips versions it cannot parse and those above 1.x.
			name: "registration socket answers a 1.x version among others",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.startDriver(t, answerName(testDriver))
				info := healthyInfo()
				info.SupportedVersions = []string{"one", "1.0.0", "2.0.0"}
				e.publish(t, testDriver, info)
				return e
			},
		},
		{
			name: "endpoint mismatch",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.startDriver(t, answerName(testDriver))
				info := healthyInfo()
				info.Endpoint = "/var/lib/kubelet/plugins/old/csi.sock"
				e.publish(t, testDriver, info)
				return e
			},
			want:    map[int]Outcome{checkRegSocket: Warn},
			details: map[int][]string{checkRegSocket: {"/var/lib/kubelet/plugins/old/csi.sock", testEndpoint, "another instance"}},
		},
		{
			name: "base name mismatch",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.startDriver(t, answerName(testDriver))
				info := healthyInfo()
				info.Endpoint = "/var/lib/kubelet/plugins/mock/driver.sock"
				e.publish(t, testDriver, info)
				e.cfg.KubeletRegistrationPath = info.Endpoint
				return e
			},
			want:    map[int]Outcome{checkKubeletPath: Warn},
			details: map[int][]string{checkKubeletPath: {`"driver.sock"`, `"csi.sock"`, "differs"}},
		},
		{
			name: "kubelet registration path empty",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.startDriver(t, answerName(testDriver))
				info := healthyInfo()
				info.Endpoint = ""
				e.publish(t, testDriver, info)
				e.cfg.KubeletRegistrationPath = ""
				return e
			},
			want:    map[int]Outcome{checkKubeletPath: Fail},
			details: map[int][]string{checkKubeletPath: {"required"}},
		},
		{
			name: "kubelet registration path relative",
			setUp: func(t *testing.T) *env {
				e := newEnv(t)
				e.startDriver(t, answerName(testDriver))
				info := healthyInfo()
				info.Endpoint = "csi.sock"
				e.publish(t, testDriver, info)
				e.cfg.KubeletRegistrationPath = info.Endpoint
				return e
			},
			want:    map[int]Outcome{checkKubeletPath: Warn},
			details: map[int][]string{checkKubeletPath: {"not an absolute path", "same file name"}},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			setUp := test.setUp
			if setUp == nil {
				setUp = healthyEnv
			}
			e := setUp(t)
			before := listDir(t, e.cfg.RegistrationDir)
			checkRun(t, e, before, Run(context.Background(), e.cfg), test.want, test.details)
		})
	}
}

// checkRun checks the outcomes of Run in e (OK when not listed), the
// details against the strings they must contain, and that the registry
// directory is as it was before.
func checkRun(t *testing.T, e *env, before []string, checks []Check, outcomes map[int]Outcome, details map[int][]string) {
	t.Helper()
	var out strings.Builder
	passed := printAll(&out, checks)
	t.Logf("%+v\n%s", e.cfg, out.String())
	if len(checks) != numChecks {
		t.Fatalf("Run returned %d checks, want %d", len(checks), numChecks)
	}
	wantPass := true
	for i, c := range checks {
		want, listed := outcomes[i]
		if !listed && i == checkKubeletVerdict {
			// The stand-in registrar does not report its state.
			want = Skip
		}
		if want == Fail {
			wantPass = false
		}
		if c.Outcome != want {
			t.Errorf("check %d (%s) = %v: %s; want %v", i+1, c.Name, c.Outcome, c.Detail, want)
		}
		if c.Outcome == Skip && !strings.HasPrefix(c.Detail, "skipped: ") {
			t.Errorf("check %d (%s) is skipped, but its detail %q does not say so", i+1, c.Name, c.Detail)
		}
		for _, s := range details[i] {
			if !strings.Contains(c.Detail, s) {
				t.Errorf("check %d (%s) detail %q does not contain %q", i+1, c.Name, c.Detail, s)
			}
		}
	}
	if passed != wantPass {
		t.Errorf("Print returned %v, want %v", passed, wantPass)
	}
	if after := listDir(t, e.cfg.RegistrationDir); !slices.Equal(before, after) {
		t.Errorf("the registry directory changed: %v, then %v", before, after)
	}
}

func TestRunChecksWritability(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes to a read-only directory anyway")
	}
	e := healthyEnv(t)
	if err := os.Chmod(e.regDir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(e.regDir, 0o755) })
	c := Run(context.Background(), e.cfg)[checkDir]
	if c.Outcome != Fail || !strings.Contains(c.Detail, "not writable (permission denied)") {
		t.Errorf("check of a read-only directory = %v: %s", c.Outcome, c.Detail)
	}
}

// printAll writes the checklist as Run does with an Output, then the summary.
func printAll(w io.Writer, checks []Check) bool {
	for _, c := range checks {
		printCheck(w, c)
	}
	return PrintSummary(w, checks)
}

func TestPrint(t *testing.T) {
	tests := []struct {
		name    string
		checks  []Check
		want    string
		wantRet bool
	}{
		{
			name: "all OK",
			checks: []Check{
				{Name: "registry directory /registration", Outcome: OK, Detail: "present, writable"},
				{Name: "driver socket /csi/csi.sock", Outcome: OK, Detail: "present, a socket"},
			},
			want: "[ OK ] registry directory /registration: present, writable\n" +
				"[ OK ] driver socket /csi/csi.sock: present, a socket\n" +
				"OK: all 2 checks passed\n",
			wantRet: true,
		},
		{
			name: "warnings only",
			checks: []Check{
				{Name: "a", Outcome: OK, Detail: "fine"},
				{Name: "b", Outcome: Warn, Detail: "odd"},
			},
			want:    "[ OK ] a: fine\n[WARN] b: odd\nOK with 1 warning: the driver can be registered; read the [WARN] lines\n",
			wantRet: true,
		},
		{
			name: "failures",
			checks: []Check{
				{Name: "a", Outcome: Fail, Detail: "broken"},
				{Name: "b", Outcome: Warn, Detail: "odd"},
				{Name: "c", Outcome: Skip, Detail: "skipped: needs a"},
				{Name: "d", Outcome: Skip, Detail: "skipped: needs a"},
			},
			want: "[FAIL] a: broken\n[WARN] b: odd\n[ -- ] c: skipped: needs a\n[ -- ] d: skipped: needs a\n" +
				"NOT OK: 1 check failed, 1 warning, 2 checks skipped; fix the first [FAIL] line first, the others often follow from it\n",
			wantRet: false,
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			var out strings.Builder
			if got := printAll(&out, test.checks); got != test.wantRet {
				t.Errorf("Print returned %v, want %v", got, test.wantRet)
			}
			if out.String() != test.want {
				t.Errorf("Print wrote\n%s\nwant\n%s", out.String(), test.want)
			}
		})
	}
}
