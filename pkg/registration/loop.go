package registration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
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

// handshakeTimeout: kubelet and other registrars speak HTTP/2 at once, and
// gRPC's stops wait for handshakes under way, so a silent client holds the
// exit this long at most (gRPC's default is 120 s).
const handshakeTimeout = 2 * time.Second

// loop is Run's goroutine: it steps the machine one event at a time and
// carries out the effects. Outcomes are queued (done on the loop) or come
// back on outcomes (conversations, each on a goroutine of its own).
type loop struct {
	s      *Server
	ctx    context.Context
	logger logr.Logger
	m      machine
	pub    *publication // nil while none is served
	// queue is taken before any other event.
	queue    []event
	outcomes chan outcome
	// happened holds the transitions since the last snapshot.
	happened []Transition
	// spare: a takeover's receiving socket, for the next publication.
	spare *sockfile.Socket
	// retired runs the stops of retired servers, which shutdown waits for.
	retired sync.WaitGroup
	// unfollowOwner ends following an owner, if any.
	unfollowOwner context.CancelFunc
	// timer wakes the loop at the machine's next deadline, timerAt; a
	// stale fire only wakes the loop once more.
	timer   clock.Timer
	timerAt time.Time
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

// next waits for the next event; nil when there is none for the machine.
func (l *loop) next(watcher *fsnotify.Watcher) (event, error) {
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
		return outcome(), nil

	case report := <-l.s.driver:
		return report, nil

	case report := <-l.s.csinode:
		return report, nil

	case ev := <-l.s.events:
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

	case <-l.timer.C():
		// The timers due are queued by the next call.
		l.timerAt = time.Time{}
	}
	return nil, nil
}

// handle is the only caller of step.
func (l *loop) handle(ev event) error {
	out := l.m.step(l.s.cfg.Clock.Now(), ev)
	for _, t := range out.transitions {
		l.logTransition(t)
	}
	l.happened = append(l.happened, out.transitions...)
	for _, e := range out.effects {
		if err := e.carryOut(l); err != nil {
			return err
		}
	}
	return nil
}

func (e look) carryOut(l *loop) error {
	path, ours, owner := l.m.path, l.m.ours, l.m.owner
	if e.purpose == lookClaim {
		path = SocketPath(l.s.cfg.Dir, l.m.claim)
	}
	l.converse(func() outcome {
		if e.purpose == lookClaim {
			for _, leftover := range sockfile.RemoveLeftovers(path, l.s.cfg.CheckTimeout) {
				l.logger.V(2).Info("Removed a hidden socket left by an earlier registrar", "path", leftover)
			}
		}
		at := lookAt(l.ctx, path, ours, owner, l.s.cfg.CheckTimeout, e.purpose == lookClaim)
		if at.kind == AtRefused || at.kind == AtSilent {
			l.logger.V(2).Info("The socket at the path does not answer", "path", at.path, "err", at.Err)
		}
		return func() event { return looked{at, e.purpose} }
	})
	return nil
}

func (e answer) carryOut(l *loop) error {
	// The caller sees the outcome in the snapshot once it has the reply.
	l.storeSnapshot()
	e.call.reply <- e.err
	return nil
}

func (e fail) carryOut(*loop) error { return e.err }

// outcome is a conversation's end, run on the loop: it keeps a socket the
// conversation brought, and gives the event.
type outcome func() event

func (l *loop) converse(conversation func() outcome) {
	go func() { l.outcomes <- conversation() }()
}

// logTransition logs at the default level only what an operator should know.
func (l *loop) logTransition(t Transition) {
	m := &l.m
	switch t := t.(type) {
	case Claiming:
		if t.Renamed {
			l.logger.Info("The CSI driver changed its name: registering under the new one", "newName", t.Name)
		}
	case Replacing:
		l.logger.Info("Replacing the registration socket left at the path", "path", m.path, "found", t.Found)
	case Deferred:
		l.logger.Info("A registrar that cannot hand its socket over serves the driver's registration socket: leaving it in place, and publishing ours when it leaves",
			"driver", m.name, "path", m.path, "endpoint", l.s.cfg.Endpoint)
	case Published:
		switch t.Reason {
		case ReasonHandover:
			l.logger.Info("Took the registration socket over from the previous instance of the driver: kubelet's registration stays",
				"driver", m.name, "path", m.path, "endpoint", l.s.cfg.Endpoint, "registered", m.rec.LastVerdict != nil, "reason", t.Reason)
		case ReasonCSINodeLost:
			l.logger.Info("CSINode lost the driver while kubelet had it registered: published the registration socket again, so that kubelet registers the driver again", "csinode", m.csinode.Reason, "nextWait", m.csinodeWait.Duration)
			fallthrough
		default:
			l.logger.Info("Registration socket published, waiting for kubelet", "driver", m.name, "path", m.path, "endpoint", l.s.cfg.Endpoint, "reason", t.Reason)
		}
	case PublishFailed:
		if t.Repeated {
			l.logger.V(2).Info("Cannot publish the registration socket yet", "reason", t.Reason, "retry", t.Retry, "err", t.Err)
		} else {
			l.logger.Error(errors.New(t.Err), "Cannot publish the registration socket: trying again after a backoff", "reason", t.Reason, "retry", t.Retry)
		}
	case KubeletAccepted:
		if t.Again {
			// kubelet confirms again after each of its restarts.
			l.logger.V(2).Info("kubelet confirmed the registration again")
		} else {
			l.logger.Info("kubelet registered the driver", "endpoint", l.s.cfg.Endpoint)
		}
	case CSINodeUnconfirmed:
		l.logger.Info("kubelet has the driver registered, but CSINode no longer confirms it", "csinode", t.Reason)
	case KubeletRejected:
		if !t.First {
			l.logger.V(2).Info("kubelet rejected the plugin again", "reason", t.Reason, "attempts", t.Attempts)
			break
		}
		l.logger.Error(nil, "kubelet rejected the plugin", "reason", t.Reason, "policy", l.s.cfg.OnRejection)
		if !t.Retry.IsZero() {
			l.logger.Info("Publishing the registration socket again after a backoff, so that kubelet tries again, unless kubelet tries again by itself on this socket first (kubelet 1.36 and later)", "backoff", t.Retry.Sub(*m.rec.LastNotify))
		}
	case VerdictIgnored:
		l.logger.V(2).Info("Ignoring kubelet's verdict on an earlier registration socket", "registered", t.Registered, "reason", t.Reason)
	case KubeletRetrying:
		l.logger.V(2).Info("kubelet tries again by itself: the registration socket stays", "attempts", t.Attempts)
	case KubeletWentSilent:
		l.logger.Info("kubelet has not called GetInfo on the registration socket: kubelet does not watch the registration directory, or is not running. Check that the directory is the host's <kubelet --root-dir>/plugins_registry (a relocated root dir: microk8s, k0s, --root-dir) and that kubelet runs; after failures at this path kubelet also waits out a backoff of up to 2m2s",
			"path", m.path, "directory", l.s.cfg.Dir, "publishedFor", kubeletSilence)
	case SteppedAside:
		if t.HandedOver {
			l.logger.Info("Handed the registration socket over to a newer instance of the driver: kubelet's registration stays", "path", m.path)
		} else {
			l.logger.Info("Another instance of the driver published the registration socket: stepping aside", "path", m.path)
		}
	case LeftAlone:
		if t.Found == "" {
			l.logger.Error(t.Err, t.Why, "path", m.path)
		} else {
			l.logger.Error(nil, t.Why, "path", m.path, "found", t.Found)
		}
	case ServeEnded:
		l.logger.Error(t.Err, "The registration socket stopped accepting connections: publishing it again", "path", m.path)
	}
}

func (l *loop) arm(now time.Time) {
	next := l.m.next()
	switch {
	case next.Equal(l.timerAt):
	case next.IsZero():
		l.timer.Stop()
	default:
		l.timer.Reset(next.Sub(now))
	}
	l.timerAt = next
}

// storeSnapshot also tells the observers what happened since the last one.
func (l *loop) storeSnapshot() {
	m := l.m
	m.rec.Publications = maps.Clone(m.rec.Publications)
	l.s.shared.Store(&snapshot{m: m, pub: l.pub})
	now := l.s.Status()
	for _, o := range l.s.observers {
		o(now, l.happened)
	}
	l.happened = nil
}

// publish puts a new socket in place at the path, the spare one if any,
// and retires the previous publication.
func (e publish) carryOut(l *loop) error {
	// The machine decided to replace our socket or a dead one; nothing else.
	var replace sockfile.ID
	if id, mode, err := sockfile.Lstat(l.m.path); err == nil && mode.Type() == fs.ModeSocket {
		replace = id
	}
	sock, err := sockfile.Publish(l.m.path, replace, l.spare)
	l.spare = nil
	switch {
	case err != nil && sockfile.IsShortage(err):
		l.queue = append(l.queue, publishFailed{e.reason, err})
		return nil
	case err != nil:
		return err
	}
	l.install(sock, l.m.name, e.gen)
	l.queue = append(l.queue, published{e.gen, e.reason, sock.File})
	return nil
}

func (l *loop) install(sock *sockfile.Socket, name string, gen uint64) {
	srv := grpc.NewServer(grpc.ConnectionTimeout(handshakeTimeout))
	rpc := &rpcServer{s: l.s, gen: gen, name: name, logger: l.logger}
	registerapi.RegisterRegistrationServer(srv, rpc)
	if handover.Supported {
		srv.RegisterService(&ownService, rpc)
	}
	pub := &publication{sock: sock, grpc: srv}
	l.unfollowOwner()
	go func() {
		// ErrServerStopped: stopped before Serve began.
		if err := srv.Serve(pub.sock); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			l.s.send(serveEnded{gen: gen, err: err})
		}
	}()
	_ = retire{}.carryOut(l)
	l.pub = pub
}

// retire stops the current publication's server, if any, and removes its
// socket while it is still ours; a socket handed over is another's.
func (e retire) carryOut(l *loop) error {
	pub := l.pub
	if pub == nil {
		return nil
	}
	l.pub = nil
	if !e.handedOver {
		if removed, err := pub.sock.Remove(); err != nil {
			l.logger.Error(err, "Cannot remove a registration socket", "path", pub.sock.Path)
		} else if removed {
			l.logger.V(2).Info("Registration socket removed", "path", pub.sock.Path)
		}
	}
	l.retired.Go(func() { l.stopGRPC(pub) })
	return nil
}

// stopGRPC lets in-flight replies go out within the shutdown timeout.
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

// follow holds a connection to owner's instance: a process that dies
// leaves its socket file, but the kernel closes the connection.
func (e follow) carryOut(l *loop) error {
	l.unfollowOwner()
	ctx, cancel := context.WithCancel(l.ctx)
	path := l.m.path
	l.unfollowOwner = cancel
	go func() {
		err := unixgrpc.Hold(ctx, path, l.s.cfg.CheckTimeout, func() error {
			// The connection may have reached a socket that replaced owner.
			if now, _, err := sockfile.Lstat(path); err != nil || now != e.owner {
				return errors.New("another socket is at the path")
			}
			return nil
		})
		if err != nil && ctx.Err() == nil {
			l.s.send(ownerLost(e))
		}
	}()
	return nil
}

// shutdown withdraws the socket before it stops answering, so that kubelet
// deregisters the driver rather than failing to reach it. A conversation
// under way ends first, and a socket it took over is withdrawn too.
func (l *loop) shutdown() {
	_ = l.handle(stopping{})
	for l.m.conversing {
		outcome := <-l.outcomes
		_ = l.handle(outcome())
	}
	if l.spare != nil {
		_ = l.spare.Close()
		_, _ = l.spare.Remove()
	}
	l.unfollowOwner()
	l.timer.Stop()
	if pub := l.pub; pub != nil {
		l.pub = nil
		removed, err := pub.sock.Remove()
		switch {
		case err != nil:
			l.logger.Error(err, "Cannot remove the registration socket", "path", pub.sock.Path)
		case removed:
			l.logger.Info("Registration socket removed", "path", pub.sock.Path)
			_ = l.handle(withdrew{})
		default:
			l.logger.Info("Registration socket left in place: another instance published it", "path", pub.sock.Path)
		}
		l.retired.Go(func() { l.stopGRPC(pub) })
	}
	l.storeSnapshot()
	l.retired.Wait()
}
