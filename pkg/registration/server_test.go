package registration

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
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

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type running struct {
	srv    *Server
	cancel context.CancelFunc
	done   chan error
}

// start runs a Server for dir in the background and waits until it serves.
func start(t *testing.T, dir string) *running {
	t.Helper()
	srv, err := New(Config{DriverName: testDriver, Endpoint: "/var/lib/kubelet/plugins/test/csi.sock", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{srv: srv, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	eventually(t, "the server serves", func() bool {
		select {
		case err := <-r.done:
			t.Fatalf("Run returned early: %v", err)
		default:
		}
		return srv.Health(context.Background()).State == Serving
	})
	return r
}

func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for Cleanup
		return err
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
	if got := r.srv.SocketPath(); got != path {
		t.Fatalf("SocketPath() = %q, want %q", got, path)
	}

	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a socket with 0600", fi.Mode())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("registry directory holds %d entries, want only the socket: %v", len(entries), entries)
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
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket still at %s after shutdown (err %v)", path, err)
	}
	if h := r.srv.Health(ctx); h.State != Stopped {
		t.Errorf("Health after shutdown = %v, want stopped", h)
	}
}

// leaveSocket binds a socket at path and closes it without unlinking, as a
// crashed process would; with live set it keeps listening.
func leaveSocket(t *testing.T, path string, live bool) net.Listener {
	t.Helper()
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
			srv, err := New(Config{DriverName: testDriver, Endpoint: "/csi.sock", Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			err = srv.Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path) {
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
		{"path too long", long, "more than the 107 a Unix socket allows"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Config{DriverName: testDriver, Endpoint: "/csi.sock", Dir: tc.dir})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
	if _, err := New(Config{DriverName: testDriver, Dir: dir}); err == nil || !strings.Contains(err.Error(), "--kubelet-registration-path") {
		t.Errorf("New() without an endpoint = %v, want an error naming --kubelet-registration-path", err)
	}
}

func TestNewerInstanceKeepsTheRegistration(t *testing.T) {
	dir := shortTempDir(t)
	older := start(t, dir)
	newer := start(t, dir)
	path := newer.srv.SocketPath()
	published, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	if h := older.srv.Health(ctx); h.State != Superseded {
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
	if h := newer.srv.Health(ctx); h.State != Serving {
		t.Errorf("newer instance Health = %+v, want serving", h)
	}
	if _, err := client(t, path).GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo on the newer socket: %v", err)
	}
}

func TestRejectionEndsRunAfterReplying(t *testing.T) {
	dir := shortTempDir(t)
	r := start(t, dir)
	path := r.srv.SocketPath()
	const reason = "RegisterPlugin error -- plugin registration failed with err: boom"
	_, err := client(t, path).NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: false, Error: reason})
	if err != nil {
		t.Fatalf("NotifyRegistrationStatus(false) got no reply: %v", err)
	}
	var runErr error
	select {
	case runErr = <-r.done:
		r.done <- runErr
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
}

// countingRegistration is another process's registration server.
type countingRegistration struct {
	registerapi.UnimplementedRegistrationServer
	name  string
	calls atomic.Int32
}

func (c *countingRegistration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	c.calls.Add(1)
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: c.name}, nil
}

// serveForeign publishes a registration socket at path as another
// process would, replacing what is there.
func serveForeign(t *testing.T, path, name string) *countingRegistration {
	t.Helper()
	tmp := path + ".new"
	l, err := net.Listen("unix", tmp)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	c := &countingRegistration{name: name}
	s := grpc.NewServer()
	registerapi.RegisterRegistrationServer(s, c)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return c
}

func TestHealth(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name      string
		change    func(t *testing.T, path string)
		want      State
		wantInMsg string
	}{
		{"ours", func(*testing.T, string) {}, Serving, "serving"},
		{"deleted", func(t *testing.T, path string) { os.Remove(path) }, Missing, "does not exist"},
		{"regular file", func(t *testing.T, path string) {
			os.Remove(path)
			os.WriteFile(path, nil, 0o600)
		}, Broken, "is a regular file"},
		{"newer instance", func(t *testing.T, path string) { serveForeign(t, path, testDriver) }, Superseded, "another instance"},
		{"other driver", func(t *testing.T, path string) { serveForeign(t, path, "other.example.com") }, Broken, `"other.example.com"`},
		{"dead socket", func(t *testing.T, path string) {
			os.Remove(path)
			leaveSocket(t, path, false)
		}, Broken, "does not answer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := start(t, shortTempDir(t))
			tc.change(t, r.srv.SocketPath())
			h := r.srv.Health(ctx)
			if h.State != tc.want || !strings.Contains(h.Reason, tc.wantInMsg) {
				t.Errorf("Health() = %v %q, want %v with %q", h.State, h.Reason, tc.want, tc.wantInMsg)
			}
		})
	}
}

func TestHealthAsksAForeignSocketOncePerFile(t *testing.T) {
	r := start(t, shortTempDir(t))
	path := r.srv.SocketPath()
	ctx := context.Background()
	first := serveForeign(t, path, testDriver)
	for i := 0; i < 5; i++ {
		if h := r.srv.Health(ctx); h.State != Superseded {
			t.Fatalf("Health() = %+v, want superseded", h)
		}
	}
	if n := first.calls.Load(); n != 1 {
		t.Errorf("GetInfo called %d times for one file, want 1", n)
	}
	second := serveForeign(t, path, testDriver)
	for i := 0; i < 3; i++ {
		r.srv.Health(ctx)
	}
	if n := second.calls.Load(); n != 1 {
		t.Errorf("GetInfo called %d times on the replacement file, want 1", n)
	}
}
