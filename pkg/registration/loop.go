package registration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
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
// them, and while it waits gRPC's Stop and GracefulStop wait for it too.
const handshakeTimeout = 2 * time.Second

// loop is Run's goroutine: it feeds the machine its events and carries out
// the effects it returns. It owns the machine, the current publication
// and the goroutines that serve it.
type loop struct {
	s      *Server
	ctx    context.Context
	logger logr.Logger
	m      machine
	pub    *publication // nil while none is served
	// retired counts the graceful stops of old publications.
	retired sync.WaitGroup
	// watch is the connection to the instance followed while standing
	// aside.
	watch *ownerWatch
	// gens counts the publications, for their generation.
	gens uint64
	// talking: a conversation with another process about the path runs
	// on a goroutine of its own (talk): a look at a socket another
	// process published, taking it over, or handing this one's over. Its
	// outcome comes back on talked. Meanwhile the loop goes on with
	// kubelet's calls and holds every other event, which could change the
	// publication under the conversation, until the outcome is in: one
	// conversation runs at a time, about the publication it started with.
	talking bool
	talked  chan any
	held    []any
	// timer wakes the loop at the machine's next deadline, timerAt,
	// through fire; nil while none runs.
	timer   clock.Timer
	timerAt time.Time
	fire    <-chan time.Time
}

func (l *loop) run(watcher *fsnotify.Watcher) error {
	for {
		l.share()
		if err := l.next(watcher); err != nil || l.ctx.Err() != nil {
			// Observers see what ended the loop.
			l.share()
			return err
		}
	}
}

// next waits for one event and acts on it.
func (l *loop) next(watcher *fsnotify.Watcher) error {
	dir, dirErrors, fire, stop := watcher.Events, watcher.Errors, l.fire, l.ctx.Done()
	if l.talking {
		// Held: a stop, too, waits for the conversation, which its
		// timeouts bound.
		dir, dirErrors, fire, stop = nil, nil, nil, nil
	}
	select {
	case <-stop:
		return nil

	case outcome := <-l.talked:
		l.talking = false
		err := l.settle(outcome)
		for err == nil && !l.talking && len(l.held) > 0 {
			ev := l.held[0]
			l.held = l.held[1:]
			err = l.handle(ev)
		}
		return err

	case news := <-l.s.driver:
		l.s.reachable.Store(news.reachable)
		l.s.driverError.Store(&news.err)
		if news.name != "" {
			return l.handle(named{news.name})
		}

	case ev := <-l.s.events:
		return l.handle(ev)

	case event, ok := <-dir:
		if !ok {
			return errors.New("the watch of the registration directory ended")
		}
		if event.Name == filepath.Clean(l.s.cfg.Dir) && event.Has(fsnotify.Remove|fsnotify.Rename) {
			return fmt.Errorf("the registration directory %q was removed", l.s.cfg.Dir)
		}
		if event.Name == l.m.path {
			return l.apply(pathChanged{})
		}

	case err, ok := <-dirErrors:
		if !ok {
			return errors.New("the watch of the registration directory ended")
		}
		// An overflow may have hidden a deletion: look at the path.
		l.logger.Info("Watch of the registration directory reported an error; checking the socket", "err", err)
		return l.apply(pathChanged{})

	case <-fire:
		l.timer, l.timerAt, l.fire = nil, time.Time{}, nil
		now := l.s.cfg.Clock.Now()
		for t := range timers {
			if due := l.m.due[t]; !due.IsZero() && !due.After(now) {
				if err := l.apply(fired{t}); err != nil {
					return err
				}
			}
		}
		l.arm()
	}
	return nil
}

// handle acts on an event sent to the loop, or holds it while a
// conversation runs.
func (l *loop) handle(ev any) error {
	switch ev := ev.(type) {
	case kubeletCall:
		// Even during a conversation: it changes no publication.
		return l.apply(ev)
	}
	if l.talking {
		l.held = append(l.held, ev)
		return nil
	}
	switch ev := ev.(type) {
	case *handoverCall:
		if err := l.handOver(ev); err != nil {
			ev.reply <- err
		}
		return nil
	case watchLost:
		if l.watch != ev.watch {
			return nil // a watch replaced meanwhile
		}
		l.watch = nil
		return l.apply(ownerLost{})
	default:
		return l.apply(ev)
	}
}

// talk runs a conversation with another process on a goroutine of its
// own; its outcome is settled by the loop. Only kubelet's calls are
// handled during a conversation, and they start none.
func (l *loop) talk(conversation func() any) {
	l.talking = true
	go func() { l.talked <- conversation() }()
}

// settle acts on the outcome of a conversation.
func (l *loop) settle(outcome any) error {
	switch r := outcome.(type) {
	case claimed:
		return l.claimed(r)
	case offered:
		return l.offered(r)
	case looked:
		if l.ctx.Err() != nil {
			return nil // stopping: nothing to publish again
		}
		if r.at.kind == atRefused || r.at.kind == atSilent {
			l.logger.V(2).Info("The socket at the path does not answer", "path", l.m.path, "err", r.at.Err)
		}
		return l.apply(r)
	}
	panic(fmt.Sprintf("registration: unknown outcome %T", outcome))
}

// apply steps the machine through ev and carries out its effects, whose
// outcomes are events in turn.
func (l *loop) apply(ev any) error {
	before := l.m.state
	effects := l.m.step(l.s.cfg.Clock.Now(), ev)
	l.told(ev, before)
	for _, e := range effects {
		if err := l.do(e); err != nil {
			return err
		}
	}
	l.arm()
	return nil
}

// do carries out one effect.
func (l *loop) do(e effect) error {
	switch e := e.(type) {
	case claim:
		return l.claim(e.reason)
	case publish:
		return l.publish(nil, e.reason)
	case look:
		l.look(e.purpose)
	case stepAside:
		l.logger.Info("Another instance of the driver published the registration socket: stepping aside", "path", l.m.path)
		if pub := l.pub; pub != nil {
			l.pub = nil
			l.retire(pub)
		}
		l.follow(e.owner)
	case follow:
		if l.watch == nil || !os.SameFile(l.watch.file, e.owner) {
			l.follow(e.owner)
		}
	case warn:
		if e.at.kind == atUnknown {
			l.logger.Error(e.at.Err, e.msg, "path", l.m.path)
		} else {
			_, found := e.at.Found(l.m.name)
			l.logger.Error(nil, e.msg, "path", l.m.path, "found", found)
		}
	case fail:
		return e.err
	default:
		panic(fmt.Sprintf("registration: unknown effect %T", e))
	}
	return nil
}

// told logs what an event changed, once: each line at the default level
// is a change an operator should know of.
func (l *loop) told(ev any, before State) {
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
		case ev.registered && before != Registered:
			l.logger.Info("kubelet registered the driver", "endpoint", l.s.cfg.Endpoint)
		case ev.registered:
			// kubelet confirms again after each of its restarts.
			l.logger.V(2).Info("kubelet confirmed the registration again")
		case before != Rejected:
			l.logger.Error(nil, "kubelet rejected the plugin", "reason", ev.reason, "policy", l.s.cfg.OnRejection)
			if l.s.cfg.OnRejection == Retry {
				l.logger.Info("Publishing the registration socket again after a backoff, so that kubelet tries again, unless kubelet tries again by itself on this socket first (kubelet 1.36 and later)", "backoff", m.due[retryTimer].Sub(m.log.lastNotify))
			}
		default:
			l.logger.V(2).Info("kubelet rejected the plugin again", "reason", ev.reason, "attempts", m.attempts)
		}
	case fired:
		if ev.timer == silenceTimer && m.state == KubeletSilent && before != KubeletSilent {
			l.logger.Info("kubelet has not called GetInfo on the registration socket: kubelet does not watch the registration directory, or is not running. Check that the directory is the host's <kubelet --root-dir>/plugins_registry (a relocated root dir: microk8s, k0s, --root-dir) and that kubelet runs; after failures at this path kubelet also waits out a backoff of up to 2m2s",
				"path", m.path, "directory", l.s.cfg.Dir, "publishedFor", l.s.cfg.KubeletSilence)
		}
	case serveEnded:
		if ev.gen == m.gen {
			l.logger.Error(ev.err, "The registration socket stopped accepting connections: publishing it again", "path", m.path)
		}
	}
}

// arm sets the loop's one timer to the machine's next deadline.
func (l *loop) arm() {
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
		l.timer = l.s.cfg.Clock.NewTimer(next.Sub(l.s.cfg.Clock.Now()))
		l.fire = l.timer.C()
	}
}

// share gives readers a snapshot of the registration, and tells the
// observers.
func (l *loop) share() {
	l.s.share(l.m, l.pub)
}

// claim puts the driver's socket in place for the first time, or under a
// new name: it takes over the socket of an older instance at the path,
// defers to a live registrar that cannot hand it over, or publishes. The
// sockets at the path are asked on a goroutine (talk); claimed acts on
// what they said.
func (l *loop) claim(reason string) error {
	name := l.m.claim
	path := SocketPath(l.s.cfg.Dir, name)
	if reason == ReasonRenamed {
		l.logger.Info("The CSI driver changed its name: registering under the new one", "newName", name)
	}
	exists, err := checkSocketPath(path)
	if err != nil {
		return err
	}
	l.talk(func() any { return l.ask(claimed{reason: reason}, name, path, exists) })
	return nil
}

// claimed is what the sockets at the path said to a claim: the socket
// taken over, the owner to defer to, or neither, with a receiving socket
// to publish instead (spare) when there is one.
type claimed struct {
	reason string
	taken  *handover.Taken
	owner  fs.FileInfo
	spare  *sockfile.Socket
}

// ask is claim's conversation: it removes the hidden sockets that earlier
// registrars left behind and asks the socket at path, if there is one.
func (l *loop) ask(c claimed, name, path string, exists bool) claimed {
	for _, leftover := range sockfile.RemoveLeftovers(path, l.s.cfg.CheckTimeout) {
		l.logger.V(2).Info("Removed a hidden socket left by an earlier registrar", "path", leftover)
	}
	if exists && handover.Supported {
		// Most likely the older pod of a rolling update: take its socket
		// over rather than replace the file, which kubelet would see as a
		// new plugin and deregister the driver for a reconcile period.
		switch can, err := l.canHandOver(path); {
		case err != nil:
			l.logger.V(2).Info("The socket at the path does not answer", "path", path, "err", err)
		case can:
			taken, sock, err := l.takeOver(name, path)
			if err == nil {
				c.taken = taken
				return c
			}
			l.logger.V(2).Info("No handover of the registration socket at the path", "path", path, "err", err)
			c.spare = sock
		default:
			if c.owner = l.deferTo(name, path); c.owner != nil {
				return c
			}
		}
	}
	if exists && l.ctx.Err() == nil {
		l.logger.Info("Replacing the registration socket left at the path", "path", path, "live", sockfile.Answers(path, l.s.cfg.CheckTimeout))
	}
	return c
}

// claimed serves the socket taken over, defers, or publishes. A socket
// taken over during a stop is served too, so that the stop withdraws it
// like any other; nothing else is published then.
func (l *loop) claimed(c claimed) error {
	if err := l.apply(claimOver{}); err != nil {
		return err
	}
	switch {
	case c.taken != nil:
		return l.adopt(c.taken)
	case l.ctx.Err() != nil:
		if c.spare != nil {
			_ = c.spare.Close()
			_, _ = c.spare.Remove()
		}
		return nil
	case c.owner != nil:
		l.logger.Info("A registrar that cannot hand its socket over serves the driver's registration socket: leaving it in place, and publishing ours when it leaves",
			"driver", l.m.name, "path", l.m.path, "endpoint", l.s.cfg.Endpoint)
		return l.apply(deferred{c.owner})
	}
	return l.publish(c.spare, c.reason)
}

// deferTo returns the socket at path when a live registrar for the same
// driver and endpoint that cannot hand it over (upstream's, or an older
// build) serves it: replacing its socket would make kubelet deregister the
// driver, and the old registrar's exit would then do it a second time, as
// upstream's removes the path when it stops. Waiting for it to leave costs
// one deregistration only.
func (l *loop) deferTo(name, path string) fs.FileInfo {
	file, err := os.Lstat(path)
	if err != nil {
		return nil
	}
	info, err := askInfo(l.ctx, path, l.s.cfg.CheckTimeout)
	if err != nil || info.Name != name || info.Endpoint != l.s.cfg.Endpoint {
		return nil
	}
	return file
}

// publish puts a new socket with its own gRPC server in place at the
// path, then retires the previous publication: spare, a hidden socket
// already listening, when there is one. When the node or the process is
// short of a resource, the machine tries again after a backoff.
func (l *loop) publish(spare *sockfile.Socket, reason string) error {
	// What the machine decided to replace: our own socket, or a dead one;
	// anything else at the path is never removed.
	var replace fs.FileInfo
	if fi, err := os.Lstat(l.m.path); err == nil && fi.Mode().Type() == fs.ModeSocket {
		replace = fi
	}
	sock, err := spare, error(nil)
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
		return l.apply(publishFailed{reason, err})
	case err != nil:
		return err
	}
	gen := l.install(sock)
	l.logger.Info("Registration socket published, waiting for kubelet", "driver", l.m.name, "path", l.m.path, "endpoint", l.s.cfg.Endpoint, "reason", reason)
	return l.apply(published{gen, reason})
}

// install serves kubelet on a new socket, makes it the current
// publication and retires the previous one.
func (l *loop) install(sock *sockfile.Socket) uint64 {
	l.gens++
	pub := &publication{gen: l.gens, name: l.m.name, path: l.m.path, sock: sock}
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
// then every connection is closed, as gRPC itself would wait for clients
// that have not finished their handshake.
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
		pub.sock.CloseAll()
		srv.Stop()
		<-done
	}
}

// follow holds a connection to the instance that serves the socket file
// owner at the path in this one's place: a process that dies leaves its
// socket file behind and nothing changes in the directory, but the kernel
// closes its end of the connection, which tells the loop to look at the
// path again.
func (l *loop) follow(owner fs.FileInfo) {
	l.unfollow()
	ctx, cancel := context.WithCancel(l.ctx)
	watch, path := &ownerWatch{file: owner, cancel: cancel}, l.m.path
	l.watch = watch
	go func() {
		err := unixgrpc.Hold(ctx, path, l.s.cfg.CheckTimeout, func() error {
			// The connection may have reached a socket that replaced owner.
			if now, err := os.Lstat(path); err != nil || !os.SameFile(now, owner) {
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

// look looks at the path for purpose (talk): a socket there that another
// process published is asked GetInfo, which may take the check timeout.
func (l *loop) look(why purpose) {
	if l.ctx.Err() != nil {
		return // stopping: nothing to publish again
	}
	path, ours, owner, name := l.m.path, l.pub.file(), l.m.owner, l.m.name
	l.talk(func() any {
		return looked{lookAt(l.ctx, path, ours, owner, l.s.cfg.CheckTimeout).ofDriver(name), why}
	})
}

// ownerWatch is the connection to the instance followed (follow).
type ownerWatch struct {
	file   fs.FileInfo
	cancel context.CancelFunc
}

// watchLost: the connection of an owner watch failed.
type watchLost struct{ watch *ownerWatch }

// shutdown withdraws the registration before it stops answering, so that
// kubelet deregisters the driver rather than failing to reach it.
func (l *loop) shutdown() {
	if l.talking {
		l.talking = false
		if err := l.settle(<-l.talked); err != nil {
			l.logger.Error(err, "Ending a conversation with another instance")
		}
	}
	l.unfollow()
	if l.timer != nil {
		l.timer.Stop()
	}
	pub := l.pub
	l.pub = nil
	l.m.step(l.s.cfg.Clock.Now(), stopping{})
	if pub != nil {
		removed, err := pub.sock.Remove()
		switch {
		case err != nil:
			l.logger.Error(err, "Cannot remove the registration socket", "path", pub.path)
		case removed:
			l.logger.Info("Registration socket removed", "path", pub.path)
			l.m.withdrawn = true
		default:
			l.logger.Info("Registration socket left in place: another instance published it", "path", pub.path)
		}
	}
	l.share()
	if pub != nil {
		// Clients that have not said anything yet have nothing in flight,
		// and nothing to gain from a socket that is gone: a client that
		// never speaks must not hold the exit.
		pub.sock.CloseSilent()
		l.stopGRPC(pub)
	}
	l.retired.Wait()
}
