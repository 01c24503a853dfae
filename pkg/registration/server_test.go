package registration

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
	"github.com/csi-registrar/node-driver-registrar/test/afunix"
	"github.com/csi-registrar/node-driver-registrar/test/poll"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	testingclock "k8s.io/utils/clock/testing"
)

const testDriver = "test.csi.example.com"

// shortTempDir keeps socket paths well under the Unix limit.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "reg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

type running struct {
	srv    *Server
	cancel context.CancelFunc
	// done is closed when Run has returned, with runErr: any number of
	// readers see it, so that a test that fails on an early return does
	// not leave its cleanup waiting for a value it took.
	done   chan struct{}
	runErr error
}

const testEndpoint = "/var/lib/kubelet/plugins/test/csi.sock"

// start runs a Server for dir in the background, names the driver and
// waits until the socket is published.
func start(t *testing.T, dir string, configure ...func(*Config)) *running {
	t.Helper()
	r := startWaiting(t, dir, configure...)
	r.srv.DriverFound(testDriver)
	r.waitServing(t)
	return r
}

// startWaiting runs a Server that has not been told the driver's name.
func startWaiting(t *testing.T, dir string, configure ...func(*Config)) *running {
	t.Helper()
	return runServer(t, newServer(t, dir, configure...))
}

// newServer is a Server for dir, not running yet.
func newServer(t *testing.T, dir string, configure ...func(*Config)) *Server {
	t.Helper()
	cfg := Config{Endpoint: testEndpoint, Dir: dir}
	for _, c := range configure {
		c(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// runServer runs srv in the background until the test ends.
func runServer(t *testing.T, srv *Server) *running {
	t.Helper()
	return runServerIn(t, context.Background(), srv)
}

// runServerIn runs srv in the background, with parent's values (a logger),
// until the test ends.
func runServerIn(t *testing.T, parent context.Context, srv *Server) *running {
	t.Helper()
	afunix.Require(t)
	ctx, cancel := context.WithCancel(parent)
	r := &running{srv: srv, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.runErr = srv.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// ready is the registration's readiness and its reason.
func (r *running) ready() (bool, string) {
	st := r.srv.Status()
	return st.Ready, st.Reason
}

func (r *running) waitServing(t *testing.T) {
	t.Helper()
	poll.Until(t, "the server serves", func() bool {
		select {
		case <-r.done:
			t.Fatalf("Run returned early: %v", r.runErr)
		default:
		}
		return servesOwn(r.srv)
	})
}

// health is what srv's liveness check says: what the path holds when it
// is healthy, "unhealthy: " and why otherwise.
func health(srv *Server) string {
	reason, err := srv.Health()
	if err != nil {
		return "unhealthy: " + err.Error()
	}
	return reason
}

// servesOwn tells whether srv's liveness check finds its own socket.
func servesOwn(srv *Server) bool { return strings.HasPrefix(health(srv), "serving ") }

// stepWhenArmed moves fake on by d once the loop has armed its timer: the
// loop reads the clock, then creates a timer for the deadline after that
// reading, so a step in between would leave the timer d past the deadline.
// The loop runs one timer at a time, and none while it has no deadline.
func stepWhenArmed(t *testing.T, fake *testingclock.FakeClock, d time.Duration) {
	t.Helper()
	poll.Until(t, "the registration's timer is armed", fake.HasWaiters)
	fake.Step(d)
}

func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		return r.runErr
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
		return nil
	}
}

func client(t *testing.T, path string) registerapi.RegistrationClient {
	t.Helper()
	conn, err := grpc.NewClient("unix:"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return registerapi.NewRegistrationClient(conn)
}

func TestServesKubeletRegistrationAPI(t *testing.T) {
	dir := shortTempDir(t)
	r := start(t, dir)
	path := filepath.Join(dir, testDriver+"-reg.sock")
	if got := r.srv.Status().SocketPath; got != path {
		t.Fatalf("Status().SocketPath = %q, want %q", got, path)
	}

	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a socket with 0600", fi.Mode())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 || !strings.HasPrefix(entries[0].Name(), "."+testDriver+".") || entries[1].Name() != testDriver+"-reg.sock" {
		t.Errorf("registry directory holds %v, want the socket and its hidden name", entries)
	}

	c := client(t, path)
	ctx := context.Background()
	info, err := c.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != testDriver || info.Endpoint != "/var/lib/kubelet/plugins/test/csi.sock" ||
		len(info.SupportedVersions) != 1 || info.SupportedVersions[0] != "1.0.0" {
		t.Errorf("GetInfo = %+v", info)
	}
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus(true): %v", err)
	}
	// kubelet calls both again after each restart.
	if _, err := c.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("second GetInfo: %v", err)
	}
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("second NotifyRegistrationStatus(true): %v", err)
	}

	if err := r.stop(t); err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("registry directory holds %v after shutdown, want nothing", entries)
	}
	if h := health(r.srv); !strings.Contains(h, "stopped") {
		t.Errorf("Health after shutdown = %v, want stopped", h)
	}
	if st := r.srv.Status(); st.State != Stopped || st.Ready {
		t.Errorf("Status after shutdown = %+v", st)
	}
}

// leaveSocket binds a socket at path and closes it without unlinking, as a
// crashed process would; with live set it keeps listening.
func leaveSocket(t *testing.T, path string, live bool) net.Listener {
	t.Helper()
	afunix.Require(t)
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	if !live {
		l.Close()
		return nil
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestReplacesSocketAtStart(t *testing.T) {
	for _, live := range []bool{false, true} {
		t.Run(map[bool]string{false: "stale", true: "live"}[live], func(t *testing.T) {
			dir := shortTempDir(t)
			path := SocketPath(dir, testDriver)
			leaveSocket(t, path, live)
			old, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			start(t, dir)
			now, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if os.SameFile(old, now) {
				t.Fatal("the old socket was not replaced")
			}
			if _, err := client(t, path).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
				t.Fatalf("GetInfo on the new socket: %v", err)
			}
		})
	}
}

func TestLeavesNonSocketsUntouched(t *testing.T) {
	cases := []struct {
		name    string
		make    func(t *testing.T, path string)
		wantErr string
	}{
		{"regular file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("keep me"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "is a regular file, not a socket"},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}, "is a directory, not a socket"},
		{"symlink to a socket", func(t *testing.T, path string) {
			target := filepath.Join(filepath.Dir(path), "target.sock")
			leaveSocket(t, target, false)
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, "is a symbolic link, not a socket"},
		{"named pipe", func(t *testing.T, path string) {
			if err := mkfifo(path); err != nil {
				t.Skip("mkfifo:", err)
			}
		}, "is a named pipe, not a socket"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortTempDir(t)
			path := SocketPath(dir, testDriver)
			tc.make(t, path)
			before, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			srv, err := New(Config{Endpoint: "/csi.sock", Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			srv.DriverFound(testDriver)
			err = srv.Run(context.Background())
			// The error quotes the path: on Windows, its backslashes doubled.
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), strconv.Quote(path)) {
				t.Fatalf("Run() = %v, want an error naming %s and containing %q", err, path, tc.wantErr)
			}
			after, err := os.Lstat(path)
			if err != nil {
				t.Fatalf("the file at the path is gone: %v", err)
			}
			if !os.SameFile(before, after) || before.Mode() != after.Mode() || before.Size() != after.Size() {
				t.Errorf("the file at the path changed: %v -> %v", before.Mode(), after.Mode())
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), ".") {
					t.Errorf("temporary file %s left behind", e.Name())
				}
			}
		})
	}
}

func TestNewRejectsUnusableDirectory(t *testing.T) {
	dir := shortTempDir(t)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	long := filepath.Join(dir, strings.Repeat("d", 100))
	if err := os.Mkdir(long, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, dir, wantErr string
	}{
		{"missing", filepath.Join(dir, "nope"), "does not exist"},
		{"not a directory", file, "is not a directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Config{Endpoint: "/csi.sock", Dir: tc.dir})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
	var cfgErr *ConfigError
	if _, err := New(Config{Dir: dir}); !errors.As(err, &cfgErr) || cfgErr.Field != "Endpoint" || !strings.Contains(err.Error(), "endpoint is required") {
		t.Errorf("New() without an endpoint = %v, want an error about the Endpoint", err)
	}
	if _, err := New(Config{Endpoint: "/csi.sock", Dir: dir, OnRejection: "ignore"}); err == nil || !strings.Contains(err.Error(), `"ignore"`) {
		t.Errorf("New() with an unknown policy = %v, want an error quoting it", err)
	}

	// The path's length is known once the driver is.
	srv, err := New(Config{Endpoint: "/csi.sock", Dir: long})
	if err != nil {
		t.Fatal(err)
	}
	srv.DriverFound(testDriver)
	if err := srv.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "more than the 107 a Unix socket allows") {
		t.Errorf("Run() with a long path = %v, want an error about the length", err)
	}
}

func TestNewerInstanceKeepsTheRegistration(t *testing.T) {
	dir := shortTempDir(t)
	older := start(t, dir)
	newer := start(t, dir)
	path := newer.srv.SocketPathForTest()
	published, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	poll.Until(t, "the older instance steps aside", func() bool { return older.srv.Status().State == Superseded })
	if h := health(older.srv); !strings.Contains(h, "another instance") {
		t.Errorf("older instance Health = %+v, want superseded", h)
	}
	if err := older.stop(t); err != nil {
		t.Fatalf("older Run = %v", err)
	}
	now, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("the newer instance's socket was removed: %v", err)
	}
	if !os.SameFile(published, now) {
		t.Fatal("the socket at the path changed when the older instance stopped")
	}
	if h := health(newer.srv); !strings.HasPrefix(h, "serving ") {
		t.Errorf("newer instance Health = %+v, want serving", h)
	}
	if _, err := client(t, path).GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo on the newer socket: %v", err)
	}
}

func TestRejectionEndsRunAfterReplyingWithTheExitPolicy(t *testing.T) {
	dir := shortTempDir(t)
	srv := newServer(t, dir, func(c *Config) { c.OnRejection = Exit })
	var reasons []string // written on Run's goroutine, read once it returned
	srv.Observe(func(_ Status, happened []Transition) {
		for _, t := range happened {
			if r, ok := t.(KubeletRejected); ok && r.First {
				reasons = append(reasons, r.Reason)
			}
		}
	})
	r := runServer(t, srv)
	srv.DriverFound(testDriver)
	r.waitServing(t)
	path := r.srv.SocketPathForTest()
	const reason = "RegisterPlugin error -- plugin registration failed with err: boom"
	_, err := client(t, path).NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: false, Error: reason})
	if err != nil {
		t.Fatalf("NotifyRegistrationStatus(false) got no reply: %v", err)
	}
	var runErr error
	select {
	case <-r.done:
		runErr = r.runErr
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the rejection")
	}
	var rejected *RejectedError
	if !errors.As(runErr, &rejected) || rejected.Reason != reason {
		t.Fatalf("Run() = %v, want a RejectedError with kubelet's reason", runErr)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket still at %s after the rejection (err %v)", path, err)
	}
	if len(reasons) != 1 || reasons[0] != reason {
		t.Errorf("observers saw rejections %q, want kubelet's reason once", reasons)
	}
}

// countingRegistration is another process's registration server.
type countingRegistration struct {
	registerapi.UnimplementedRegistrationServer
	info  *registerapi.PluginInfo
	calls atomic.Int32
	// stop ends the server as the death of its process would: the socket
	// file stays.
	stop func()
}

func (c *countingRegistration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	c.calls.Add(1)
	return c.info, nil
}

// serveForeign publishes a registration socket at path as another
// process would, replacing what is there.
func serveForeign(t *testing.T, path, name string) *countingRegistration {
	t.Helper()
	return serveForeignInfo(t, path, &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: name})
}

// serveForeignInfo is serveForeign answering GetInfo with info.
func serveForeignInfo(t *testing.T, path string, info *registerapi.PluginInfo) *countingRegistration {
	t.Helper()
	afunix.Require(t)
	tmp := path + ".new"
	l, err := net.Listen("unix", tmp)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	c := &countingRegistration{info: info, stop: s.Stop}
	registerapi.RegisterRegistrationServer(s, c)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return c
}

func TestHealth(t *testing.T) {
	cases := []struct {
		name      string
		change    func(t *testing.T, path string)
		healthy   bool
		wantInMsg string
	}{
		{"ours", func(*testing.T, string) {}, true, "serving"},
		{"regular file", func(t *testing.T, path string) {
			// Replaced in one step: a deleted socket would be published again.
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}, false, "is a regular file"},
		{"newer instance", func(t *testing.T, path string) { serveForeign(t, path, testDriver) }, true, "another instance"},
		{"other driver", func(t *testing.T, path string) { serveForeign(t, path, "other.example.com") }, false, `"other.example.com"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := start(t, shortTempDir(t))
			tc.change(t, r.srv.SocketPathForTest())
			poll.Until(t, "the check sees the change", func() bool {
				h := health(r.srv)
				return strings.HasPrefix(h, "unhealthy: ") != tc.healthy && strings.Contains(h, tc.wantInMsg)
			})
			if _, err := r.srv.Health(); errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Health() = %v: want it not to say that nothing is at the path", err)
			}
		})
	}
}

func TestHealthOfAMissingSocket(t *testing.T) {
	// Not running, so nothing publishes the socket again.
	dir := shortTempDir(t)
	srv, err := New(Config{Endpoint: testEndpoint, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if reason, err := srv.Health(); err != nil || reason != "waiting for the CSI driver" {
		t.Errorf("Health() before the driver is known = %q, %v, want waiting for the driver", reason, err)
	}
	m := newMachine(srv.cfg, t0)
	m.name, m.path, m.state = testDriver, SocketPath(dir, testDriver), Registered
	srv.shared.Store(&snapshot{m: m})
	if _, err := srv.Health(); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Health() = %v, want nothing at the path", err)
	}
}

func TestHealthDoesNotAskTheOwnerFollowed(t *testing.T) {
	r := start(t, shortTempDir(t))
	path := r.srv.SocketPathForTest()
	for i, foreign := range []*countingRegistration{nil, nil} {
		foreign = serveForeign(t, path, testDriver)
		// The server itself asks once when it sees the new file, and then
		// follows its owner.
		poll.Until(t, "the server identifies the new socket and follows its owner", func() bool {
			return foreign.calls.Load() >= 1 && r.srv.followsForTest()
		})
		before := foreign.calls.Load()
		for j := 0; j < 5; j++ {
			if h := health(r.srv); !strings.Contains(h, "another instance") {
				t.Fatalf("file %d: Health() = %+v, want superseded", i, h)
			}
		}
		if n := foreign.calls.Load() - before; n > 0 {
			t.Errorf("file %d: 5 checks called GetInfo %d times, want none: the loop follows its owner", i, n)
		}
	}
}

// SocketPathForTest is the current socket path.
func (s *Server) SocketPathForTest() string { return s.Status().SocketPath }

// timersForTest names the registration's running timers.
func (s *Server) timersForTest() string {
	var names []string
	for t, due := range s.shared.Load().m.due {
		if !due.IsZero() {
			names = append(names, [...]string{"silence", "retry", "vacancy", "publish"}[t])
		}
	}
	return strings.Join(names, ",")
}

// followsForTest tells whether the registration follows the owner of the
// socket at its path.
func (s *Server) followsForTest() bool {
	m := s.shared.Load().m
	id, _, err := sockfile.Lstat(m.path)
	return err == nil && m.owner != sockfile.ID{} && id == m.owner
}

// Only kubelet's calls count as kubelet's: another instance checking the
// socket at the path (askInfo) and --diagnose set UserAgent.
func TestCountsOnlyKubeletsGetInfo(t *testing.T) {
	r := start(t, shortTempDir(t))
	path := r.srv.SocketPathForTest()
	ctx := context.Background()
	for range 2 {
		if _, err := askInfo(ctx, path, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client(t, path).GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		t.Fatal(err)
	}
	// A call reaches the loop before its reply goes out: once kubelet's
	// call is counted, the registrar's own two would have been too.
	poll.Until(t, "kubelet's GetInfo is counted", func() bool { return r.srv.Status().KubeletCalls.GetInfo >= 1 })
	if n := r.srv.Status().KubeletCalls.GetInfo; n != 1 {
		t.Errorf("GetInfo calls counted after two of the registrar's own and one of kubelet's = %d, want 1", n)
	}
}

func TestValidateNamesEachWrongField(t *testing.T) {
	err := Config{OnRejection: "ignore"}.Validate()
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var cfgErr *ConfigError
		if errors.As(e, &cfgErr) {
			fields = append(fields, cfgErr.Field)
		}
	}
	if strings.Join(fields, ",") != "Endpoint,OnRejection" || !strings.Contains(err.Error(), `rejection policy "ignore" is not supported`) {
		t.Errorf("Validate() = %v (fields %v), want both fields named", err, fields)
	}
	if err := (Config{Endpoint: testEndpoint, OnRejection: Exit}).Validate(); err != nil {
		t.Errorf("Validate() of a good configuration = %v", err)
	}
	if _, err := New(Config{Endpoint: testEndpoint, Dir: shortTempDir(t), OnRejection: "ignore"}); err == nil {
		t.Error("New accepted a rejection policy that Validate refuses")
	}
}
