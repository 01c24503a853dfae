package driver_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/pkg/driver"
	"github.com/csi-registrar/node-driver-registrar/test/poll"
)

// boundSocket is a Unix socket bound to its path but not yet listening, as
// a driver's is between its bind and its listen: the file is there, and a
// connection is refused.
type boundSocket struct {
	fd   int
	path string
}

func bindSocket(t testing.TB, path string) *boundSocket {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		_ = unix.Close(fd)
		t.Fatal(err)
	}
	return &boundSocket{fd: fd, path: path}
}

// listen starts listening, and returns the socket as a listener.
func (s *boundSocket) listen() (net.Listener, error) {
	if err := unix.Listen(s.fd, 128); err != nil {
		return nil, err
	}
	file := os.NewFile(uintptr(s.fd), s.path)
	defer file.Close()
	return net.FileListener(file)
}

// listenOnRefusal is an OnAttempt that makes bound listen once an attempt
// failed to connect to it, on Follow's goroutine, before Follow decides
// when to try again: the driver listens right after the refusal, which is
// the race of a driver's start at its worst. It records when.
type listenOnRefusal struct {
	t      testing.TB
	driver *fakeDriver

	mu       sync.Mutex
	bound    *boundSocket
	listened time.Time
	codes    []codes.Code
}

func (l *listenOnRefusal) observe(_ time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.codes = append(l.codes, status.Code(err))
	if l.bound != nil && status.Code(err) == codes.Unavailable {
		listener, err := l.bound.listen()
		l.bound, l.listened = nil, time.Now()
		if err != nil {
			l.t.Error(err) // on Follow's goroutine: no Fatal
			return
		}
		l.driver.start(l.t, listener)
	}
}

// arm binds a socket at path, to listen at the next refusal, and returns
// the driver that will serve on it. It binds holding the lock: the
// socket's creation may bring an attempt at once, whose refusal must find
// the socket armed.
func (l *listenOnRefusal) arm(path string) *fakeDriver {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.driver = newFakeDriver(l.t, answerName(testDriverName))
	l.bound, l.listened = bindSocket(l.t, path), time.Time{}
	return l.driver
}

func (l *listenOnRefusal) listenedAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.listened
}

// A connection refused by a socket file that is there is, at first, a
// driver about to listen: Follow asks again soon, not after a backoff step.
// The test steps the clock through the poll's wait only, far shorter than
// the backoff's first: only that brings the second attempt.
func TestFollowFindsADriverThatListensAfterARefusal(t *testing.T) {
	path := filepath.Join(socketDir(t), "csi.sock")
	ctx, _ := logContext(t)
	l := &listenOnRefusal{t: t}
	l.arm(path)
	cfg := testConfig(path)
	clock := fakeClock(cfg)
	cfg.OnAttempt = l.observe
	f := followAsync(t, ctx, cfg)
	poll.StepThrough(t, clock, driver.ListenPoll)
	f.expect(t, reachable(testDriverName))
	f.stop(t)
	if want := []codes.Code{codes.Unavailable, codes.OK}; !slices.Equal(l.codes, want) {
		t.Errorf("attempts %v, want %v: refused, then found", l.codes, want)
	}

	// The same after a restart, the new socket created where the old was.
	l = &listenOnRefusal{t: t}
	cfg.OnAttempt = l.observe
	f = followAsync(t, ctx, cfg)
	f.expect(t, reachable(testDriverName))
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	f.expect(t, gone)
	l.arm(path)
	poll.Until(t, "the refused driver listens", func() bool { return !l.listenedAt().IsZero() })
	poll.StepThrough(t, clock, driver.ListenPoll)
	f.expect(t, reachable(testDriverName))
	f.stop(t)
}

// BenchmarkFindListeningDriver measures, with the default backoff, the time
// from a driver's listen to Follow's report of it, at each restart of the
// driver, in two starts: "after a refusal" listens right after Follow's
// attempt on its bound socket was refused (the worst case of the race);
// "net.Listen" binds and listens at once, as a Go driver does, racing the
// attempt that the socket's creation brings. Reported: the median, the
// 99th percentile and the slowest of the run, and the share of restarts
// found more than 20 ms after the listen, and of restarts where Follow
// paused 100 ms (the first backoff step) or more between two attempts.
func BenchmarkFindListeningDriver(b *testing.B) {
	b.Run("after a refusal", func(b *testing.B) {
		l := &listenOnRefusal{t: b}
		benchmarkFind(b, l.observe, l.arm, l.listenedAt)
	})
	b.Run("net.Listen", func(b *testing.B) {
		var listened time.Time
		benchmarkFind(b, nil, func(path string) *fakeDriver {
			d := newFakeDriver(b, answerName(testDriverName))
			listener, err := net.Listen("unix", path)
			listened = time.Now()
			if err != nil {
				b.Fatal(err)
			}
			d.start(b, listener)
			return d
		}, func() time.Time { return listened })
	})
}

// benchmarkFind follows a driver that start starts at a path, then stops it,
// removes its socket and starts another, b.N times; listened tells when the
// driver last started listening.
func benchmarkFind(b *testing.B, onAttempt func(time.Duration, error), start func(path string) *fakeDriver, listened func() time.Time) {
	path := filepath.Join(socketDir(b), "csi.sock")
	ctx := klog.NewContext(context.Background(), logr.Discard())
	// The longest pause between two attempts of the current restart: the
	// first backoff step is 100 ms, and a timer never fires early.
	var mu sync.Mutex
	var lastEnd time.Time
	var longestPause time.Duration
	cfg := driver.Config{Address: driver.Address{Path: path}, OnAttempt: func(took time.Duration, err error) {
		now := time.Now()
		mu.Lock()
		if !lastEnd.IsZero() {
			longestPause = max(longestPause, now.Add(-took).Sub(lastEnd))
		}
		lastEnd = now
		mu.Unlock()
		if onAttempt != nil {
			onAttempt(took, err)
		}
	}}
	current := start(path)
	f := followAsync(b, ctx, cfg)
	f.expect(b, reachable(testDriverName))
	var took []time.Duration
	backedOff := 0
	for b.Loop() {
		current.stop(b, path)
		f.expect(b, gone)
		mu.Lock()
		lastEnd, longestPause = time.Time{}, 0
		mu.Unlock()
		current = start(path)
		f.expect(b, reachable(testDriverName))
		took = append(took, time.Since(listened()))
		mu.Lock()
		if longestPause >= driver.InitialBackoff {
			backedOff++
		}
		mu.Unlock()
	}
	slices.Sort(took)
	late := 0
	for _, d := range took {
		if d > 20*time.Millisecond {
			late++
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(took[len(took)/2]), "ms/p50")
	b.ReportMetric(ms(took[len(took)*99/100]), "ms/p99")
	b.ReportMetric(ms(took[len(took)-1]), "ms/max")
	b.ReportMetric(100*float64(late)/float64(len(took)), "%>20ms")
	b.ReportMetric(100*float64(backedOff)/float64(len(took)), "%paused>=100ms")
}
