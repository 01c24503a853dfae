package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// pollInterval paces the checks of a socket when no file system event
// comes; events make the check at once.
const pollInterval = time.Millisecond

// socketWaiter tells when a Unix socket accepts connections at its path.
// It watches the socket's directory with inotify and tries to connect after
// every event there (and every pollInterval in case one is missed), so it
// sees a socket created, linked or renamed into place within the time it
// takes to deliver the event and to connect. It must be created before the
// action that is timed, so that no event is lost.
type socketWaiter struct {
	path  string
	watch *fsnotify.Watcher
}

func newSocketWaiter(path string) (*socketWaiter, error) {
	watch, err := fsnotify.NewBufferedWatcher(1024)
	if err != nil {
		return nil, err
	}
	if err := watch.Add(filepath.Dir(path)); err != nil {
		_ = watch.Close()
		return nil, err
	}
	return &socketWaiter{path: path, watch: watch}, nil
}

func (w *socketWaiter) Close() { _ = w.watch.Close() }

// wait returns the time at which a connection to the socket was accepted.
func (w *socketWaiter) wait(ctx context.Context, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		if accepts(w.path) {
			return time.Now(), nil
		}
		select {
		case <-w.watch.Events:
		case err := <-w.watch.Errors:
			return time.Time{}, fmt.Errorf("watching %s: %w", filepath.Dir(w.path), err)
		case <-ticker.C:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for %s to accept connections: %w", w.path, ctx.Err())
		}
	}
}

// accepts tells whether a Unix socket at path accepts a connection now.
func accepts(path string) bool {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// measureResolution times the harness itself: a socket that is already
// listening under another name is renamed into place, as in the driver
// figure, and the time until the waiter sees it accept is the error every
// other figure may carry.
func measureResolution(ctx context.Context, runs int) (durations, error) {
	var sample durations
	for range runs {
		d, err := resolutionOnce(ctx)
		if err != nil {
			return nil, err
		}
		sample = append(sample, d)
	}
	return sample, nil
}

func resolutionOnce(ctx context.Context) (time.Duration, error) {
	dir, err := os.MkdirTemp("", "rb")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	hidden, path := filepath.Join(dir, ".s"), filepath.Join(dir, "s")
	l, err := net.Listen("unix", hidden)
	if err != nil {
		return 0, err
	}
	defer l.Close()
	waiter, err := newSocketWaiter(path)
	if err != nil {
		return 0, err
	}
	defer waiter.Close()
	start := time.Now()
	if err := os.Rename(hidden, path); err != nil {
		return 0, err
	}
	seen, err := waiter.wait(ctx, 10*time.Second)
	return seen.Sub(start), err
}
