package driver

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

// Event is a change of the CSI driver: Reachable with its valid Name, or not,
// with no name, once its socket is gone or it no longer answers.
type Event struct {
	Name      string
	Reachable bool
}

const DefaultTimeout = time.Second

// The start-up backoff doubles from initialBackoff up to maxBackoff, and
// starts over when the socket is created; maxBackoff also paces the looks
// at a socket that cannot be watched.
const (
	initialBackoff = 100 * time.Millisecond
	maxBackoff     = 5 * time.Second
)

// Config says how to reach the CSI driver; a zero duration is the default.
type Config struct {
	Address Address // from ParseAddress, which refuses an empty path
	// Timeout bounds each GetPluginInfo attempt and each connection to hold.
	Timeout time.Duration
	// OnAttempt gets each GetPluginInfo attempt's gRPC error. Follow waits
	// for it: keep it as cheap as updating a metric.
	OnAttempt func(duration time.Duration, err error)
	// Clock does not time the calls' own timeouts.
	Clock clock.Clock

	hooks watchHooks
}

// settleTime is how long a lost connection waits for the file system to
// report its socket removed or replaced, before the driver is asked again.
const settleTime = 100 * time.Millisecond

// Follow finds the CSI driver, however long it takes, and follows its
// restarts, calling report on its own goroutine. A socket removed and
// re-created in quick succession is reported unreachable, then reachable.
// While the driver answers, Follow holds an idle connection to it: a dead
// driver leaves its socket file behind, and the connection's end is the event.
// It returns nil once ctx is done, or else a fatal error: no Identity service,
// or an invalid name.
func Follow(ctx context.Context, cfg Config, report func(Event)) error {
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.Clock = cmp.Or[clock.Clock](cfg.Clock, clock.RealClock{})
	f := follower{cfg: cfg, logger: klog.FromContext(ctx), report: report}
	// Watch before the first attempt: a socket removed between the attempt
	// and the start of the watch would go unnoticed.
	f.watcher = newSocketWatcher(f.logger, cfg.Clock, cfg.Address.Path, cfg.hooks)
	defer f.watcher.close()
	err := f.run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

type follower struct {
	cfg     Config
	logger  klog.Logger
	watcher *socketWatcher
	report  func(Event)

	name      string // the name found last, "" before the first
	reachable bool   // as last reported
}

// run alternates between searching for the driver, watching its socket
// while it answers, and waiting for a socket while there is none.
func (f *follower) run(ctx context.Context) error {
	for {
		found, err := f.search(ctx)
		change := socketRemoved
		if err == nil {
			f.found(found.name)
			change, err = f.watchSocket(ctx, found)
		} else if errors.Is(err, errSocketRemoved) {
			err = nil
		}
		switch {
		case err != nil:
			return err
		case change == noChange:
			f.unreachable("The CSI driver no longer answers: its connection was closed, and a new one cannot be made")
		case change == socketRemoved:
			f.unreachable("CSI driver socket removed")
			if err := f.waitForSocket(ctx); err != nil {
				return err
			}
		}
		// After socketCreated, the new socket is searched at once.
	}
}

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

// unreachable reports the driver unreachable, if it was not already.
func (f *follower) unreachable(why string) {
	if !f.reachable {
		// Gone before its driver answered: nothing was reported.
		f.logger.V(4).Info(why, "path", f.cfg.Address.Path)
		return
	}
	f.logger.Info(why, "driverName", f.name, "path", f.cfg.Address.Path)
	f.reachable = false
	f.report(Event{})
}

// watchSocket waits while the driver keeps its socket and answers on it, and
// returns what ended that. A connection the driver closed as idle is made again.
func (f *follower) watchSocket(ctx context.Context, found answer) (socketChange, error) {
	socket, conn := found.socket, found.conn
	for {
		held, cancel := context.WithCancelCause(ctx)
		var connected atomic.Bool
		go func(conn *grpc.ClientConn) { cancel(f.hold(held, conn, &connected)) }(conn)
		conn = nil
		var change socketChange
		var err error
		for change == noChange && err == nil {
			change, err = f.watcher.next(held, f.idleDeadline(), socket)
		}
		cancel(nil)
		if change != noChange || ctx.Err() != nil {
			return change, ctx.Err()
		}

		// The connection ended. A driver that stops closes its connections,
		// then its socket goes: give the file system a moment to say so.
		deadline := f.cfg.Clock.Now().Add(settleTime)
		for {
			change, err = f.watcher.next(ctx, deadline, socket)
			if err != nil || change != noChange {
				return change, err
			}
			if f.watcher.look(socket) == noChange {
				break
			}
			// The socket changed too: its events, not delivered yet, say how.
			deadline = f.idleDeadline()
		}
		if !connected.Load() {
			return noChange, nil
		}
		f.logger.V(4).Info("The connection held to the CSI driver ended; connecting again",
			"path", f.cfg.Address.Path, "reason", context.Cause(held))
	}
}

// hold holds conn, or a new connection when conn is nil, which the kernel
// closes when the driver dies. It returns nil once ctx is done.
func (f *follower) hold(ctx context.Context, conn *grpc.ClientConn, connected *atomic.Bool) error {
	setConnected := func() error {
		connected.Store(true)
		return nil
	}
	if conn != nil {
		return unixgrpc.HoldClient(ctx, conn, f.cfg.Timeout, setConnected)
	}
	return unixgrpc.Hold(ctx, f.cfg.Address.Path, f.cfg.Timeout, setConnected)
}

// idleDeadline is when a wait for the socket's events looks anyway: never
// while the directory is watched, after maxBackoff otherwise.
func (f *follower) idleDeadline() time.Time {
	if f.watcher.watching() {
		return time.Time{}
	}
	return f.cfg.Clock.Now().Add(maxBackoff)
}

// waitForSocket waits, without attempts, until a socket is created. Its
// look every maxBackoff also puts back a watch lost without an event.
func (f *follower) waitForSocket(ctx context.Context) error {
	for {
		change, err := f.watcher.next(ctx, f.cfg.Clock.Now().Add(maxBackoff), sockfile.ID{})
		if err != nil || change == socketCreated {
			return err
		}
	}
}
