package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

// socketChange is what the watcher saw happen to the driver socket.
type socketChange int

const (
	// noChange: the wait ended with nothing seen.
	noChange socketChange = iota
	// socketCreated: the socket was created or renamed into place, over an
	// old one or not.
	socketCreated
	// socketRemoved: the socket was removed or renamed away.
	socketRemoved
	// socketUnknown: the socket may have been created or removed unseen
	// (events were lost, or the watch had to move): look at the file system.
	socketUnknown
)

// socketWatcher tells the retry loop when the driver socket is created, so
// that the next attempt is made at once instead of at the end of a backoff,
// and tells Follow when the socket is removed or replaced.
//
// It watches the socket's directory or, while that does not exist yet, its
// deepest existing ancestor, moving down as directories appear and back up
// when the directory is removed. It never replaces the backoff timer, only
// cuts it short: if watching is impossible (no inotify instances or watches
// left, no permission) attempts still happen at the backoff pace, and a watch
// lost without an event (an unmount, or a file system mounted over the
// directory) is put back when a wait with a deadline times out.
type socketWatcher struct {
	logger klog.Logger
	socket string // absolute and clean, to compare with event names
	absErr error  // why socket could not be made absolute

	started bool
	notify  *fsnotify.Watcher // nil when watching is impossible
	watched string            // directory being watched, "" for none
	// watchedDir is the directory watched, as it was when the watch was
	// added: another file system mounted over it, or its own unmounted,
	// puts another directory at the same path.
	watchedDir os.FileInfo

	reportedFailure bool
}

// newSocketWatcher prepares a watcher; it watches nothing until start.
func newSocketWatcher(logger klog.Logger, socketPath string) *socketWatcher {
	w := &socketWatcher{logger: logger, socket: socketPath}
	if socket, err := filepath.Abs(socketPath); err != nil {
		w.absErr = err
	} else {
		w.socket = socket
	}
	return w
}

// start begins watching, on the first call only, and reports whether this
// call began it.
func (w *socketWatcher) start() bool {
	if w.started {
		return false
	}
	w.started = true
	if w.absErr != nil {
		w.reportFailure(w.absErr)
		return true
	}
	notify, err := fsnotify.NewWatcher()
	if err != nil {
		w.reportFailure(err)
		return true
	}
	w.notify = notify
	w.rearm()
	return true
}

// watching reports whether events can be expected: if not, only a look at
// the file system tells what happened to the socket.
func (w *socketWatcher) watching() bool {
	return w.notify != nil && w.watched != ""
}

// Close stops watching. It is safe to call on a watcher that was never
// started or failed to start.
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
// created (or removed) before the new watch was in place, so the caller
// should look.
func (w *socketWatcher) rearm() bool {
	if w.notify == nil {
		return false
	}
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
		w.watchedDir, _ = os.Stat(dir)
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

// next returns the first change seen before deadline, or noChange at the
// deadline; a zero deadline is none. It returns ctx's error once ctx is
// done.
func (w *socketWatcher) next(ctx context.Context, deadline time.Time) (socketChange, error) {
	var expired <-chan time.Time
	if !deadline.IsZero() {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		expired = timer.C
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w.notify != nil {
		events, errs = w.notify.Events, w.notify.Errors
	}
	for {
		select {
		case <-ctx.Done():
			return noChange, ctx.Err()
		case <-expired:
			return w.restoreWatch(), nil
		case event, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if change := w.handle(event); change != noChange {
				return change, nil
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			w.logger.V(4).Info("Error while watching for the CSI driver socket", "err", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				return socketUnknown, nil
			}
		}
	}
}

// handle tells what event means for the socket.
func (w *socketWatcher) handle(event fsnotify.Event) socketChange {
	w.logger.V(5).Info("File system event", "event", event.String())
	if event.Name == w.socket {
		switch {
		case event.Has(fsnotify.Create):
			return socketCreated
		case event.Has(fsnotify.Remove) || event.Has(fsnotify.Rename):
			return socketRemoved
		}
	}
	if event.Name == w.watched && (event.Has(fsnotify.Remove) || event.Has(fsnotify.Rename)) {
		// The kernel dropped the watch with the directory.
		w.watched = ""
	}
	if (event.Has(fsnotify.Create) || w.watched == "") && w.rearm() {
		return socketUnknown
	}
	return noChange
}

// stillWatched tells whether the directory at the watched path is the one
// the watch was added to.
func (w *socketWatcher) stillWatched() bool {
	now, err := os.Stat(w.watched)
	return err == nil && w.watchedDir != nil && os.SameFile(now, w.watchedDir)
}

// restoreWatch puts back a watch that was lost without an event: the kernel
// drops it silently when its file system is unmounted. It returns
// socketUnknown when the watch moved.
func (w *socketWatcher) restoreWatch() socketChange {
	if w.notify == nil {
		return noChange
	}
	if w.watched != "" && (!slices.Contains(w.notify.WatchList(), w.watched) || !w.stillWatched()) {
		w.logger.V(4).Info("Lost the watch for the CSI driver socket", "directory", w.watched, "path", w.socket)
		_ = w.notify.Remove(w.watched) // fsnotify may not have seen the loss yet
		w.watched = ""
	}
	if w.watched == "" && w.rearm() {
		return socketUnknown
	}
	return noChange
}
