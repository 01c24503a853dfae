package driver

import (
	"context"
	"errors"
	"os"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
)

// Event is a change of the CSI driver seen by Follow.
type Event struct {
	// Name is the driver's name, valid (see ValidateName), when Reachable;
	// "" otherwise.
	Name string
	// Reachable is true once the driver answered GetPluginInfo on its
	// socket, false once that socket is gone or the driver no longer
	// answers on it.
	Reachable bool
}

// Follow finds the CSI driver as PluginName does, however long it takes,
// and then follows its restarts, calling report (on Follow's goroutine,
// one event at a time; nil is allowed) with Reachable true and the name
// each time a socket at the path answers GetPluginInfo, the first time
// included, and with Reachable false when the socket is removed or the
// driver behind it stops answering. A socket removed and re-created in
// quick succession is reported as unreachable, then reachable.
//
// It learns of the socket from inotify on its directory and, while the
// driver answers, from a connection held to it that carries no calls (a
// dead driver leaves its socket file behind; the end of the connection is
// the event). Where the directory cannot be watched, it looks at the
// socket every cfg.MaxBackoff.
//
// Follow returns nil once ctx is done, found or not. Otherwise it returns
// only on a fatal error: a driver without the Identity service, or an
// invalid name.
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

		outcome, err := f.watchSocket(ctx, socket)
		if err != nil {
			return err
		}
		switch outcome {
		case socketGone:
			f.lost()
			if err := f.waitForSocket(ctx); err != nil {
				return err
			}
			f.logger.V(4).Info("CSI driver socket created", "path", f.cfg.Address.Path)
		case driverSilent:
			// Searched for again, with the retries of start-up, which also
			// follow the socket's events.
			f.silent()
		default:
			f.logger.V(4).Info("CSI driver socket created", "path", f.cfg.Address.Path)
		}
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

// silent reports a driver that no longer answers on its socket.
func (f *follower) silent() {
	f.logger.Info("The CSI driver no longer answers: its connection was closed, and a new one cannot be made", "driverName", f.name, "path", f.cfg.Address.Path)
	f.reachable = false
	f.report(Event{})
}

// watchOutcome is how watchSocket ended.
type watchOutcome int

const (
	socketReplaced watchOutcome = iota // a new socket is at the path
	socketGone                         // the socket was removed
	driverSilent                       // the socket stays, the driver does not answer
)

// settleTime is how long a lost connection to the driver waits for the
// file system to report its socket removed or replaced, before the driver
// is asked again whether it answers.
const settleTime = 100 * time.Millisecond

// errConnectionLost ends a watch: the connection held to the driver ended.
var errConnectionLost = errors.New("the connection to the CSI driver ended")

// watchSocket waits while the driver keeps its socket and answers on it.
// It holds a connection to the driver: a driver that dies leaves its
// socket file behind, and only that connection tells. A connection that
// ends while the driver still answers (the driver closed an idle one) is
// made again.
func (f *follower) watchSocket(ctx context.Context, socket os.FileInfo) (watchOutcome, error) {
	for {
		outcome, err := f.watchConnected(ctx, socket)
		if !errors.Is(err, errConnectionLost) {
			return outcome, err
		}
		f.logger.V(4).Info("The connection held to the CSI driver ended; connecting again", "path", f.cfg.Address.Path)
	}
}

// watchConnected is watchSocket with one connection; it ends with
// errConnectionLost when that connection ends while the driver answers.
func (f *follower) watchConnected(ctx context.Context, socket os.FileInfo) (watchOutcome, error) {
	held, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	connected := make(chan struct{})
	go func() {
		err := unixgrpc.Hold(held, f.cfg.Address.Path, f.cfg.Timeout, func() error {
			close(connected)
			return nil
		})
		if err != nil {
			cancel(err)
		}
	}()
	waiting := held // while the connection holds
	for {
		change, err := f.watcher.next(waiting, f.connectedDeadline())
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			if f.look(socket) == noChange {
				// A driver that stops closes its connections, then its
				// socket goes: give the file system a moment to say so.
				change, err := f.watcher.next(ctx, time.Now().Add(settleTime))
				if err != nil {
					return 0, err
				}
				if outcome, ended := f.ended(change, socket); ended {
					return outcome, nil
				}
			}
			if f.look(socket) != noChange {
				// The socket was removed or replaced too: its events,
				// perhaps not delivered yet, say how. Without the
				// connection from now on.
				waiting = ctx
				continue
			}
			select {
			case <-connected:
				return 0, errConnectionLost
			default:
				return driverSilent, nil
			}
		}
		if outcome, ended := f.ended(change, socket); ended {
			return outcome, nil
		}
	}
}

// ended tells whether a change ends the watch of socket, and how; a change
// the watch could not tell is looked at on the file system.
func (f *follower) ended(change socketChange, socket os.FileInfo) (watchOutcome, bool) {
	if change == socketUnknown || change == noChange && !f.watcher.watching() {
		change = f.look(socket)
	}
	switch change {
	case socketCreated:
		return socketReplaced, true
	case socketRemoved:
		return socketGone, true
	}
	return 0, false
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

// connectedDeadline is when a wait for a change of the socket, while a
// connection to the driver is held, looks at the file system anyway:
// never while the directory is watched. The connection ends when the
// driver does, and the watch reports a new socket; a watch lost without an
// event (its file system unmounted) is put back at the next look, when the
// connection ends. Without a watch, after MaxBackoff.
func (f *follower) connectedDeadline() time.Time {
	if f.watcher.watching() {
		return time.Time{}
	}
	return time.Now().Add(f.cfg.MaxBackoff)
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
