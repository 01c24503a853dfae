package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

// socketWatcher tells the retry loop when the driver socket is created, so
// that the next attempt is made at once instead of at the end of a backoff.
//
// It watches the socket's directory or, while that does not exist yet, its
// deepest existing ancestor, moving down as directories appear. It never
// replaces the backoff timer, only cuts it short: if watching is impossible
// (no inotify instances or watches left, no permission) or a watch is lost
// without an event (an unmount), attempts still happen at the backoff pace.
type socketWatcher struct {
	logger klog.Logger
	socket string // absolute and clean, to compare with event names

	notify  *fsnotify.Watcher // nil when watching is impossible
	watched string            // directory being watched, "" for none

	reportedFailure bool
}

func newSocketWatcher(logger klog.Logger, socketPath string) *socketWatcher {
	w := &socketWatcher{logger: logger}
	socket, err := filepath.Abs(socketPath)
	if err != nil {
		w.reportFailure(err)
		return w
	}
	w.socket = socket
	notify, err := fsnotify.NewWatcher()
	if err != nil {
		w.reportFailure(err)
		return w
	}
	w.notify = notify
	w.rearm()
	return w
}

// Close stops watching. It is safe to call on a watcher that failed to start.
func (w *socketWatcher) Close() {
	if w.notify != nil {
		_ = w.notify.Close()
	}
}

// reportFailure logs, once, that the socket cannot be watched.
func (w *socketWatcher) reportFailure(err error) {
	if w.reportedFailure {
		w.logger.V(4).Info("Cannot watch for the CSI driver socket", "path", w.socket, "err", err)
		return
	}
	w.reportedFailure = true
	w.logger.Info("Cannot watch for the CSI driver socket; retrying on a timer only", "path", w.socket, "err", err)
}

// rearm moves the watch to the deepest existing directory on the way to the
// socket. It reports whether the watch moved: the socket may then have been
// created before the new watch was in place, so the caller should look.
func (w *socketWatcher) rearm() bool {
	moved := false
	// Repeat until stable: a directory created while the watch was being
	// moved produced no event for us.
	for range 32 {
		dir := deepestExistingDir(filepath.Dir(w.socket))
		if dir == w.watched {
			return moved
		}
		// Add the new watch before dropping the old one, so no event falls
		// between the two.
		if err := w.notify.Add(dir); err != nil {
			w.reportFailure(err)
			return moved
		}
		if w.watched != "" {
			_ = w.notify.Remove(w.watched) // may be gone already with its directory
		}
		w.logger.V(4).Info("Watching for the CSI driver socket", "directory", dir, "path", w.socket)
		w.watched = dir
		moved = true
	}
	return moved
}

func deepestExistingDir(dir string) string {
	for {
		if info, err := os.Stat(dir); err == nil && info.IsDir() {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
}

// wait returns after delay, or earlier with woken true when the socket (or a
// directory on the way to it) was created. It returns ctx's error once ctx is
// done.
func (w *socketWatcher) wait(ctx context.Context, delay time.Duration) (woken bool, err error) {
	timer := time.NewTimer(delay)
	defer timer.Stop()
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w.notify != nil {
		events, errs = w.notify.Events, w.notify.Errors
	}
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-timer.C:
			return false, nil
		case event, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if w.handle(event) {
				return true, nil
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			w.logger.V(4).Info("Error while watching for the CSI driver socket", "err", err)
			// Lost events may have included the socket's creation.
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				return true, nil
			}
		}
	}
}

// handle reports whether event calls for an attempt now.
func (w *socketWatcher) handle(event fsnotify.Event) bool {
	w.logger.V(5).Info("File system event", "event", event.String())
	if event.Name == w.socket && event.Has(fsnotify.Create) {
		return true
	}
	if event.Name == w.watched && (event.Has(fsnotify.Remove) || event.Has(fsnotify.Rename)) {
		// The kernel dropped the watch with the directory.
		w.watched = ""
	}
	if event.Has(fsnotify.Create) || w.watched == "" {
		return w.rearm()
	}
	return false
}
