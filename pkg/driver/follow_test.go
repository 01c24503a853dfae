package driver_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/poll"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/pkg/driver"
)

const otherDriverName = "other.csi.example.com"

var gone = driver.Event{}

func reachable(name string) driver.Event {
	return driver.Event{Name: name, Reachable: true}
}

// stop stops the driver and removes its socket, as a driver does when it
// exits.
func (d *fakeDriver) stop(t testing.TB, path string) {
	t.Helper()
	d.server.Stop()
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
}

// following is a Follow running in the background.
type following struct {
	cancel context.CancelFunc
	events chan driver.Event
	done   chan error
}

func followAsync(t testing.TB, ctx context.Context, cfg driver.Config) *following {
	t.Helper()
	// Large enough that Follow never waits for the test.
	events := make(chan driver.Event, 1000)
	f := startFollow(t, ctx, cfg, func(event driver.Event) { events <- event })
	f.events = events
	return f
}

// startFollow runs Follow in the background with report.
func startFollow(t testing.TB, ctx context.Context, cfg driver.Config, report func(driver.Event)) *following {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	f := &following{cancel: cancel, done: make(chan error, 1)}
	go func() {
		f.done <- driver.Follow(ctx, cfg, report)
	}()
	t.Cleanup(func() {
		cancel()
		<-f.done
	})
	return f
}

// next returns the next event; it fails the test if Follow returns first.
func (f *following) next(t testing.TB) driver.Event {
	t.Helper()
	select {
	case event := <-f.events:
		return event
	case err := <-f.done:
		f.done <- err // for the cleanup
		t.Fatalf("Follow returned %v, want an event", err)
	case <-time.After(testTimeout):
		t.Fatalf("no event after %v", testTimeout)
	}
	return driver.Event{}
}

// expect reads the next events and checks them.
func (f *following) expect(t testing.TB, want ...driver.Event) {
	t.Helper()
	for _, w := range want {
		if got := f.next(t); got != w {
			t.Fatalf("event %+v, want %+v", got, w)
		}
	}
}

// result waits for Follow to return, and returns its error.
func (f *following) result(t testing.TB) error {
	t.Helper()
	select {
	case err := <-f.done:
		f.done <- err // for the cleanup
		return err
	case <-time.After(testTimeout + 5*time.Second):
		t.Fatal("Follow did not return")
		return nil
	}
}

// stop cancels Follow, checks that it returns nil, and returns the events
// left unread.
func (f *following) stop(t testing.TB) []driver.Event {
	t.Helper()
	f.cancel()
	if err := f.result(t); err != nil {
		t.Fatalf("Follow = %v after cancel, want nil", err)
	}
	var left []driver.Event
	for {
		select {
		case event := <-f.events:
			left = append(left, event)
		default:
			return left
		}
	}
}

func TestFollowFindsDriver(t *testing.T) {
	t.Run("driver up", func(t *testing.T) {
		ctx, logs := logContext(t)
		path := filepath.Join(socketDir(t), "csi.sock")
		fake := newFakeDriver(t, answerName(testDriverName))
		fake.serve(t, path)

		f := followAsync(t, ctx, testConfig(path))
		f.expect(t, reachable(testDriverName))
		if left := f.stop(t); len(left) > 0 {
			t.Errorf("more events: %+v", left)
		}
		if got, want := levelZero(logs), []string{"Found the CSI driver"}; !equalStrings(got, want) {
			t.Errorf("level 0 log = %q, want %q", got, want)
		}
	})
	t.Run("driver appears later", func(t *testing.T) {
		ctx, logs := logContext(t)
		path := filepath.Join(socketDir(t), "csi.sock")
		cfg := testConfig(path)
		attempts := attemptChannel(&cfg)
		f := followAsync(t, ctx, cfg)
		awaitAttempt(t, attempts, codes.Unavailable)

		fake := newFakeDriver(t, answerName(testDriverName))
		fake.serveByRename(t, path)
		f.expect(t, reachable(testDriverName))
		if left := f.stop(t); len(left) > 0 {
			t.Errorf("more events: %+v", left)
		}
		if got, want := levelZero(logs), []string{"Waiting for the CSI driver", "Found the CSI driver"}; !equalStrings(got, want) {
			t.Errorf("level 0 log = %q, want %q", got, want)
		}
	})
}

// TestFollowRestart restarts the driver once Follow has found it. Timers
// never fire within the test's time: only the file system watch brings the
// new attempt.
func TestFollowRestart(t *testing.T) {
	tests := []struct {
		name    string
		newName string
		// remove: the old socket is removed, and the removal reported,
		// before the new one is renamed into place; otherwise the new
		// socket replaces the old one.
		remove     bool
		wantEvents []driver.Event
		wantLogged []string
	}{
		{
			name:       "same name",
			newName:    testDriverName,
			remove:     true,
			wantEvents: []driver.Event{gone, reachable(testDriverName)},
			wantLogged: []string{"Found the CSI driver", "CSI driver socket removed", "CSI driver is back"},
		},
		{
			name:       "new name",
			newName:    otherDriverName,
			remove:     true,
			wantEvents: []driver.Event{gone, reachable(otherDriverName)},
			wantLogged: []string{"Found the CSI driver", "CSI driver socket removed", "CSI driver name changed"},
		},
		{
			name:       "replaced in place, same name",
			newName:    testDriverName,
			wantEvents: []driver.Event{reachable(testDriverName)},
			wantLogged: []string{"Found the CSI driver", "CSI driver is back"},
		},
		{
			name:       "replaced in place, new name",
			newName:    otherDriverName,
			wantEvents: []driver.Event{reachable(otherDriverName)},
			wantLogged: []string{"Found the CSI driver", "CSI driver name changed"},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			ctx, logs := logContext(t)
			path := filepath.Join(socketDir(t), "csi.sock")
			old := newFakeDriver(t, answerName(testDriverName))
			old.serveByRename(t, path)
			f := followAsync(t, ctx, testConfig(path))
			f.expect(t, reachable(testDriverName))

			if test.remove {
				old.stop(t, path)
				f.expect(t, gone)
			}
			restarted := newFakeDriver(t, answerName(test.newName))
			restarted.serveByRename(t, path)
			f.expect(t, test.wantEvents[len(test.wantEvents)-1])

			if left := f.stop(t); len(left) > 0 {
				t.Errorf("more events: %+v", left)
			}
			if got := levelZero(logs); !equalStrings(got, test.wantLogged) {
				t.Errorf("level 0 log = %q, want %q", got, test.wantLogged)
			}
			if got := old.calls.Load() + restarted.calls.Load(); got != 2 {
				t.Errorf("GetPluginInfo called %d times, want 2", got)
			}
		})
	}
}

// TestFollowRestartNotReady restarts the driver with one that needs a few
// attempts, retried with the start-up backoff as the test steps the clock.
func TestFollowRestartNotReady(t *testing.T) {
	const failures = 3
	tests := []struct {
		name       string
		timeout    time.Duration
		answer     answerFunc
		failed     codes.Code // each failed attempt's
		wantLogged []string
	}{
		{
			name:    "unavailable",
			timeout: time.Second,
			failed:  codes.Unavailable,
			answer: func(_ context.Context, call int64) (*csi.GetPluginInfoResponse, error) {
				if call <= failures {
					return nil, status.Error(codes.Unavailable, "not ready yet")
				}
				return &csi.GetPluginInfoResponse{Name: otherDriverName}, nil
			},
			wantLogged: []string{
				"Found the CSI driver", "CSI driver socket removed",
				"Waiting for the CSI driver", "CSI driver name changed",
			},
		},
		{
			name:    "slower than the timeout",
			timeout: 250 * time.Millisecond,
			failed:  codes.DeadlineExceeded,
			answer: func(ctx context.Context, call int64) (*csi.GetPluginInfoResponse, error) {
				if call <= failures {
					<-ctx.Done()
					return nil, status.FromContextError(ctx.Err()).Err()
				}
				return &csi.GetPluginInfoResponse{Name: otherDriverName}, nil
			},
			wantLogged: []string{
				"Found the CSI driver", "CSI driver socket removed",
				"Waiting for the CSI driver", "CSI driver name changed",
			},
		},
		{
			name:    "other error, logged once",
			timeout: time.Second,
			failed:  codes.Internal,
			answer: func(_ context.Context, call int64) (*csi.GetPluginInfoResponse, error) {
				if call <= failures {
					return nil, status.Error(codes.Internal, "disk on fire")
				}
				return &csi.GetPluginInfoResponse{Name: otherDriverName}, nil
			},
			wantLogged: []string{
				"Found the CSI driver", "CSI driver socket removed",
				"CSI driver answered GetPluginInfo with an error; retrying",
				"Waiting for the CSI driver", "CSI driver name changed",
			},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			ctx, logs := logContext(t)
			path := filepath.Join(socketDir(t), "csi.sock")
			old := newFakeDriver(t, answerName(testDriverName))
			old.serve(t, path)
			cfg := testConfig(path)
			cfg.Timeout = test.timeout
			attempts := attemptChannel(&cfg)
			f := followAsync(t, ctx, cfg)
			f.expect(t, reachable(testDriverName))
			awaitAttempt(t, attempts, codes.OK)

			old.stop(t, path)
			f.expect(t, gone)
			restarted := newFakeDriver(t, test.answer)
			restarted.serveByRename(t, path)
			stepBackoff(t, cfg, attempts, test.failed, failures)
			f.expect(t, reachable(otherDriverName))

			if left := f.stop(t); len(left) > 0 {
				t.Errorf("more events: %+v", left)
			}
			if got := restarted.calls.Load(); got != failures+1 {
				t.Errorf("GetPluginInfo called %d times on the restarted driver, want %d", got, failures+1)
			}
			if got := levelZero(logs); !equalStrings(got, test.wantLogged) {
				t.Errorf("level 0 log = %q, want %q", got, test.wantLogged)
			}
		})
	}
}

// TestFollowRemovedWhileSearching removes a socket whose driver never gets
// ready: Follow stops trying until the next socket, which it finds at once.
func TestFollowRemovedWhileSearching(t *testing.T) {
	tests := []struct {
		name string
		// replace: the never ready driver's socket replaces the first one,
		// which is still reported reachable until the removal; otherwise
		// the first one is removed and reported gone before.
		replace bool
	}{
		{name: "after a removal"},
		{name: "after a replacement", replace: true},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			ctx, _ := logContext(t)
			path := filepath.Join(socketDir(t), "csi.sock")
			var attempts attemptLog
			cfg := testConfig(path)
			cfg.OnAttempt = attempts.observe
			old := newFakeDriver(t, timed(cfg, answerName(testDriverName)))
			old.serveByRename(t, path)
			f := followAsync(t, ctx, cfg)
			f.expect(t, reachable(testDriverName))
			if !test.replace {
				old.stop(t, path)
				f.expect(t, gone)
			}

			notReady := newFakeDriver(t, timed(cfg, func(context.Context, int64) (*csi.GetPluginInfoResponse, error) {
				return nil, status.Error(codes.Unavailable, "not ready yet")
			}))
			notReady.serveByRename(t, path)
			attempts.waitFor(t, 2) // the first one, then one on the driver not ready
			notReady.stop(t, path)
			if test.replace {
				f.expect(t, gone)
			}
			newFakeDriver(t, timed(cfg, answerName(otherDriverName))).serveByRename(t, path)
			f.expect(t, reachable(otherDriverName))

			if left := f.stop(t); len(left) > 0 {
				t.Errorf("more events: %+v", left)
			}
			// No attempt while the socket was missing.
			attempts.check(t, answered(codes.OK), answered(codes.Unavailable), answered(codes.OK))
		})
	}
}

// TestFollowQuickRestart removes the socket and creates the next one at once,
// without waiting for Follow to see the removal.
func TestFollowQuickRestart(t *testing.T) {
	tests := []struct {
		name string
		// serve starts a driver: by rename, so that it answers from the
		// first moment, with a clock that never moves; or listening on the
		// path itself, so that an attempt may come between bind and listen
		// and be retried, with a clock that runs while Follow waits.
		serve     func(d *fakeDriver, t testing.TB, path string)
		clockRuns bool
	}{
		{name: "by rename", serve: (*fakeDriver).serveByRename},
		{name: "listening on the path", serve: (*fakeDriver).serve, clockRuns: true},
	}
	config := func(t *testing.T, path string, clockRuns bool) driver.Config {
		cfg := testConfig(path)
		if clockRuns {
			runClock(t, cfg, driver.ListenPoll)
		}
		return cfg
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			t.Run("once", func(t *testing.T) {
				ctx, _ := logContext(t)
				path := filepath.Join(socketDir(t), "csi.sock")
				old := newFakeDriver(t, answerName(testDriverName))
				test.serve(old, t, path)
				f := followAsync(t, ctx, config(t, path, test.clockRuns))
				f.expect(t, reachable(testDriverName))

				old.stop(t, path)
				test.serve(newFakeDriver(t, answerName(otherDriverName)), t, path)

				// Follow was idle with nothing pending when the restart
				// began: the events are exactly these, ending reachable.
				f.expect(t, gone, reachable(otherDriverName))
				if left := f.stop(t); len(left) > 0 {
					t.Errorf("more events: %+v", left)
				}
			})
			t.Run("many times", func(t *testing.T) {
				const restarts = 10
				ctx, _ := logContext(t)
				path := filepath.Join(socketDir(t), "csi.sock")
				current := newFakeDriver(t, answerName(testDriverName))
				test.serve(current, t, path)
				// Follow's reports and the file system events it handled,
				// in its order; large enough that it never waits.
				trace := make(chan traced, 1000)
				cfg := driver.WithFileEvents(config(t, path, test.clockRuns), func(e fsnotify.Event) { trace <- traced{file: e} })
				f := startFollow(t, ctx, cfg, func(e driver.Event) { trace <- traced{event: e} })
				if got := nextReport(t, trace); got != reachable(testDriverName) {
					t.Fatalf("event %+v, want %+v", got, reachable(testDriverName))
				}

				names := map[string]bool{testDriverName: true}
				var last string
				for i := range restarts {
					current.stop(t, path)
					last = fmt.Sprintf("drv%d.example.com", i)
					names[last] = true
					current = newFakeDriver(t, answerName(last))
					test.serve(current, t, path)
				}

				// Follow may see the file system events late and report
				// drivers already replaced, and their removals, after the
				// last driver. It is done once it has reported the last
				// driver after handling the last creation of the socket.
				events := []driver.Event{reachable(testDriverName)}
				creations := 0
				for done := false; !done; {
					select {
					case got := <-trace:
						switch {
						case got.file.Name == "":
							events = append(events, got.event)
							done = creations == restarts && got.event == reachable(last)
						case got.file.Name == path && got.file.Has(fsnotify.Create):
							creations++
						}
					case <-time.After(testTimeout):
						t.Fatalf("after %v, %d of %d creations handled; events: %+v", testTimeout, creations, restarts, events)
					}
				}
				f.stop(t)
				for len(trace) > 0 {
					if got := <-trace; got.file.Name == "" {
						events = append(events, got.event)
					}
				}
				for i, event := range events {
					if event.Reachable && !names[event.Name] || !event.Reachable && event != gone {
						t.Errorf("event %+v: not one of the drivers", event)
					}
					if i > 0 && event == gone && events[i-1] == gone {
						t.Errorf("removal reported twice in a row: %+v", events)
					}
				}
				if got := events[len(events)-1]; got != reachable(last) {
					t.Errorf("last event %+v, want %+v; all events: %+v", got, reachable(last), events)
				}
			})
		})
	}
}

// TestFollowSocketDirectory takes the socket's directory away while Follow
// watches it: the watch falls back on the parent and comes back down when the
// directory is created again.
func TestFollowSocketDirectory(t *testing.T) {
	tests := []struct {
		name string
		// takeAway removes the directory dir/csi of the driver's socket.
		takeAway func(t *testing.T, old *fakeDriver, dir, path string, f *following)
	}{
		{
			name: "removed",
			takeAway: func(t *testing.T, old *fakeDriver, dir, path string, f *following) {
				old.stop(t, path)
				f.expect(t, gone)
				if err := os.Remove(filepath.Join(dir, "csi")); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "renamed away with the socket",
			takeAway: func(t *testing.T, _ *fakeDriver, dir, _ string, f *following) {
				if err := os.Rename(filepath.Join(dir, "csi"), filepath.Join(dir, "old")); err != nil {
					t.Fatal(err)
				}
				f.expect(t, gone)
			},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			ctx, logs := logContext(t)
			dir := socketDir(t)
			if err := os.Mkdir(filepath.Join(dir, "csi"), 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "csi", "csi.sock")
			old := newFakeDriver(t, answerName(testDriverName))
			old.serveByRename(t, path)
			f := followAsync(t, ctx, testConfig(path))
			f.expect(t, reachable(testDriverName))

			test.takeAway(t, old, dir, path, f)
			if err := os.Mkdir(filepath.Join(dir, "csi"), 0o755); err != nil {
				t.Fatal(err)
			}
			newFakeDriver(t, answerName(otherDriverName)).serveByRename(t, path)
			f.expect(t, reachable(otherDriverName))

			if left := f.stop(t); len(left) > 0 {
				t.Errorf("more events: %+v", left)
			}
			want := []string{"Found the CSI driver", "CSI driver socket removed", "CSI driver name changed"}
			if got := levelZero(logs); !equalStrings(got, want) {
				t.Errorf("level 0 log = %q, want %q", got, want)
			}
		})
	}
}

func TestFollowFatalAfterRestart(t *testing.T) {
	tests := []struct {
		name    string
		answer  answerFunc
		wantErr func(error) bool
	}{
		{
			name:   "invalid name",
			answer: answerName("a/b"),
			wantErr: func(err error) bool {
				return strings.Contains(err.Error(), `"a/b"`) && strings.Contains(err.Error(), "GetPluginInfo")
			},
		},
		{
			name: "no Identity service",
			answer: func(context.Context, int64) (*csi.GetPluginInfoResponse, error) {
				return nil, status.Error(codes.Unimplemented, "no")
			},
			wantErr: func(err error) bool {
				return status.Code(err) == codes.Unimplemented && strings.Contains(err.Error(), "Identity service")
			},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			ctx, _ := logContext(t)
			path := filepath.Join(socketDir(t), "csi.sock")
			old := newFakeDriver(t, answerName(testDriverName))
			old.serve(t, path)
			f := followAsync(t, ctx, testConfig(path))
			f.expect(t, reachable(testDriverName))

			old.stop(t, path)
			f.expect(t, gone)
			restarted := newFakeDriver(t, test.answer)
			restarted.serveByRename(t, path)

			err := f.result(t)
			if err == nil || !test.wantErr(err) {
				t.Fatalf("Follow = %v, want the %s error", err, test.name)
			}
			if calls := restarted.calls.Load(); calls != 1 {
				t.Errorf("GetPluginInfo called %d times, want 1: a fatal answer is not retried", calls)
			}
			if len(f.events) > 0 {
				t.Errorf("events after the fatal answer: %+v", <-f.events)
			}
		})
	}
}

// TestFollowCancel cancels Follow in each of its states and checks that it
// returns nil and leaves nothing behind.
func TestFollowCancel(t *testing.T) {
	t.Run("before the driver is found", func(t *testing.T) {
		ctx, _ := logContext(t)
		path := filepath.Join(socketDir(t), "missing", "csi.sock")
		cfg := testConfig(path)
		attempts := attemptChannel(&cfg)
		f := followAsync(t, ctx, cfg)
		awaitAttempt(t, attempts, codes.Unavailable)
		if left := f.stop(t); len(left) > 0 {
			t.Errorf("events: %+v", left)
		}
	})
	t.Run("while the driver is up", func(t *testing.T) {
		ctx, _ := logContext(t)
		path := filepath.Join(socketDir(t), "csi.sock")
		newFakeDriver(t, answerName(testDriverName)).serve(t, path)
		f := followAsync(t, ctx, testConfig(path))
		f.expect(t, reachable(testDriverName))
		f.stop(t)
	})
	t.Run("while the socket is gone", func(t *testing.T) {
		ctx, _ := logContext(t)
		path := filepath.Join(socketDir(t), "csi.sock")
		old := newFakeDriver(t, answerName(testDriverName))
		old.serve(t, path)
		f := followAsync(t, ctx, testConfig(path))
		f.expect(t, reachable(testDriverName))
		old.stop(t, path)
		f.expect(t, gone)
		f.stop(t)
	})
	t.Run("during a slow attempt after a restart", func(t *testing.T) {
		ctx, _ := logContext(t)
		path := filepath.Join(socketDir(t), "csi.sock")
		old := newFakeDriver(t, answerName(testDriverName))
		old.serve(t, path)
		cfg := testConfig(path)
		cfg.Timeout = time.Hour
		f := followAsync(t, ctx, cfg)
		f.expect(t, reachable(testDriverName))
		old.stop(t, path)
		f.expect(t, gone)

		called := make(chan struct{})
		newFakeDriver(t, func(ctx context.Context, call int64) (*csi.GetPluginInfoResponse, error) {
			if call == 1 {
				close(called)
			}
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		}).serveByRename(t, path)
		select {
		case <-called:
		case <-time.After(testTimeout):
			t.Fatal("GetPluginInfo was not called")
		}
		if left := f.stop(t); len(left) > 0 {
			t.Errorf("events: %+v", left)
		}
	})
	checkNoLeaks(t)
}

// TestFollowBackoff steps the clock through the waits between attempts on
// a missing socket, then creates the socket: the backoff starts again.
func TestFollowBackoff(t *testing.T) {
	ctx, _ := logContext(t)
	path := filepath.Join(socketDir(t), "csi.sock")
	clock := clocktesting.NewFakeClock(time.Now())
	cfg := driver.Config{Address: driver.Address{Path: path}, Clock: clock}
	attempts := attemptChannel(&cfg)
	f := followAsync(t, ctx, cfg)
	awaitAttempt(t, attempts, codes.Unavailable)

	// waitFor checks that the next attempt comes after wait on the clock,
	// not before.
	waitFor := func(wait time.Duration, want codes.Code) {
		t.Helper()
		poll.StepThrough(t, clock, wait)
		awaitAttempt(t, attempts, want)
	}
	for _, wait := range []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000} {
		waitFor(wait*time.Millisecond, codes.Unavailable)
	}

	notReady := 2
	newFakeDriver(t, func(_ context.Context, call int64) (*csi.GetPluginInfoResponse, error) {
		if call <= int64(notReady) {
			return nil, status.Error(codes.Unavailable, "not ready yet")
		}
		return &csi.GetPluginInfoResponse{Name: testDriverName}, nil
	}).serveByRename(t, path)
	awaitAttempt(t, attempts, codes.Unavailable) // at once, on the creation
	waitFor(100*time.Millisecond, codes.Unavailable)
	waitFor(200*time.Millisecond, codes.OK)
	f.expect(t, reachable(testDriverName))
	if left := f.stop(t); len(left) > 0 {
		t.Errorf("more events: %+v", left)
	}
}

// answerTime is how long a timed driver takes to answer, on the clock.
const answerTime = 3 * time.Millisecond

// timed is answer taking answerTime on cfg's fake clock, which no timer of
// Follow's waits on during an attempt.
func timed(cfg driver.Config, answer answerFunc) answerFunc {
	return func(ctx context.Context, call int64) (*csi.GetPluginInfoResponse, error) {
		fakeClock(cfg).Step(answerTime)
		return answer(ctx, call)
	}
}

// attempt is what OnAttempt is given, its error as a code.
type attempt struct {
	code codes.Code
	took time.Duration
}

// answered is an attempt that a timed driver answered with code.
func answered(code codes.Code) attempt { return attempt{code, answerTime} }

// attemptLog records what OnAttempt is given.
type attemptLog struct {
	mu       sync.Mutex
	attempts []attempt
}

func (a *attemptLog) observe(duration time.Duration, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.attempts = append(a.attempts, attempt{status.Code(err), duration})
}

// waitFor polls, up to testTimeout, until OnAttempt was called n times.
func (a *attemptLog) waitFor(t *testing.T, n int) {
	t.Helper()
	calls := func() int {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.attempts)
	}
	if !poll.Wait(testTimeout, func() bool { return calls() >= n }) {
		t.Fatalf("OnAttempt called %d times after %v, want %d", calls(), testTimeout, n)
	}
}

// check compares the attempts with want: the codes, and the durations on
// the clock.
func (a *attemptLog) check(t *testing.T, want ...attempt) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if !slices.Equal(a.attempts, want) {
		t.Errorf("OnAttempt got %+v, want %+v", a.attempts, want)
	}
}

func TestOnAttempt(t *testing.T) {
	t.Run("start", func(t *testing.T) {
		ctx, _ := logContext(t)
		path := filepath.Join(socketDir(t), "csi.sock")
		var attempts attemptLog
		cfg := testConfig(path)
		cfg.OnAttempt = attempts.observe
		done := pluginNameAsync(ctx, cfg)
		// One attempt without a socket: Follow watches before it, so the
		// socket's creation brings the next.
		attempts.waitFor(t, 1)
		fake := newFakeDriver(t, timed(cfg, answerName(testDriverName)))
		fake.serveByRename(t, path)
		if r := awaitResult(t, done); r.err != nil {
			t.Fatal(r.err)
		}
		attempts.check(t, attempt{codes.Unavailable, 0}, answered(codes.OK))
	})
	t.Run("start, invalid name", func(t *testing.T) {
		ctx, _ := logContext(t)
		path := filepath.Join(socketDir(t), "csi.sock")
		var attempts attemptLog
		cfg := testConfig(path)
		cfg.OnAttempt = attempts.observe
		newFakeDriver(t, timed(cfg, answerName("a/b"))).serve(t, path)
		if _, err := pluginName(ctx, cfg); err == nil {
			t.Fatal("Follow accepted an invalid name")
		}
		// The RPC succeeded; the name is what is wrong.
		attempts.check(t, answered(codes.OK))
	})
	t.Run("Follow", func(t *testing.T) {
		ctx, _ := logContext(t)
		path := filepath.Join(socketDir(t), "csi.sock")
		var attempts attemptLog
		cfg := testConfig(path)
		cfg.OnAttempt = attempts.observe
		clock := fakeClock(cfg)
		old := newFakeDriver(t, timed(cfg, func(_ context.Context, call int64) (*csi.GetPluginInfoResponse, error) {
			if call <= 2 {
				return nil, status.Error(codes.Unavailable, "not ready yet")
			}
			return &csi.GetPluginInfoResponse{Name: testDriverName}, nil
		}))
		old.serve(t, path)
		f := followAsync(t, ctx, cfg)
		poll.StepThrough(t, clock, driver.InitialBackoff)
		poll.StepThrough(t, clock, 2*driver.InitialBackoff)
		f.expect(t, reachable(testDriverName))
		attempts.check(t, answered(codes.Unavailable), answered(codes.Unavailable), answered(codes.OK))

		// No attempt while the socket is gone.
		old.stop(t, path)
		f.expect(t, gone)
		newFakeDriver(t, timed(cfg, func(_ context.Context, call int64) (*csi.GetPluginInfoResponse, error) {
			if call == 1 {
				return nil, status.Error(codes.Internal, "disk on fire")
			}
			return &csi.GetPluginInfoResponse{Name: testDriverName}, nil
		})).serveByRename(t, path)
		attempts.waitFor(t, 4)
		poll.StepThrough(t, clock, driver.InitialBackoff)
		f.expect(t, reachable(testDriverName))
		f.stop(t)
		attempts.check(t, answered(codes.Unavailable), answered(codes.Unavailable), answered(codes.OK),
			answered(codes.Internal), answered(codes.OK))
	})
}

// BenchmarkFollowRestart measures a driver restart as Follow sees it: from
// the removal of the socket to the report of the new driver.
func BenchmarkFollowRestart(b *testing.B) {
	path := filepath.Join(socketDir(b), "csi.sock")
	ctx := klog.NewContext(context.Background(), logr.Discard())
	current := newFakeDriver(b, answerName(testDriverName))
	current.serveByRename(b, path)
	f := followAsync(b, ctx, testConfig(path))
	f.expect(b, reachable(testDriverName))
	b.ReportAllocs()
	for b.Loop() {
		current.stop(b, path)
		current = newFakeDriver(b, answerName(testDriverName))
		current.serveByRename(b, path)
		f.expect(b, gone, reachable(testDriverName))
	}
}

// traced is a report of Follow's or, when file has a name, a file system
// event it handled.
type traced struct {
	event driver.Event
	file  fsnotify.Event
}

// nextReport returns the next report in trace, past file system events.
func nextReport(t testing.TB, trace <-chan traced) driver.Event {
	t.Helper()
	for {
		select {
		case got := <-trace:
			if got.file.Name == "" {
				return got.event
			}
		case <-time.After(testTimeout):
			t.Fatalf("no event after %v", testTimeout)
		}
	}
}

// attemptChannel makes cfg's OnAttempt send each attempt's code on the
// channel it returns, large enough that Follow never waits for the test.
func attemptChannel(cfg *driver.Config) <-chan codes.Code {
	attempts := make(chan codes.Code, 1000)
	cfg.OnAttempt = func(_ time.Duration, err error) { attempts <- status.Code(err) }
	return attempts
}

// awaitAttempt waits for the next attempt and checks its code.
func awaitAttempt(t testing.TB, attempts <-chan codes.Code, want codes.Code) {
	t.Helper()
	select {
	case got := <-attempts:
		if got != want {
			t.Fatalf("attempt ended with %v, want %v", got, want)
		}
	case <-time.After(testTimeout):
		t.Fatalf("no attempt after %v", testTimeout)
	}
}
