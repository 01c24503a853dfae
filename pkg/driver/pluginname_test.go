package driver_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/afunix"
	"github.com/csi-registrar/node-driver-registrar/test/poll"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/pkg/driver"
)

const testDriverName = "mock.csi.example.com"

// testTimeout bounds every wait in these tests; it is a safety net, never a
// measurement.
const testTimeout = 30 * time.Second

// socketDir returns a new directory with a path short enough for Unix sockets.
func socketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "drv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// answerFunc is the fake driver's GetPluginInfo: it gets the 1-based call number.
type answerFunc func(ctx context.Context, call int64) (*csi.GetPluginInfoResponse, error)

func answerName(name string) answerFunc {
	return func(context.Context, int64) (*csi.GetPluginInfoResponse, error) {
		return &csi.GetPluginInfoResponse{Name: name, VendorVersion: "v1"}, nil
	}
}

// fakeDriver is a CSI Identity service on a gRPC server of its own, whose
// GetPluginInfo answers with answer and counts the calls.
type fakeDriver struct {
	csi.UnimplementedIdentityServer
	server *grpc.Server
	answer answerFunc
	calls  atomic.Int64
}

func (d *fakeDriver) GetPluginInfo(ctx context.Context, _ *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return d.answer(ctx, d.calls.Add(1))
}

func newFakeDriver(t testing.TB, answer answerFunc) *fakeDriver {
	t.Helper()
	return newFakeDriverWith(t, answer)
}

// newFakeDriverWith is newFakeDriver with options for its gRPC server.
func newFakeDriverWith(t testing.TB, answer answerFunc, opts ...grpc.ServerOption) *fakeDriver {
	t.Helper()
	d := &fakeDriver{server: grpc.NewServer(opts...), answer: answer}
	csi.RegisterIdentityServer(d.server, d)
	return d
}

// start serves on listener until the test ends. The listener leaves its
// socket file behind when closed, so that a driver stopped late cannot
// remove the socket of the next one at the same path.
func (d *fakeDriver) start(t testing.TB, listener net.Listener) {
	t.Helper()
	if ul, ok := listener.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.server.Serve(listener)
	}()
	t.Cleanup(func() {
		d.server.Stop()
		<-done
	})
}

// serve starts the driver on a socket at path.
func (d *fakeDriver) serve(t testing.TB, path string) {
	t.Helper()
	afunix.Require(t)
	listener, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	d.start(t, listener)
}

// hiddenSockets numbers the sockets made by serveByRename.
var hiddenSockets atomic.Int64

// serveByRename starts the driver on a hidden socket and renames it to path,
// so the socket is accepting connections from the moment path exists.
func (d *fakeDriver) serveByRename(t testing.TB, path string) {
	t.Helper()
	afunix.Require(t)
	hidden := filepath.Join(filepath.Dir(path), fmt.Sprintf(".tmp%d.sock", hiddenSockets.Add(1)))
	listener, err := net.Listen("unix", hidden)
	if err != nil {
		t.Fatal(err)
	}
	d.start(t, listener)
	if err := os.Rename(hidden, path); err != nil {
		t.Fatal(err)
	}
}

// logContext returns a context whose logger records entries up to V(5).
func logContext(t testing.TB) (context.Context, ktesting.Buffer) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(5), ktesting.BufferLogs(true)))
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), logger), testTimeout)
	t.Cleanup(cancel)
	return ctx, logger.GetSink().(ktesting.Underlier).GetBuffer()
}

// levelZero returns the messages logged at level 0.
func levelZero(logs ktesting.Buffer) []string {
	var messages []string
	for _, entry := range logs.Data() {
		if entry.Verbosity == 0 {
			messages = append(messages, entry.Message)
		}
	}
	return messages
}

// watching passes the directories Follow's watcher moves to into the
// returned channel, which holds more than a test makes: Follow never waits.
func watching(cfg driver.Config) (driver.Config, <-chan string) {
	dirs := make(chan string, 100)
	return driver.WithWatches(cfg, func(dir string) { dirs <- dir }), dirs
}

// waitForWatch waits, up to testTimeout, until the watcher watches dir.
func waitForWatch(t testing.TB, dirs <-chan string, dir string) {
	t.Helper()
	timeout := time.After(testTimeout)
	for {
		select {
		case watched := <-dirs:
			if watched == dir {
				return
			}
		case <-timeout:
			t.Fatalf("the watcher did not move to %s in %v", dir, testTimeout)
		}
	}
}

// testConfig follows the driver at path on a fake clock that only the test
// steps: until it does, only file system events bring an attempt or a
// report.
func testConfig(path string) driver.Config {
	return driver.Config{
		Address: driver.Address{Path: path},
		Timeout: time.Second,
		Clock:   clocktesting.NewFakeClock(time.Now()),
	}
}

func fakeClock(cfg driver.Config) *clocktesting.FakeClock {
	return cfg.Clock.(*clocktesting.FakeClock)
}

// stepBackoff waits for n failed attempts and, after each, steps the clock
// through the backoff's wait that follows it once Follow waits on it.
func stepBackoff(t testing.TB, cfg driver.Config, attempts <-chan codes.Code, failed codes.Code, n int) {
	t.Helper()
	for i := range n {
		awaitAttempt(t, attempts, failed)
		poll.StepThrough(t, fakeClock(cfg), driver.InitialBackoff<<i)
	}
}

// runClock steps cfg's fake clock by step each time something waits on it,
// until the test ends: for waits that the test cannot tell from the
// outside, as after a refusal between a driver's bind and its listen.
func runClock(t testing.TB, cfg driver.Config, step time.Duration) {
	ctx, clock := t.Context(), fakeClock(cfg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if poll.Wait(testTimeout, func() bool { return ctx.Err() != nil || clock.HasWaiters() }) {
				clock.Step(step)
			}
		}
	}()
	t.Cleanup(func() { <-done })
}

type result struct {
	name string
	err  error
}

// pluginName runs Follow until it reports the driver found and returns
// the name: the search at the registrar's start. Follow's fatal errors are
// returned; once ctx is done, an error wrapping ctx.Err().
func pluginName(ctx context.Context, cfg driver.Config) (string, error) {
	following, stop := context.WithCancel(ctx)
	defer stop()
	var name string
	err := driver.Follow(following, cfg, func(e driver.Event) {
		if e.Reachable && name == "" {
			name = e.Name
			stop()
		}
	})
	switch {
	case name != "":
		return name, nil
	case err != nil:
		return "", err
	}
	return "", fmt.Errorf("waiting for the CSI driver at %s: %w", cfg.Address.Path, ctx.Err())
}

func pluginNameAsync(ctx context.Context, cfg driver.Config) <-chan result {
	done := make(chan result, 1)
	go func() {
		name, err := pluginName(ctx, cfg)
		done <- result{name, err}
	}()
	return done
}

func awaitResult(t testing.TB, done <-chan result) result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(testTimeout + 5*time.Second):
		t.Fatal("Follow did not report the driver")
		return result{}
	}
}

func TestSearchDriverUp(t *testing.T) {
	ctx, logs := logContext(t)
	path := filepath.Join(socketDir(t), "csi.sock")
	fake := newFakeDriver(t, answerName(testDriverName))
	fake.serve(t, path)

	name, err := pluginName(ctx, testConfig(path))
	if err != nil {
		t.Fatal(err)
	}
	if name != testDriverName {
		t.Errorf("pluginName = %q, want %q", name, testDriverName)
	}
	if got := fake.calls.Load(); got != 1 {
		t.Errorf("GetPluginInfo called %d times, want 1", got)
	}
	if got, want := levelZero(logs), []string{"Found the CSI driver"}; !equalStrings(got, want) {
		t.Errorf("level 0 log = %q, want %q", got, want)
	}
}

// TestSearchDriverAppearsLater starts the driver the usual way, listening
// directly on its path, once the search is waiting. The clock runs while
// Follow waits: an attempt between the driver's bind and its listen is
// refused, and retried after a poll.
func TestSearchDriverAppearsLater(t *testing.T) {
	ctx, logs := logContext(t)
	path := filepath.Join(socketDir(t), "csi.sock")
	cfg := testConfig(path)
	runClock(t, cfg, driver.ListenPoll)
	attempts := attemptChannel(&cfg)
	done := pluginNameAsync(ctx, cfg)
	awaitAttempt(t, attempts, codes.Unavailable)

	fake := newFakeDriver(t, answerName(testDriverName))
	fake.serve(t, path)

	r := awaitResult(t, done)
	if r.err != nil || r.name != testDriverName {
		t.Fatalf("pluginName = %q, %v; want %q", r.name, r.err, testDriverName)
	}
	if got, want := levelZero(logs), []string{"Waiting for the CSI driver", "Found the CSI driver"}; !equalStrings(got, want) {
		t.Errorf("level 0 log = %q, want %q", got, want)
	}
}

// TestSearchWakesOnSocketCreate never steps the clock, so only the file
// system watch can bring the next attempt.
func TestSearchWakesOnSocketCreate(t *testing.T) {
	tests := []struct {
		name   string
		socket string // under the temp dir
		before []string
		// changes are made once the search waits, before the socket appears:
		// a name creates that directory, "-" and a name removes it.
		changes []string
	}{
		{name: "directory exists", socket: "csi.sock"},
		{
			name:    "directories missing",
			socket:  "plugins/csi.example.com/csi.sock",
			changes: []string{"plugins", "plugins/csi.example.com"},
		},
		{
			name:    "directory re-created",
			socket:  "csi/csi.sock",
			before:  []string{"csi"},
			changes: []string{"-csi", "csi"},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			// The search ends on the driver's socket: without AF_UNIX the
			// test cannot pass, so it skips before making its changes.
			// (Wine, which has no AF_UNIX, also never reports a watched
			// directory's removal: "directory re-created" would wait out
			// testTimeout before reaching the socket.)
			afunix.Require(t)
			ctx, logs := logContext(t)
			dir := socketDir(t)
			for _, sub := range test.before {
				if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(dir, test.socket)
			cfg := testConfig(path)
			attempts := attemptChannel(&cfg)
			cfg, watches := watching(cfg)
			done := pluginNameAsync(ctx, cfg)
			awaitAttempt(t, attempts, codes.Unavailable)

			for _, change := range test.changes {
				var err error
				if removed, ok := strings.CutPrefix(change, "-"); ok {
					err = os.Remove(filepath.Join(dir, removed))
					// On Windows the removed directory's name stays taken
					// while a handle to it is open: the watch's, until
					// the watcher lets it go and watches the parent.
					waitForWatch(t, watches, filepath.Dir(filepath.Join(dir, removed)))
				} else {
					err = os.Mkdir(filepath.Join(dir, change), 0o755)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			fake := newFakeDriver(t, answerName(testDriverName))
			fake.serveByRename(t, path)

			r := awaitResult(t, done)
			if r.err != nil || r.name != testDriverName {
				t.Fatalf("pluginName = %q, %v; want %q\n%s", r.name, r.err, testDriverName, logs.String())
			}
		})
	}
}

// TestSearchRetries steps the clock through the backoff after each failed
// attempt; the driver answers the fourth.
func TestSearchRetries(t *testing.T) {
	const failures = 3
	tests := []struct {
		name    string
		timeout time.Duration
		answer  answerFunc
		failed  codes.Code // each failed attempt's
		// wantLogged are the level 0 messages, in order.
		wantLogged []string
	}{
		{
			name:    "slower than the timeout",
			timeout: 50 * time.Millisecond,
			failed:  codes.DeadlineExceeded,
			answer: func(ctx context.Context, call int64) (*csi.GetPluginInfoResponse, error) {
				if call <= failures {
					// Answer only once the client has given up.
					<-ctx.Done()
					return nil, status.FromContextError(ctx.Err()).Err()
				}
				return &csi.GetPluginInfoResponse{Name: testDriverName}, nil
			},
			wantLogged: []string{"Waiting for the CSI driver", "Found the CSI driver"},
		},
		{
			name:    "unavailable",
			timeout: time.Second,
			failed:  codes.Unavailable,
			answer: func(_ context.Context, call int64) (*csi.GetPluginInfoResponse, error) {
				if call <= failures {
					return nil, status.Error(codes.Unavailable, "not ready yet")
				}
				return &csi.GetPluginInfoResponse{Name: testDriverName}, nil
			},
			wantLogged: []string{"Waiting for the CSI driver", "Found the CSI driver"},
		},
		{
			name:    "other error, logged once",
			timeout: time.Second,
			failed:  codes.Internal,
			answer: func(_ context.Context, call int64) (*csi.GetPluginInfoResponse, error) {
				if call <= failures {
					return nil, status.Error(codes.Internal, "disk on fire")
				}
				return &csi.GetPluginInfoResponse{Name: testDriverName}, nil
			},
			wantLogged: []string{
				"CSI driver answered GetPluginInfo with an error; retrying",
				"Waiting for the CSI driver",
				"Found the CSI driver",
			},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			ctx, logs := logContext(t)
			path := filepath.Join(socketDir(t), "csi.sock")
			fake := newFakeDriver(t, test.answer)
			fake.serve(t, path)
			cfg := testConfig(path)
			cfg.Timeout = test.timeout
			attempts := attemptChannel(&cfg)
			done := pluginNameAsync(ctx, cfg)
			stepBackoff(t, cfg, attempts, test.failed, failures)

			r := awaitResult(t, done)
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.name != testDriverName {
				t.Errorf("pluginName = %q, want %q", r.name, testDriverName)
			}
			if got := fake.calls.Load(); got != failures+1 {
				t.Errorf("GetPluginInfo called %d times, want %d", got, failures+1)
			}
			if got := levelZero(logs); !equalStrings(got, test.wantLogged) {
				t.Errorf("level 0 log = %q, want %q", got, test.wantLogged)
			}
		})
	}
}

func TestSearchInvalidName(t *testing.T) {
	for _, name := range []string{"", "a/b", "../../etc/x", ".hidden", "-csi", strings.Repeat("a", 64)} {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			ctx, _ := logContext(t)
			path := filepath.Join(socketDir(t), "csi.sock")
			fake := newFakeDriver(t, answerName(name))
			fake.serve(t, path)

			got, err := pluginName(ctx, testConfig(path))
			if err == nil {
				t.Fatalf("pluginName = %q, want an error", got)
			}
			want := fmt.Sprintf("%q", name)
			if name == "" {
				want = "empty"
			}
			for _, want := range []string{want, "GetPluginInfo"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if calls := fake.calls.Load(); calls != 1 {
				t.Errorf("GetPluginInfo called %d times, want 1: an invalid name is not retried", calls)
			}
		})
	}
}

func TestSearchUnimplemented(t *testing.T) {
	afunix.Require(t)
	t.Run("answer", func(t *testing.T) {
		ctx, _ := logContext(t)
		path := filepath.Join(socketDir(t), "csi.sock")
		fake := newFakeDriver(t, func(context.Context, int64) (*csi.GetPluginInfoResponse, error) {
			return nil, status.Error(codes.Unimplemented, "no")
		})
		fake.serve(t, path)
		checkNotIdentity(t, ctx, path)
		if calls := fake.calls.Load(); calls != 1 {
			t.Errorf("GetPluginInfo called %d times, want 1", calls)
		}
	})
	t.Run("no Identity service", func(t *testing.T) {
		ctx, _ := logContext(t)
		path := filepath.Join(socketDir(t), "csi.sock")
		listener, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		server := grpc.NewServer()
		go func() { _ = server.Serve(listener) }()
		t.Cleanup(server.Stop)
		checkNotIdentity(t, ctx, path)
	})
}

func checkNotIdentity(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	name, err := pluginName(ctx, testConfig(path))
	if err == nil {
		t.Fatalf("pluginName = %q, want an error", name)
	}
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "Identity service") {
		t.Errorf("error %q: want Unimplemented and a word on the Identity service", err)
	}
}

// TestSearchCancel checks that the search returns once its context is
// cancelled, whether it is waiting for the socket or inside an attempt, and
// leaves no watcher or connection behind.
func TestSearchCancel(t *testing.T) {
	t.Run("while waiting for the socket", func(t *testing.T) {
		ctx, _ := logContext(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		path := filepath.Join(socketDir(t), "missing", "csi.sock")
		cfg := testConfig(path)
		attempts := attemptChannel(&cfg)
		done := pluginNameAsync(ctx, cfg)
		awaitAttempt(t, attempts, codes.Unavailable)

		cancel()
		checkCancelled(t, awaitResult(t, done))
	})
	t.Run("during a slow attempt", func(t *testing.T) {
		ctx, _ := logContext(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		path := filepath.Join(socketDir(t), "csi.sock")
		called := make(chan struct{})
		fake := newFakeDriver(t, func(ctx context.Context, call int64) (*csi.GetPluginInfoResponse, error) {
			if call == 1 {
				close(called)
			}
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		})
		fake.serve(t, path)
		cfg := testConfig(path)
		cfg.Timeout = time.Hour
		done := pluginNameAsync(ctx, cfg)
		select {
		case <-called:
		case <-time.After(testTimeout):
			t.Fatal("GetPluginInfo was not called")
		}

		cancel()
		checkCancelled(t, awaitResult(t, done))
	})
	checkNoLeaks(t)
}

func checkCancelled(t *testing.T, r result) {
	t.Helper()
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("pluginName = %q, %v; want context.Canceled", r.name, r.err)
	}
}

// checkNoLeaks polls, up to testTimeout, until no goroutine of
// Follow, of their watcher or of a gRPC client connection is left. Tests
// running in parallel would break this; none of this package's do.
func checkNoLeaks(t *testing.T) {
	t.Helper()
	leaks := []string{"driver.Follow", "driver.(*follower)", "fsnotify", "transport.(*http2Client)", "grpc.(*ClientConn)"}
	var found []string
	var stacks string
	clean := func() bool {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		found = nil
		for _, leak := range leaks {
			if strings.Contains(stacks, leak) {
				found = append(found, leak)
			}
		}
		return len(found) == 0
	}
	if !poll.Wait(testTimeout, clean) {
		t.Fatalf("goroutines left behind (%q):\n%s", found, stacks)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func BenchmarkFindDriver(b *testing.B) {
	path := filepath.Join(socketDir(b), "csi.sock")
	fake := newFakeDriver(b, answerName(testDriverName))
	fake.serve(b, path)
	ctx := klog.NewContext(context.Background(), logr.Discard())
	cfg := testConfig(path)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pluginName(ctx, cfg); err != nil {
			b.Fatal(err)
		}
	}
}
