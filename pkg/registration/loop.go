package registration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

// handshakeTimeout bounds how long a client of the registration socket may
// take to start speaking HTTP/2 (gRPC's own default is 120 s). kubelet and
// other instances of the registrar send their preface as soon as they are
// connected; a client that has not done so within this time is not one of
// them. gRPC's Stop and GracefulStop wait for the handshakes under way, so
// this is also how long a client that never speaks can hold the exit.
const handshakeTimeout = 2 * time.Second

// loop is Run's goroutine, the machine's driver, shaped like etcd raft's
// Node: it takes one event at a time, steps the machine through it (in
// handle, the only caller of step), and carries out the effects step
// returns. An effect's outcome is the next event: queued at once when the
// effect is done on the loop (a publication), or sent back on outcomes
// when it is a conversation with another process, which runs on a
// goroutine of its own. It owns the machine, the current publication and
// the goroutines that serve it.
type loop struct {
	s      *Server
	ctx    context.Context
	logger logr.Logger
	m      machine
	pub    *publication // nil while none is served
	// queue holds the outcomes of the effects done on the loop, taken
	// before any other event.
	queue []any
	// outcomes carries the outcome of the conversation that runs, if any
	// (m.conversing).
	outcomes chan any
	// spare is the receiving socket of a takeover that did not happen,
	// published by the next publication.
	spare *sockfile.Socket
	// retired counts the graceful stops of old publications.
	retired sync.WaitGroup
	// watch is the connection to the instance followed while standing
	// aside.
	watch *ownerWatch
	// gens counts the publications, for their generation.
	gens uint64
	// timer wakes the loop at the machine's next deadline, timerAt,
	// through fire; nil while none runs.
	timer   clock.Timer
	timerAt time.Time
	fire    <-chan time.Time
}

func (l *loop) run(watcher *fsnotify.Watcher) error {
	for {
		l.storeSnapshot()
		ev, err := l.next(watcher)
		if err == nil && ev != nil {
			err = l.handle(ev)
		}
		if err != nil || l.ctx.Err() != nil {
			// Observers see what ended the loop.
			l.storeSnapshot()
			return err
		}
	}
}

// next waits for the next event: an effect's outcome, the machine's timers
// that are due, or what the loop's sources said. nil: nothing for the
// machine (a report of the driver without a name, a stale watch, a stop).
func (l *loop) next(watcher *fsnotify.Watcher) (any, error) {
	now := l.s.cfg.Clock.Now()
	for t := range timers {
		if len(l.queue) == 0 && l.m.isDue(t, now) {
			l.queue = append(l.queue, fired{t}) // one at a time: it may start a conversation
		}
	}
	if len(l.queue) > 0 {
		ev := l.queue[0]
		l.queue = l.queue[1:]
		return ev, nil
	}
	l.arm(now)
	select {
	case <-l.ctx.Done():
		return nil, nil

	case outcome := <-l.outcomes:
		return l.outcomeEvent(outcome), nil

	case report := <-l.s.driver:
		return report, nil

	case report := <-l.s.csinode:
		return report, nil

	case ev := <-l.s.events:
		switch ev := ev.(type) {
		case *handoverCall:
			return handoverAsked{ev.gen, ev}, nil
		case watchLost:
			if l.watch != ev.watch {
				return nil, nil // a watch replaced meanwhile
			}
			l.watch = nil
			return ownerLost{}, nil
		}
		return ev, nil

	case event, ok := <-watcher.Events:
		if !ok {
			return nil, errors.New("the watch of the registration directory ended")
		}
		if event.Name == filepath.Clean(l.s.cfg.Dir) && event.Has(fsnotify.Remove|fsnotify.Rename) {
			return nil, fmt.Errorf("the registration directory %q was removed", l.s.cfg.Dir)
		}
		if l.m.watches(event.Name) {
			return pathChanged{}, nil
		}

	case err, ok := <-watcher.Errors:
		if !ok {
			return nil, errors.New("the watch of the registration directory ended")
		}
		// An overflow may have hidden a deletion: look at the path.
		l.logger.Info("Watch of the registration directory reported an error; checking the socket", "err", err)
		return pathChanged{}, nil

	case <-l.fire:
		// The timers due are queued by the next call.
		l.timer, l.timerAt, l.fire = nil, time.Time{}, nil
	}
	return nil, nil
}

// outcomeEvent turns a conversation's outcome into the machine's event; a
// socket it brought stays on the loop's side.
func (l *loop) outcomeEvent(outcome any) any {
	switch o := outcome.(type) {
	case tookOver:
		return l.adopt(o)
	case *sockfile.Socket:
		l.spare = o
		return notTaken{}
	case offered:
		if o.err == nil {
			// The socket is the new instance's: its file at the path must
			// never be removed from here (stepAside). The HandOver call
			// itself is in flight on this publication's server.
			l.logger.Info("Handed the registration socket over to a newer instance of the driver: kubelet's registration stays", "path", l.m.path)
		}
	case looked:
		if o.at.kind == atRefused || o.at.kind == atSilent {
			l.logger.V(2).Info("The socket at the path does not answer", "path", o.at.path, "err", o.at.Err)
		}
	}
	return outcome
}

// handle steps the machine through ev and carries out its effects. It is
// the only caller of step.
func (l *loop) handle(ev any) error {
	before := l.m
	effects := l.m.step(l.s.cfg.Clock.Now(), ev)
	l.logChange(ev, &before)
	for _, e := range effects {
		if err := l.do(e); err != nil {
			return err
		}
	}
	return nil
}

// do carries out one effect.
func (l *loop) do(e effect) error {
	switch e := e.(type) {
	case look:
		path, ours, owner := l.m.path, l.pub.file(), l.m.owner
		if e.purpose == lookClaim {
			path = SocketPath(l.s.cfg.Dir, l.m.claim)
		}
		l.converse(func() any {
			if e.purpose == lookClaim {
				for _, leftover := range sockfile.RemoveLeftovers(path, l.s.cfg.CheckTimeout) {
					l.logger.V(2).Info("Removed a hidden socket left by an earlier registrar", "path", leftover)
				}
			}
			return looked{lookAt(l.ctx, path, ours, owner, l.s.cfg.CheckTimeout, e.purpose == lookClaim), e.purpose}
		})
	case takeOver:
		l.converse(l.takeOver())
	case offer:
		l.converse(l.offer(e.call))
	case publish:
		return l.publish(e.reason)
	case stepAside:
		if pub := l.pub; pub != nil {
			l.pub = nil
			if e.handedOver {
				l.stopInBackground(pub)
			} else {
				l.logger.Info("Another instance of the driver published the registration socket: stepping aside", "path", l.m.path)
				l.retire(pub)
			}
		}
		l.follow(e.owner)
	case follow:
		if l.watch == nil || l.watch.file != e.owner {
			l.follow(e.owner)
		}
	case answer:
		// The caller, and tests, see the outcome in the snapshot as soon
		// as the reply is out.
		l.storeSnapshot()
		e.call.reply <- e.err
	case warn:
		if e.at.kind == atUnknown {
			l.logger.Error(e.at.Err, e.msg, "path", l.m.path)
		} else {
			found, _ := e.at.describe(l.m.name)
			l.logger.Error(nil, e.msg, "path", l.m.path, "found", found)
		}
	case fail:
		return e.err
	default:
		panic(fmt.Sprintf("registration: unknown effect %T", e))
	}
	return nil
}

// converse runs a conversation with another process on a goroutine of
// its own; its outcome comes back on outcomes.
func (l *loop) converse(conversation func() any) {
	go func() { l.outcomes <- conversation() }()
}

// logChange logs what an event changed, once: each line at the default
// level is a change an operator should know of. before is the machine
// before the event.
func (l *loop) logChange(ev any, before *machine) {
	m := &l.m
	switch ev := ev.(type) {
	case kubeletCall:
		switch {
		case ev.gen != m.gen:
			if ev.notify {
				l.logger.V(2).Info("Ignoring kubelet's verdict on an earlier registration socket", "registered", ev.registered, "reason", ev.reason)
			}
		case !ev.notify:
			if m.kubeletRetrying {
				l.logger.V(2).Info("kubelet tries again by itself: the registration socket stays", "attempts", m.attempts)
			}
		case ev.registered && before.state != Registered:
			l.logger.Info("kubelet registered the driver", "endpoint", l.s.cfg.Endpoint)
		case ev.registered:
			// kubelet confirms again after each of its restarts.
			l.logger.V(2).Info("kubelet confirmed the registration again")
		case before.state != Rejected:
			l.logger.Error(nil, "kubelet rejected the plugin", "reason", ev.reason, "policy", l.s.cfg.OnRejection)
			if l.s.cfg.OnRejection == Retry {
				l.logger.Info("Publishing the registration socket again after a backoff, so that kubelet tries again, unless kubelet tries again by itself on this socket first (kubelet 1.36 and later)", "backoff", m.due[retryTimer].Sub(m.log.lastNotify))
			}
		default:
			l.logger.V(2).Info("kubelet rejected the plugin again", "reason", ev.reason, "attempts", m.attempts)
		}
	case fired:
		if ev.timer == silenceTimer && m.state == KubeletSilent && before.state != KubeletSilent {
			l.logger.Info("kubelet has not called GetInfo on the registration socket: kubelet does not watch the registration directory, or is not running. Check that the directory is the host's <kubelet --root-dir>/plugins_registry (a relocated root dir: microk8s, k0s, --root-dir) and that kubelet runs; after failures at this path kubelet also waits out a backoff of up to 2m2s",
				"path", m.path, "directory", l.s.cfg.Dir, "publishedFor", l.s.cfg.KubeletSilence)
		}
	case published:
		if ev.reason == ReasonCSINodeLost {
			l.logger.Info("CSINode lost the driver while kubelet had it registered: published the registration socket again, so that kubelet registers the driver again", "csinode", before.csinode.Reason, "nextWait", m.csinodeWait)
		}
	case CSINodeReport:
		if m.state == Registered && before.csinode != nil && before.csinode.Listed && !ev.Listed {
			l.logger.Info("kubelet has the driver registered, but CSINode no longer confirms it", "csinode", ev.Reason)
		}
	case serveEnded:
		if ev.gen == m.gen {
			l.logger.Error(ev.err, "The registration socket stopped accepting connections: publishing it again", "path", m.path)
		}
	case looked:
		if ev.purpose != lookClaim || m.state == Stopped {
			break
		}
		switch {
		case m.state == Deferring && before.state != Deferring:
			l.logger.Info("A registrar that cannot hand its socket over serves the driver's registration socket: leaving it in place, and publishing ours when it leaves",
				"driver", m.name, "path", m.path, "endpoint", l.s.cfg.Endpoint)
		case ev.at.kind != atNothing && ev.at.kind != atHandsOver && m.claim == "":
			found, _ := ev.at.describe(m.name)
			l.logger.Info("Replacing the registration socket left at the path", "path", m.path, "found", found)
		}
	}
	if m.claim != "" && before.claim == "" && m.claimReason == ReasonRenamed {
		l.logger.Info("The CSI driver changed its name: registering under the new one", "newName", m.claim)
	}
}

// arm sets the loop's one timer to the machine's next deadline.
func (l *loop) arm(now time.Time) {
	next := l.m.next()
	if next.Equal(l.timerAt) {
		return
	}
	if l.timer != nil {
		l.timer.Stop()
		l.timer, l.fire = nil, nil
	}
	l.timerAt = next
	if !next.IsZero() {
		l.timer = l.s.cfg.Clock.NewTimer(next.Sub(now))
		l.fire = l.timer.C()
	}
}

// storeSnapshot gives readers a snapshot of the registration, and tells
// the observers.
func (l *loop) storeSnapshot() {
	l.s.store(l.m, l.pub)
}

// publish puts a new socket with its own gRPC server in place at the
// path, then retires the previous publication: the spare socket of a
// takeover that did not happen, when there is one. Its outcome is queued:
// published, or publishFailed when the node or the process is short of a
// resource.
func (l *loop) publish(reason string) error {
	// What the machine decided to replace: our own socket, or a dead one;
	// anything else at the path is never removed.
	var replace sockfile.ID
	if id, mode, err := sockfile.Lstat(l.m.path); err == nil && mode.Type() == fs.ModeSocket {
		replace = id
	}
	sock, err := l.spare, error(nil)
	l.spare = nil
	if sock == nil {
		sock, err = sockfile.Listen(l.m.path)
	}
	if err == nil {
		err = sock.Place(l.m.path, replace)
	}
	switch {
	case err != nil && sockfile.IsShortage(err):
		if l.m.publishError != err.Error() {
			l.logger.Error(err, "Cannot publish the registration socket: trying again after a backoff", "reason", reason, "backoff", l.m.shortBackoff)
		} else {
			l.logger.V(2).Info("Cannot publish the registration socket yet", "reason", reason, "backoff", l.m.shortBackoff, "err", err)
		}
		l.queue = append(l.queue, publishFailed{reason, err})
		return nil
	case err != nil:
		return err
	}
	gen := l.install(sock, l.m.name)
	l.logger.Info("Registration socket published, waiting for kubelet", "driver", l.m.name, "path", l.m.path, "endpoint", l.s.cfg.Endpoint, "reason", reason)
	l.queue = append(l.queue, published{gen, reason, sock.File})
	return nil
}

// install serves kubelet on a new socket, makes it the current
// publication and retires the previous one.
func (l *loop) install(sock *sockfile.Socket, name string) uint64 {
	l.gens++
	pub := &publication{gen: l.gens, name: name, path: sock.Path, sock: sock}
	srv := grpc.NewServer(grpc.ConnectionTimeout(handshakeTimeout))
	rpc := &rpcServer{s: l.s, gen: pub.gen, name: pub.name, logger: l.logger}
	registerapi.RegisterRegistrationServer(srv, rpc)
	if handover.Supported {
		srv.RegisterService(l.s.ownService(), rpc)
	}
	pub.grpc = srv
	l.unfollow()
	go func() {
		// Serve returns nil once the server is stopped, ErrServerStopped
		// when it was stopped before Serve began; an error when accepting
		// fails otherwise, or the listener was closed for a handover.
		if err := srv.Serve(pub.sock); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			l.s.send(serveEnded{gen: pub.gen, err: err})
		}
	}()
	previous := l.pub
	l.pub = pub
	if previous != nil {
		l.retire(previous)
	}
	return pub.gen
}

// retire stops a publication in the background: its socket is removed if
// it is still ours, and its gRPC server stops gracefully.
func (l *loop) retire(pub *publication) {
	if removed, err := pub.sock.Remove(); err != nil {
		l.logger.Error(err, "Cannot remove a registration socket", "path", pub.path)
	} else if removed {
		l.logger.V(2).Info("Registration socket removed", "path", pub.path)
	}
	l.stopInBackground(pub)
}

// stopInBackground stops pub's gRPC server (stopGRPC) without waiting;
// shutdown waits.
func (l *loop) stopInBackground(pub *publication) {
	l.retired.Add(1)
	go func() {
		defer l.retired.Done()
		l.stopGRPC(pub)
	}()
}

// stopGRPC lets in-flight replies go out, within the shutdown timeout;
// then every connection is closed.
func (l *loop) stopGRPC(pub *publication) {
	srv := pub.grpc
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-l.s.cfg.Clock.After(l.s.shutdownTimeout):
		l.logger.Info("Graceful stop timed out, closing open kubelet connections", "timeout", l.s.shutdownTimeout)
		srv.Stop()
		<-done
	}
}

// follow holds a connection to the instance that serves the socket file
// owner at the path in this one's place: a process that dies leaves its
// socket file behind and nothing changes in the directory, but the kernel
// closes its end of the connection, which tells the loop to look at the
// path again.
func (l *loop) follow(owner sockfile.ID) {
	l.unfollow()
	ctx, cancel := context.WithCancel(l.ctx)
	watch, path := &ownerWatch{file: owner, cancel: cancel}, l.m.path
	l.watch = watch
	go func() {
		err := unixgrpc.Hold(ctx, path, l.s.cfg.CheckTimeout, func() error {
			// The connection may have reached a socket that replaced owner.
			if now, _, err := sockfile.Lstat(path); err != nil || now != owner {
				return errors.New("another socket is at the path")
			}
			return nil
		})
		if err != nil && ctx.Err() == nil {
			l.s.send(watchLost{watch})
		}
	}()
}

func (l *loop) unfollow() {
	if l.watch != nil {
		l.watch.cancel()
		l.watch = nil
	}
}

// ownerWatch is the connection to the instance followed (follow).
type ownerWatch struct {
	file   sockfile.ID
	cancel context.CancelFunc
}

// watchLost: the connection of an owner watch failed.
type watchLost struct{ watch *ownerWatch }

// shutdown withdraws the registration before it stops answering, so that
// kubelet deregisters the driver rather than failing to reach it. A
// conversation under way ends first (Run cancelled its context): a socket
// it took over is withdrawn like any other.
func (l *loop) shutdown() {
	_ = l.handle(stopping{})
	for l.m.conversing {
		_ = l.handle(l.outcomeEvent(<-l.outcomes))
	}
	if l.spare != nil {
		_ = l.spare.Close()
		_, _ = l.spare.Remove()
	}
	l.unfollow()
	if l.timer != nil {
		l.timer.Stop()
	}
	pub := l.pub
	l.pub = nil
	if pub != nil {
		removed, err := pub.sock.Remove()
		switch {
		case err != nil:
			l.logger.Error(err, "Cannot remove the registration socket", "path", pub.path)
		case removed:
			l.logger.Info("Registration socket removed", "path", pub.path)
			_ = l.handle(withdrew{})
		default:
			l.logger.Info("Registration socket left in place: another instance published it", "path", pub.path)
		}
	}
	l.storeSnapshot()
	if pub != nil {
		l.stopGRPC(pub)
	}
	l.retired.Wait()
}
