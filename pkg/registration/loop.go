package registration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/csi-registrar/node-driver-registrar/internal/selinuxcheck"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/handover"
)

// loop is Run's goroutine and the registration it alone owns.
type loop struct {
	*Server
	ctx    context.Context
	logger logr.Logger
	// st and pub are the registration; share gives readers a copy.
	st  status
	pub *publication // nil while waiting for the driver or superseded
	// retired counts the graceful stops of old publications.
	retired sync.WaitGroup

	retry   *time.Timer
	backoff time.Duration
	// watch is the connection to the instance that owns the socket while
	// this one is superseded; watches counts them, for their ids.
	watch   *ownerWatch
	watches uint64
	// pending is a publication to try again, after publishBackoff.
	pending        *pendingPublication
	publishBackoff time.Duration
	// silence runs from a publication until kubelet's first GetInfo is
	// due.
	silence *time.Timer
	// vacancy runs while the path is empty, or holds a socket that did not
	// answer (suspect), before publishing again.
	vacancy *time.Timer
	suspect suspicion
}

func (l *loop) run(ctx context.Context, watcher *fsnotify.Watcher) error {
	for {
		l.share()
		if err := l.next(ctx, watcher); err != nil || ctx.Err() != nil {
			return err
		}
	}
}

// share gives readers a snapshot of the registration.
func (l *loop) share() {
	st := l.st
	st.publications = maps.Clone(l.st.publications)
	l.shared.Store(&snapshot{st: st, pub: l.pub})
}

// next waits for one event and acts on it.
func (l *loop) next(ctx context.Context, watcher *fsnotify.Watcher) error {
	select {
	case <-ctx.Done():
		return nil

	case news := <-l.driver:
		l.st.driverReachable = news.reachable
		if news.name != "" {
			return l.driverNamed(news.name)
		}

	case ev := <-l.events:
		return l.handle(ev)

	case event, ok := <-watcher.Events:
		if !ok {
			return errors.New("the watch of the registration directory ended")
		}
		if event.Name == filepath.Clean(l.cfg.Dir) && event.Has(fsnotify.Remove|fsnotify.Rename) {
			return fmt.Errorf("the registration directory %q was removed", l.cfg.Dir)
		}
		if path := l.st.socketPath; path != "" && event.Name == path {
			if err := l.reconcile(); err != nil {
				return err
			}
		}

	case err, ok := <-watcher.Errors:
		if !ok {
			return errors.New("the watch of the registration directory ended")
		}
		// An overflow may have hidden a deletion: look at the path.
		l.logger.Info("Watch of the registration directory reported an error; checking the socket", "err", err)
		return l.reconcile()

	case <-l.silenceChannel():
		l.silence = nil
		l.checkKubeletCalled()

	case <-l.vacancyChannel():
		return l.vacancyConfirmed()

	case <-l.pendingChannel():
		return l.publishPending()

	case <-l.retryChannel():
		return l.retryAfterRejection()
	}
	return nil
}

// handle acts on an event sent by another goroutine.
func (l *loop) handle(ev event) error {
	switch ev := ev.(type) {
	case kubeletCall:
		if !ev.notify {
			l.st.calledGetInfo()
			if l.pub != nil && l.pub.gen == ev.gen {
				// kubelet saw the current socket: nothing to wait for.
				l.stopSilence()
			}
			return nil
		}
		l.st.calledNotify(ev.registered)
		return l.verdict(ev)
	case *handoverCall:
		err := l.handOver(ev)
		// The caller, and tests, see the outcome in the snapshot as soon
		// as the reply is out.
		l.share()
		ev.reply <- err
	case ownerLost:
		return l.ownerGone(ev.id)
	case serveEnded:
		return l.serveEnded(ev)
	case selinuxInspected:
		l.selinuxInspected(ev)
	default:
		panic(fmt.Sprintf("registration: unknown event %T", ev))
	}
	return nil
}

// stopTimers stops what would wake the loop, once it has returned.
func (l *loop) stopTimers() {
	l.stopRetry()
	l.cancelPendingPublication()
	l.stopAwaitingVacancy()
	l.unwatchOwner()
	l.stopSilence()
}

func (l *loop) stopSilence() {
	if l.silence != nil {
		l.silence.Stop()
		l.silence = nil
	}
}

// driverNamed publishes the socket for the first name, and re-registers
// when the driver came back under another one.
func (l *loop) driverNamed(name string) error {
	old := l.st.driverName
	if name == old {
		return nil
	}
	path := SocketPath(l.cfg.Dir, name)
	exists, err := checkSocketPath(path)
	if err != nil {
		return err
	}
	reason := ReasonStart
	if old != "" {
		reason = ReasonRenamed
		l.logger.Info("The CSI driver changed its name: registering under the new one", "oldName", old, "newName", name)
	}
	for _, leftover := range removeLeftovers(path, l.cfg.CheckTimeout) {
		l.logger.V(2).Info("Removed a hidden socket left by an earlier registrar", "path", leftover)
	}

	l.st.driverName = name
	l.st.socketPath = path
	if exists && handover.Supported {
		// Most likely the older pod of a rolling update: take its socket
		// over rather than replace the file, which kubelet would see as a
		// new plugin and deregister the driver for a reconcile period.
		taken, err := l.takeOver(name, path)
		if err == nil {
			l.adopt(taken)
			return nil
		}
		l.logger.V(2).Info("No handover of the registration socket at the path", "path", path, "err", err)
		if grpcstatus.Code(err) == codes.Unimplemented && l.deferTo(name, path) {
			return nil
		}
	}
	if exists {
		l.logger.Info("Replacing the registration socket left at the path", "path", path, "live", socketAnswers(path, l.cfg.CheckTimeout))
	}
	return l.publish(reason)
}

// deferTo leaves the path to a live registrar for the same driver and
// endpoint that cannot hand its socket over (upstream's, or an older build):
// replacing its socket would make kubelet deregister the driver, and the
// old registrar's exit would then do it a second time, as upstream's
// removes the path when it stops. Waiting for it to leave costs one
// deregistration only. It tells whether it deferred.
func (l *loop) deferTo(name, path string) bool {
	file, err := os.Lstat(path)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.CheckTimeout)
	defer cancel()
	info, err := askInfo(ctx, path, l.cfg.CheckTimeout)
	if err != nil || info.Name != name || info.Endpoint != l.cfg.Endpoint {
		return false
	}
	l.st.deferring()
	l.watchOwner(path, file)
	l.logger.Info("A registrar that cannot hand its socket over serves the driver's registration socket: leaving it in place, and publishing ours when it leaves",
		"driver", name, "path", path, "endpoint", l.cfg.Endpoint)
	return true
}

// publishNow puts a new socket with its own gRPC server in place at the
// current path, then retires the previous publication: its socket, when
// still at a path of ours, is replaced atomically or removed (after a
// change of name).
func (l *loop) publishNow(reason string) error {
	name, path := l.st.driverName, l.st.socketPath
	l.st.generation++
	gen := l.st.generation

	sock, err := publish(path)
	if err != nil {
		return err
	}
	l.install(&publication{gen: gen, name: name, path: path, sock: sock}, func(st *status) { st.published(reason) })
	l.logger.Info("Registration socket published, waiting for kubelet", "driver", name, "path", path, "endpoint", l.cfg.Endpoint, "reason", reason)
	return nil
}

// install serves kubelet on a new publication, makes it the current one
// (update records it in the status), and retires the previous one.
func (l *loop) install(pub *publication, update func(*status)) {
	srv := grpc.NewServer(grpc.ConnectionTimeout(handshakeTimeout))
	rpc := &rpcServer{s: l.Server, gen: pub.gen, name: pub.name, logger: l.logger}
	registerapi.RegisterRegistrationServer(srv, rpc)
	if handover.Supported {
		srv.RegisterService(&ownServiceDesc, rpc)
	}
	pub.grpc = srv
	pub.conns = trackConns(pub.sock)
	l.unwatchOwner()
	l.cancelPendingPublication()
	l.stopAwaitingVacancy()
	l.suspect = suspicion{}
	l.publishBackoff = publishRetryInitial
	l.stopSilence()
	l.silence = time.NewTimer(l.cfg.KubeletSilence)
	if l.cfg.HTTPPort != nil {
		l.cfg.HTTPPort.Claim()
	}
	go func() {
		// Serve returns nil once the server is stopped; an error when
		// accepting fails otherwise, or the listener was closed for a
		// handover.
		if err := srv.Serve(pub.conns); err != nil {
			l.send(serveEnded{gen: pub.gen, err: err})
		}
	}()

	previous := l.pub
	l.pub = pub
	update(&l.st)
	l.inspectSELinux(false)
	if previous != nil {
		l.retire(previous)
	}
}

// retire stops a publication in the background: its socket is removed if
// it is still ours, and its gRPC server stops gracefully.
func (l *loop) retire(pub *publication) {
	if removed, err := pub.sock.removeIfOurs(); err != nil {
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

// serveEnded publishes the socket again when the gRPC server of the
// current publication stopped serving: the socket at the path no longer
// answers, as a dead one left there.
func (l *loop) serveEnded(ev serveEnded) error {
	if l.pub == nil || l.pub.gen != ev.gen {
		return nil // a publication retired or handed over
	}
	l.logger.Error(ev.err, "The registration socket stopped accepting connections: publishing it again", "path", l.pub.path)
	return l.publish(ReasonStale)
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
	timer := time.NewTimer(l.cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		l.logger.Info("Graceful stop timed out, closing open kubelet connections", "timeout", l.cfg.ShutdownTimeout)
		pub.conns.closeAll()
		srv.Stop()
		<-done
	}
}

// reconcile looks at the path after a change and restores the
// registration when the node would otherwise be left without one.
func (l *loop) reconcile() error {
	pub, state, path := l.pub, l.st.state, l.st.socketPath
	if path == "" {
		return nil
	}
	found := inspect(path)
	switch {
	case found.missing:
		if state.standsAside() || pub != nil {
			l.awaitVacancy()
		}
	case found.err != nil:
		l.logger.Error(found.err, "Cannot inspect the registration socket", "path", path)
	case pub != nil && pub.sock.isOurs(found.info):
		// Our own publication.
	case !found.socket:
		l.logger.Error(nil, "Something that is not a socket replaced the registration socket; leaving it alone", "path", path, "type", DescribeFileType(found.info.Mode()))
	case l.watch != nil && os.SameFile(l.watch.file, found.info):
		// The owner this instance follows: the connection it holds says
		// whether it lives, without another call.
	default:
		return l.foreignSocket(pub, path, found.info)
	}
	return nil
}

func (l *loop) silenceChannel() <-chan time.Time {
	if l.silence == nil {
		return nil
	}
	return l.silence.C
}

// checkKubeletCalled says, once per publication, that kubelet has not
// called GetInfo on the socket it should have seen long ago: kubelet does
// not watch this directory, or is not running.
func (l *loop) checkKubeletCalled() {
	silent := l.st.state == WaitingForKubelet && (l.st.lastGetInfo.IsZero() || l.st.lastGetInfo.Before(l.st.lastPublish))
	if !silent {
		return
	}
	l.st.kubeletSilent = true
	if l.cfg.InspectSELinux != nil {
		// Said once SELinux has been asked, which can take a connection
		// to the driver.
		l.inspectSELinux(true)
		return
	}
	l.reportSilence(nil)
}

func (l *loop) reportSilence(selinux *selinuxcheck.Report) {
	msg := "kubelet has not called GetInfo on the registration socket: kubelet does not watch the registration directory, or is not running. Check that the directory is the host's <kubelet --root-dir>/plugins_registry (a relocated root dir: microk8s, k0s, --root-dir) and that kubelet runs"
	kv := []any{"path", l.st.socketPath, "directory", l.cfg.Dir, "publishedFor", l.cfg.KubeletSilence}
	if selinux.Problem() {
		msg = "kubelet has not called GetInfo on the registration socket, and SELinux does not let it: see the selinux value. Otherwise kubelet does not watch the registration directory (is it the host's <kubelet --root-dir>/plugins_registry?), or is not running"
	}
	if selinux != nil {
		kv = append(kv, "selinux", selinux.Summary())
	}
	l.logger.Info(msg, kv...)
}

// inspectSELinux asks what SELinux says of the current publication's
// socket, on a goroutine: the answer comes back as an event.
func (l *loop) inspectSELinux(afterSilence bool) {
	inspect := l.cfg.InspectSELinux
	if inspect == nil || l.pub == nil {
		return
	}
	gen, path := l.pub.gen, l.pub.path
	go func() {
		l.send(selinuxInspected{gen: gen, report: inspect(path), afterSilence: afterSilence})
	}()
}

func (l *loop) selinuxInspected(ev selinuxInspected) {
	if l.pub == nil || l.pub.gen != ev.gen {
		return // about a publication since replaced
	}
	l.st.selinux = ev.report
	if ev.afterSilence && l.st.kubeletSilent {
		l.reportSilence(ev.report)
	}
}

// vacancyGrace is how long an empty path, or a socket there that does not
// answer, is left alone before this instance publishes its socket there
// again. Another registrar that takes the path over may remove the socket
// there first and bind its own next (upstream's does, at start), and its
// new socket refuses connections between its bind and its listen: a
// socket published in between would either make its bind fail or replace
// its socket with ours while it serves an unlinked one. The wait is far
// shorter than kubelet's reconcile period (1 s), so kubelet sees the same
// events.
const vacancyGrace = 100 * time.Millisecond

// maxStrikes is how many looks, vacancyGrace apart, a socket at the path
// that accepts connections and does not answer GetInfo within the check
// timeout gets before it is replaced as dead.
const maxStrikes = 4

// suspicion counts the looks at a socket at the path that did not answer,
// vacancyGrace apart at least: two events in quick succession (the
// removal of a socket and the creation of the next, between its bind and
// its listen) are one look, or a registrar that binds and then listens
// would have its new socket replaced as dead.
type suspicion struct {
	file    fs.FileInfo
	strikes int
	last    time.Time // of the last look counted
}

// look records a look at file that found it not answering, at now, and
// returns how many looks count against it.
func (s *suspicion) look(file fs.FileInfo, now time.Time) int {
	if s.file == nil || !os.SameFile(s.file, file) {
		*s = suspicion{file: file}
	}
	if s.strikes == 0 || now.Sub(s.last) >= vacancyGrace {
		s.strikes++
		s.last = now
	}
	return s.strikes
}

// awaitVacancy publishes the socket again once the path has stayed empty
// for vacancyGrace, unless another instance published one meanwhile.
func (l *loop) awaitVacancy() {
	if l.vacancy == nil {
		l.vacancy = time.NewTimer(vacancyGrace)
	}
}

func (l *loop) vacancyChannel() <-chan time.Time {
	if l.vacancy == nil {
		return nil
	}
	return l.vacancy.C
}

func (l *loop) stopAwaitingVacancy() {
	if l.vacancy != nil {
		l.vacancy.Stop()
		l.vacancy = nil
	}
}

// vacancyConfirmed publishes the socket again if the path is still empty;
// otherwise what is there now is dealt with as any change.
func (l *loop) vacancyConfirmed() error {
	l.vacancy = nil
	pub, state, path := l.pub, l.st.state, l.st.socketPath
	if !inspect(path).missing {
		return l.reconcile()
	}
	switch {
	case state.standsAside():
		l.logger.Info("The instance that served the registration socket is gone: publishing ours again", "path", path)
		return l.publish(ReasonVacated)
	case pub != nil:
		l.logger.Info("Registration socket deleted: publishing it again", "path", path)
		return l.publish(ReasonDeleted)
	}
	return nil
}

// foreignSocket decides what to do about a socket another process put at
// the path: step aside for a live instance of the same driver, replace a
// dead socket, leave anything else alone.
func (l *loop) foreignSocket(pub *publication, path string, file fs.FileInfo) error {
	name, state := l.st.driverName, l.st.state
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.CheckTimeout)
	defer cancel()
	other, err := askName(ctx, path, l.cfg.CheckTimeout)
	if err != nil {
		strikes := l.suspect.look(file, time.Now())
		// A socket that refuses connections is dead, or was bound a
		// moment ago and is not listening yet (another registrar between
		// its bind and its listen): one more look after the grace. One
		// that accepts and does not answer in time is slow, perhaps only
		// on a loaded node: it is replaced only after maxStrikes looks.
		if strikes < 2 || strikes < maxStrikes && socketAnswers(path, l.cfg.CheckTimeout) {
			l.logger.V(2).Info("The socket at the path does not answer: looking again shortly", "path", path, "err", err, "looks", strikes)
			l.awaitVacancy()
			return nil
		}
	}
	l.suspect = suspicion{}
	switch {
	case err != nil && state.standsAside():
		l.logger.Info("The instance that served the registration socket no longer answers: publishing ours again", "path", path, "err", err)
		return l.publish(ReasonVacated)
	case err != nil:
		l.logger.Info("A dead socket replaced the registration socket: publishing ours again", "path", path, "err", err)
		return l.publish(ReasonStale)
	case other != name:
		l.logger.Error(nil, "Another driver's registration socket is at our path; leaving it alone", "path", path, "otherDriver", other)
	case state.standsAside():
		// Another instance again, e.g. after a handover between two newer
		// ones: follow the current owner.
		if l.watch == nil || !os.SameFile(l.watch.file, file) {
			l.watchOwner(path, file)
		}
	default:
		// Never fight back: a newer instance (a rolling update with
		// maxSurge) owns the registration now.
		l.logger.Info("Another instance of the driver published the registration socket: stepping aside", "path", path)
		l.stopRetry()
		l.cancelPendingPublication()
		l.stopAwaitingVacancy()
		l.pub = nil
		l.st.superseded()
		if pub != nil {
			l.retire(pub)
		}
		l.watchOwner(path, file)
		l.releasePortTo(path)
	}
	return nil
}

// watchOwner holds a connection to the instance that serves the socket
// file at path in this one's place, so that its death is noticed at once:
// a killed process leaves its socket file behind, and the directory does
// not change.
func (l *loop) watchOwner(path string, file fs.FileInfo) {
	l.unwatchOwner()
	l.watches++
	ctx, cancel := context.WithCancel(l.ctx)
	l.watch = &ownerWatch{id: l.watches, file: file, cancel: cancel}
	lost := func(id uint64) {
		select {
		case l.events <- ownerLost{id}:
		case <-ctx.Done():
		case <-l.done:
		}
	}
	go watchOwner(ctx, l.watches, path, file, l.cfg.CheckTimeout, lost)
}

func (l *loop) unwatchOwner() {
	if l.watch != nil {
		l.watch.cancel()
		l.watch = nil
	}
}

// ownerGone looks at the path again after the connection of watch id to
// the socket's owner failed.
func (l *loop) ownerGone(id uint64) error {
	if l.watch == nil || l.watch.id != id {
		return nil // a watch that was replaced meanwhile
	}
	l.watch = nil
	// The cached check of the owner's socket no longer holds.
	l.identity.forget()
	l.logger.V(2).Info("The connection to the instance that owns the registration socket ended: checking the socket")
	return l.reconcile()
}

// verdict records kubelet's NotifyRegistrationStatus on a publication.
func (l *loop) verdict(v kubeletCall) error {
	if l.pub == nil || l.pub.gen != v.gen {
		l.logger.V(2).Info("Ignoring kubelet's verdict on an earlier registration socket", "registered", v.registered, "reason", v.reason)
		return nil
	}
	changed := l.st.verdict(v.registered, v.reason)
	if v.registered {
		l.stopRetry()
		l.backoff = l.cfg.RetryInitial
		if changed {
			l.logger.Info("kubelet registered the driver", "endpoint", l.cfg.Endpoint)
		} else {
			// kubelet confirms again after each of its restarts.
			l.logger.V(2).Info("kubelet confirmed the registration again")
		}
		if l.cfg.Registered != nil {
			l.cfg.Registered(l.st.driverName)
		}
		return nil
	}

	if changed {
		l.logger.Error(nil, "kubelet rejected the plugin", "reason", v.reason, "policy", l.cfg.OnRejection)
	} else {
		l.logger.V(2).Info("kubelet rejected the plugin again", "reason", v.reason)
	}
	if l.cfg.Rejected != nil {
		l.cfg.Rejected(l.st.driverName, v.reason)
	}
	if l.cfg.OnRejection == Exit {
		return &RejectedError{Reason: v.reason}
	}
	if l.retry == nil {
		l.logger.Info("Publishing the registration socket again after a backoff, so that kubelet tries again", "backoff", l.backoff)
		l.retry = time.NewTimer(l.backoff)
		l.st.nextRetry = time.Now().Add(l.backoff)
		l.backoff = min(2*l.backoff, l.cfg.RetryMax)
	}
	return nil
}

func (l *loop) retryChannel() <-chan time.Time {
	if l.retry == nil {
		return nil
	}
	return l.retry.C
}

func (l *loop) stopRetry() {
	if l.retry != nil {
		l.retry.Stop()
		l.retry = nil
	}
	l.st.nextRetry = time.Time{}
}

func (l *loop) retryAfterRejection() error {
	l.retry = nil
	pub, state := l.pub, l.st.state
	l.st.nextRetry = time.Time{}
	if state != Rejected || pub == nil {
		return nil
	}
	l.logger.V(2).Info("Publishing the registration socket again after kubelet's rejection")
	return l.publish(ReasonRetry)
}

// shutdown withdraws the registration before it stops answering, so that
// kubelet deregisters the driver rather than failing to reach it.
func (l *loop) shutdown() {
	logger := l.logger
	pub := l.pub
	l.pub = nil
	l.st.stopped()
	l.share()
	if pub != nil {
		removed, err := pub.sock.removeIfOurs()
		switch {
		case err != nil:
			logger.Error(err, "Cannot remove the registration socket", "path", pub.path)
		case removed:
			logger.Info("Registration socket removed", "path", pub.path)
			if l.cfg.Withdrawn != nil {
				l.cfg.Withdrawn(pub.name)
			}
		default:
			logger.Info("Registration socket left in place: another instance published it", "path", pub.path)
		}
		// Clients that have not said anything yet have nothing in flight,
		// and nothing to gain from a socket that is gone: a client that
		// never speaks must not hold the exit.
		pub.conns.closeSilent()
		l.stopGRPC(pub)
	}
	l.retired.Wait()
}
