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
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

type socketChange int

const (
	noChange      socketChange = iota
	socketCreated              // created or renamed into place, over an old one or not
	socketRemoved              // removed or renamed away
)

// socketWatcher only cuts waits short: where inotify is impossible, a look at
// each wait's deadline takes its place. It watches the deepest existing
// ancestor of the socket; a watch lost without an event (a mount over the
// directory) is told by the directory's identity at the next deadline.
type socketWatcher struct {
	logger  klog.Logger
	clock   clock.Clock
	path    string            // absolute and clean, to compare with event names
	notify  *fsnotify.Watcher // nil when watching is impossible
	dir     string            // the directory watched, "" for none
	dirInfo os.FileInfo       // that directory when the watch was added
	failed  bool              // a failure to watch was logged at level 0
	hooks   watchHooks
}

// watchHooks are for tests, to synchronise on what the watcher does: each
// file system event it handles, and each directory it watches from then on.
type watchHooks struct {
	fileEvent func(fsnotify.Event)
	watching  func(dir string)
}

func newSocketWatcher(logger klog.Logger, clk clock.Clock, path string, hooks watchHooks) *socketWatcher {
	w := &socketWatcher{logger: logger, clock: clk, path: path, hooks: hooks}
	abs, err := filepath.Abs(path)
	if err == nil {
		w.path = abs
		w.notify, err = fsnotify.NewWatcher()
	}
	if err != nil {
		w.failure(err)
		return w
	}
	w.rewatch()
	return w
}

func (w *socketWatcher) close() {
	if w.notify != nil {
		_ = w.notify.Close()
	}
}

func (w *socketWatcher) watching() bool {
	return w.dir != ""
}

func (w *socketWatcher) failure(err error) {
	if w.failed {
		w.logger.V(4).Info("Cannot watch for the CSI driver socket", "path", w.path, "err", err)
		return
	}
	w.failed = true
	w.logger.Info("Cannot watch for the CSI driver socket; retrying on a timer only", "path", w.path, "err", err)
}

// rewatch puts the watch on the deepest existing directory on the way to
// the socket, and reports whether it moved: the socket may then have
// changed unseen.
func (w *socketWatcher) rewatch() bool {
	moved := false
	// Until stable: a directory created while the watch moved sent no event.
	for w.notify != nil {
		dir, info := deepestDir(w.path)
		// The kernel drops a watch with its directory, whose inode a new
		// directory may reuse at once: fsnotify's list tells.
		if dir == w.dir && os.SameFile(info, w.dirInfo) && slices.Contains(w.notify.WatchList(), dir) {
			return moved
		}
		if w.dir != "" {
			_ = w.notify.Remove(w.dir) // may be gone already with its directory
		}
		w.dir, moved = "", true
		if err := w.notify.Add(dir); err != nil {
			w.failure(err)
			return moved
		}
		w.logger.V(4).Info("Watching for the CSI driver socket", "directory", dir, "path", w.path)
		w.dir, w.dirInfo = dir, info
		if w.hooks.watching != nil {
			w.hooks.watching(dir)
		}
	}
	return moved
}

func deepestDir(path string) (string, os.FileInfo) {
	dir := filepath.Dir(path)
	for {
		info, err := os.Stat(dir)
		if err == nil && info.IsDir() || dir == filepath.Dir(dir) {
			return dir, info
		}
		dir = filepath.Dir(dir)
	}
}

// next waits for the socket to be created or removed, or noChange at deadline
// (zero for none). Where events cannot tell, a look compared with known does.
func (w *socketWatcher) next(ctx context.Context, deadline time.Time, known sockfile.ID) (socketChange, error) {
	var expired <-chan time.Time
	if !deadline.IsZero() {
		timer := w.clock.NewTimer(deadline.Sub(w.clock.Now()))
		defer timer.Stop()
		expired = timer.C()
	}
	// fsnotify closes its channels only when it is closed, after Follow.
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
			if w.rewatch() || !w.watching() {
				return w.look(known), nil
			}
			return noChange, nil
		case event := <-events:
			w.logger.V(5).Info("File system event", "event", event.String())
			if w.hooks.fileEvent != nil {
				w.hooks.fileEvent(event)
			}
			switch {
			case event.Name == w.path && event.Has(fsnotify.Create):
				return socketCreated, nil
			case event.Name == w.path && (event.Has(fsnotify.Remove) || event.Has(fsnotify.Rename)):
				return socketRemoved, nil
			case (event.Has(fsnotify.Create) || event.Name == w.dir) && w.rewatch():
				// A directory on the way was created, or the watched one went.
				if change := w.look(known); change != noChange {
					return change, nil
				}
			}
		case err := <-errs:
			w.logger.V(4).Info("Error while watching for the CSI driver socket", "err", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				if change := w.look(known); change != noChange {
					return change, nil
				}
			}
		}
	}
}

// look tells from the file system what happened to the socket known.
func (w *socketWatcher) look(known sockfile.ID) socketChange {
	switch now := lstatSocket(w.path); {
	case now == known:
		return noChange
	case now == sockfile.ID{}:
		return socketRemoved
	}
	return socketCreated
}

// lstatSocket: a file whose device and inode cannot be read (gone meanwhile,
// or on Windows) is told by its modification time alone.
func lstatSocket(path string) sockfile.ID {
	if id, _, err := sockfile.Lstat(path); err == nil {
		return id
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return sockfile.ID{}
	}
	return sockfile.ID{Modified: fi.ModTime().UnixNano()}
}
