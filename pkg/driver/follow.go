package driver

import (
	"context"
	"errors"
	"os"
	"time"

	"k8s.io/klog/v2"
)

// Event is a change of the CSI driver seen by Follow.
type Event struct {
	// Name is the driver's name, valid (see ValidateName), when Reachable;
	// "" otherwise.
	Name string
	// Reachable is true once the driver answered GetPluginInfo on its
	// socket, false once that socket is gone.
	Reachable bool
}

// Follow finds the CSI driver as PluginName does, waiting as long as it
// takes, reports it with report, then keeps watching the driver's socket to
// follow driver restarts:
//
//   - when the socket is removed or renamed away, it reports Reachable
//     false, and makes no attempt until a socket is there again;
//   - when a socket is created at the path (or renamed into place, over the
//     old one or not), it asks GetPluginInfo again with the same retries as
//     at start-up, and reports the name, the same or a new one, with
//     Reachable true. Until then the previous event stands: a replaced
//     socket whose driver is not ready yet still counts as reachable.
//
// The first event, once the driver is found, is like the later ones: Name
// set and Reachable true. Every re-created socket is reported once its
// driver answers, even when nothing changed for the caller; one re-created
// while an attempt is under way may be reported twice. A socket removed
// and re-created in quick succession is reported as unreachable, then as
// reachable again, in that order.
//
// Follow learns of the socket from file system events on its directory (on
// the deepest existing ancestor while the directory is missing, as
// PluginName does), not from polling, and keeps no connection to the driver
// between attempts. A driver that dies and leaves its socket file behind is
// therefore not noticed until the socket is removed or re-created. If the
// socket cannot be watched (no inotify instance or watch left) or the watch
// is lost without an event (an unmount), Follow falls back to looking at the
// socket every cfg.MaxBackoff; such a look sees a replaced socket only if
// the new one has another inode or modification time.
//
// report is called on Follow's goroutine, one event at a time; Follow waits
// for it, so it should not block. A nil report is allowed.
//
// Follow returns nil once ctx is done, whether or not the driver was found:
// stopping is not a failure. Otherwise it returns only on a fatal error: a
// driver without the Identity service, or an invalid name, at start-up or
// after a restart.
//
// It logs at level 0 what PluginName logs while searching, and once per
// change: "CSI driver socket removed", then "CSI driver is back" or, with
// both names, "CSI driver name changed".
func Follow(ctx context.Context, cfg Config, report func(Event)) error {
	cfg = cfg.withDefaults()
	path := cfg.Address.Path
	if path == "" {
		return errors.New("no CSI driver address given")
	}
	if report == nil {
		report = func(Event) {}
	}
	logger := klog.FromContext(ctx)
	watcher := newSocketWatcher(logger, path)
	defer watcher.Close()
	// Watch before the first attempt: a socket removed between the attempt
	// and the start of the watch would go unnoticed.
	watcher.start()

	f := follower{
		cfg:     cfg,
		logger:  logger,
		watcher: watcher,
		search:  search{cfg: cfg, logger: logger, watcher: watcher, following: true},
		report:  report,
	}
	err := f.run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// follower is the state of Follow.
type follower struct {
	cfg     Config
	logger  klog.Logger
	watcher *socketWatcher
	search  search
	report  func(Event)

	name      string // the name found last, "" before the first
	reachable bool   // as last reported
}

// run alternates between searching for the driver, watching its socket
// while it is there, and waiting for a socket while there is none.
func (f *follower) run(ctx context.Context) error {
	for {
		name, socket, err := f.search.run(ctx)
		if errors.Is(err, errSocketRemoved) {
			f.lost()
			if err := f.waitForSocket(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		f.found(name)

		gone, err := f.watchSocket(ctx, socket)
		if err != nil {
			return err
		}
		if gone {
			f.lost()
			if err := f.waitForSocket(ctx); err != nil {
				return err
			}
		}
		f.logger.V(4).Info("CSI driver socket created", "path", f.cfg.Address.Path)
	}
}

// found reports the driver found after a search.
func (f *follower) found(name string) {
	path := f.cfg.Address.Path
	switch f.name {
	case "":
		f.logger.Info("Found the CSI driver", "driverName", name, "path", path)
	case name:
		f.logger.Info("CSI driver is back", "driverName", name, "path", path)
	default:
		f.logger.Info("CSI driver name changed", "oldName", f.name, "newName", name, "path", path)
	}
	f.name, f.reachable = name, true
	f.report(Event{Name: name, Reachable: true})
}

// lost reports the socket gone, if it was not already.
func (f *follower) lost() {
	if !f.reachable {
		// Gone before its driver answered: nothing was reported.
		f.logger.V(4).Info("CSI driver socket removed", "path", f.cfg.Address.Path)
		return
	}
	f.logger.Info("CSI driver socket removed", "driverName", f.name, "path", f.cfg.Address.Path)
	f.reachable = false
	f.report(Event{})
}

// watchSocket waits while the driver keeps its socket. It returns gone true
// when the socket is removed, false when it is replaced.
func (f *follower) watchSocket(ctx context.Context, socket os.FileInfo) (gone bool, err error) {
	for {
		change, err := f.watcher.next(ctx, time.Now().Add(f.cfg.MaxBackoff))
		if err != nil {
			return false, err
		}
		if change == socketUnknown || change == noChange && !f.watcher.watching() {
			change = f.look(socket)
		}
		switch change {
		case socketCreated:
			return false, nil
		case socketRemoved:
			return true, nil
		}
	}
}

// waitForSocket waits, without attempts, until a socket is created.
func (f *follower) waitForSocket(ctx context.Context) error {
	for {
		change, err := f.watcher.next(ctx, time.Now().Add(f.cfg.MaxBackoff))
		if err != nil {
			return err
		}
		if change == socketUnknown || change == noChange && !f.watcher.watching() {
			change = f.look(nil)
		}
		if change == socketCreated {
			return nil
		}
	}
}

// look tells from the file system what may have happened to the socket
// while events could not say: compared to known (nil for none), it is gone,
// another file, or unchanged as far as can be told.
func (f *follower) look(known os.FileInfo) socketChange {
	info, err := os.Lstat(f.cfg.Address.Path)
	switch {
	case err != nil:
		return socketRemoved
	case known == nil || !os.SameFile(known, info) || !known.ModTime().Equal(info.ModTime()):
		return socketCreated
	default:
		return noChange
	}
}
