// Package registration is the kubelet-facing side of the registrar: it
// publishes <driver>-reg.sock in kubelet's plugin registry directory, serves
// kubelet's plugin registration API (pluginregistration.v1) on it, and keeps
// it there: it publishes it again when it is deleted, when kubelet rejected
// it (after a backoff) and when the driver changes its name, and steps aside
// when a newer instance of the same driver takes the path over.
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
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// SupportedVersions is what the registrar tells kubelet about the CSI
// driver: kubelet's CSI handler requires the highest version to be 1.x.
var SupportedVersions = []string{"1.0.0"}

// Defaults for Config.
const (
	DefaultShutdownTimeout = 3 * time.Second
	DefaultCheckTimeout    = time.Second
	DefaultRetryInitial    = time.Second
	DefaultRetryMax        = 5 * time.Minute
	DefaultKubeletSilence  = 10 * time.Second
)

// Policy says what to do when kubelet rejects the plugin.
type Policy string

const (
	// Retry publishes the socket again after a backoff, so that kubelet
	// tries again, until it accepts.
	Retry Policy = "retry"
	// Exit ends Run with a *RejectedError, as upstream exits.
	Exit Policy = "exit"
)

// Publication reasons, as counted in Status.Publications.
const (
	ReasonStart   = "start"   // first publication
	ReasonDeleted = "deleted" // our socket was deleted
	ReasonVacated = "vacated" // the instance that served the path went away
	ReasonStale   = "stale"   // a dead socket appeared at the path
	ReasonRetry   = "retry"   // kubelet rejected the plugin, backoff elapsed
	ReasonRenamed = "renamed" // the driver came back under another name
	// ReasonHandover: the previous instance handed its listening socket
	// over; the file at the path did not change.
	ReasonHandover = "handover"
)

// Config says where to register and how to behave.
type Config struct {
	// Endpoint is the driver's socket as kubelet sees it on the host
	// (--kubelet-registration-path); it is returned to kubelet verbatim.
	Endpoint string
	// Dir is kubelet's plugin registry directory as mounted here
	// (--plugin-registration-path).
	Dir string
	// OnRejection is the policy when kubelet rejects the plugin; Retry
	// when empty.
	OnRejection Policy
	// RetryInitial and RetryMax bound the backoff of the Retry policy: it
	// doubles from RetryInitial up to RetryMax, and starts over after
	// kubelet accepted the plugin.
	RetryInitial, RetryMax time.Duration
	// KubeletSilence is how long after a publication kubelet may not have
	// called GetInfo before the registrar says so (DefaultKubeletSilence):
	// kubelet's plugin watcher reacts at once, its reconciler within a
	// second.
	KubeletSilence time.Duration
	// Rejected, when set, is called with kubelet's reason each time
	// kubelet rejects the plugin.
	Rejected func(reason string)
	// Registered, when set, is called each time kubelet confirms the
	// current registration socket, and when this instance takes over a
	// socket that kubelet had registered.
	Registered func()
	// Withdrawn, when set, is called when Run removed the registration
	// socket on its way out: kubelet unregisters the plugin.
	Withdrawn func()
	// CheckTimeout bounds the GetInfo call that identifies a socket at the
	// path that this process did not create.
	CheckTimeout time.Duration
	// ShutdownTimeout bounds the graceful stop of a gRPC server.
	ShutdownTimeout time.Duration
	// HTTPPort, when set, is the HTTP endpoint's port: released to a newer
	// instance on the same network that waits for it, claimed back when
	// this instance publishes again (see port.go).
	HTTPPort PortSharing
}

// RejectedError is returned by Run when kubelet did not accept the plugin
// and the policy is Exit.
type RejectedError struct {
	// Reason is kubelet's error message from NotifyRegistrationStatus.
	Reason string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("kubelet rejected the plugin: %s", e.Reason)
}

// verdict is one NotifyRegistrationStatus call, for the publication that
// received it.
type verdict struct {
	gen        uint64
	registered bool
	reason     string
}

// Server publishes the registration socket and answers kubelet on it.
type Server struct {
	cfg Config

	// Wakes Run: a new driver name, or a kubelet verdict.
	names     chan string
	verdicts  chan verdict
	handovers chan *handoverCall
	// ownerLost carries the id of an owner watch whose connection failed.
	ownerLost chan uint64
	done      chan struct{}

	mu     sync.Mutex
	logger logr.Logger
	st     status
	pub    *publication // nil while waiting for the driver or superseded

	retired  sync.WaitGroup // graceful stops of old publications
	identity foreignCache
}

// publication is one socket put in place, with its own gRPC server.
// Kubelet's verdicts are attributed to the publication they came through,
// so an old socket's verdict never counts for the current one.
type publication struct {
	gen  uint64
	name string
	path string
	sock *publishedSocket
	grpc *grpc.Server
	// conns are the connections grpc accepted on sock.
	conns *trackedListener
}

// New checks cfg; Run publishes the socket once DriverFound named the
// driver.
func New(cfg Config) (*Server, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("--kubelet-registration-path is required: set it to the CSI driver's socket path on the host, e.g. /var/lib/kubelet/plugins/<driver>/csi.sock")
	}
	if err := CheckDir(cfg.Dir); err != nil {
		return nil, err
	}
	switch cfg.OnRejection {
	case "":
		cfg.OnRejection = Retry
	case Retry, Exit:
	default:
		return nil, fmt.Errorf("rejection policy %q is not supported: use %q or %q", cfg.OnRejection, Retry, Exit)
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = DefaultCheckTimeout
	}
	if cfg.RetryInitial <= 0 {
		cfg.RetryInitial = DefaultRetryInitial
	}
	if cfg.KubeletSilence <= 0 {
		cfg.KubeletSilence = DefaultKubeletSilence
	}
	if cfg.RetryMax < cfg.RetryInitial {
		cfg.RetryMax = max(DefaultRetryMax, cfg.RetryInitial)
	}
	return &Server{
		cfg:       cfg,
		names:     make(chan string, 1),
		verdicts:  make(chan verdict, 16),
		handovers: make(chan *handoverCall),
		ownerLost: make(chan uint64, 1),
		done:      make(chan struct{}),
		logger:    klog.Background(),
		st:        newStatus(cfg.Endpoint),
	}, nil
}

// DriverFound tells the server the driver's name: the first call lets Run
// publish the socket, a later call with another name re-registers under
// it. It does not block.
func (s *Server) DriverFound(name string) {
	s.setDriverReachable(true)
	for {
		select {
		case s.names <- name:
			return
		default:
		}
		// Only the latest name matters.
		select {
		case <-s.names:
		default:
		}
	}
}

// DriverGone records that the driver's socket went away. The registration
// stays: kubelet needs the driver only when it calls it.
func (s *Server) DriverGone() {
	s.setDriverReachable(false)
}

// Run publishes the registration socket once the driver's name is known and
// serves kubelet until ctx is done, keeping the socket in place. With the
// Exit policy it also returns, with a *RejectedError, when kubelet rejects
// the plugin. On return the socket is removed if it is still the one this
// server published, and in-flight replies have gone out.
func (s *Server) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	s.mu.Lock()
	s.logger = logger
	s.mu.Unlock()

	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		close(s.done)
		return fmt.Errorf("cannot watch the registration directory: %w", err)
	}
	defer watcher.Close()
	if err := watcher.Add(s.cfg.Dir); err != nil {
		close(s.done)
		return fmt.Errorf("cannot watch the registration directory %q: %w", s.cfg.Dir, err)
	}

	l := loop{Server: s, ctx: ctx, logger: logger, backoff: s.cfg.RetryInitial, publishBackoff: publishRetryInitial}
	err = l.run(ctx, watcher)
	l.stopRetry()
	l.cancelPendingPublication()
	l.stopAwaitingVacancy()
	l.unwatchOwner()
	// Verdicts arriving from now on have nobody to act on them: their
	// handlers must reply at once, or the graceful stop would wait for them.
	close(s.done)
	s.shutdown(logger)
	return err
}

// loop is the state of Run's goroutine.
type loop struct {
	*Server
	ctx     context.Context
	logger  logr.Logger
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
	suspect fs.FileInfo
	strikes int // looks at suspect that found it not answering
}

func (l *loop) run(ctx context.Context, watcher *fsnotify.Watcher) error {
	for {
		select {
		case <-ctx.Done():
			return nil

		case name := <-l.names:
			if err := l.driverNamed(name); err != nil {
				return err
			}

		case event, ok := <-watcher.Events:
			if !ok {
				return errors.New("the watch of the registration directory ended")
			}
			if event.Name == filepath.Clean(l.cfg.Dir) && event.Has(fsnotify.Remove|fsnotify.Rename) {
				return fmt.Errorf("the registration directory %q was removed", l.cfg.Dir)
			}
			if path := l.currentPath(); path != "" && event.Name == path {
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
			if err := l.reconcile(); err != nil {
				return err
			}

		case v := <-l.verdicts:
			if err := l.verdict(v); err != nil {
				return err
			}

		case call := <-l.handovers:
			call.reply <- l.handOver(call)

		case id := <-l.ownerLost:
			if err := l.ownerGone(id); err != nil {
				return err
			}

		case <-l.silenceChannel():
			l.silence = nil
			l.checkKubeletCalled()

		case <-l.vacancyChannel():
			if err := l.vacancyConfirmed(); err != nil {
				return err
			}

		case <-l.pendingChannel():
			if err := l.publishPending(); err != nil {
				return err
			}

		case <-l.retryChannel():
			if err := l.retryAfterRejection(); err != nil {
				return err
			}
		}
	}
}

// currentPath is the socket path of the current driver name, "" before
// the driver is known.
func (s *Server) currentPath() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.socketPath
}

// driverNamed publishes the socket for the first name, and re-registers
// when the driver came back under another one.
func (l *loop) driverNamed(name string) error {
	l.mu.Lock()
	old := l.st.driverName
	l.mu.Unlock()
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

	l.mu.Lock()
	l.st.driverName = name
	l.st.socketPath = path
	l.mu.Unlock()
	if exists && handoverSupported {
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
	l.mu.Lock()
	l.st.deferring()
	l.mu.Unlock()
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
	l.mu.Lock()
	name, path := l.st.driverName, l.st.socketPath
	l.st.generation++
	gen := l.st.generation
	l.mu.Unlock()

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
	rpc := &rpcServer{s: l.Server, gen: pub.gen, name: pub.name}
	registerapi.RegisterRegistrationServer(srv, rpc)
	if handoverSupported {
		srv.RegisterService(&handoverServiceDesc, rpc)
	}
	pub.grpc = srv
	pub.conns = trackConns(pub.sock)
	l.unwatchOwner()
	l.cancelPendingPublication()
	l.stopAwaitingVacancy()
	l.suspect = nil
	l.publishBackoff = publishRetryInitial
	if l.silence != nil {
		l.silence.Stop()
	}
	l.silence = time.NewTimer(l.cfg.KubeletSilence)
	if l.cfg.HTTPPort != nil {
		l.cfg.HTTPPort.Claim()
	}
	go func() { _ = srv.Serve(pub.conns) }()

	l.mu.Lock()
	previous := l.pub
	l.pub = pub
	update(&l.st)
	l.mu.Unlock()
	if previous != nil {
		l.retire(previous)
	}
}

// retire stops a publication in the background: its socket is removed if
// it is still ours, and its gRPC server stops gracefully.
func (s *Server) retire(pub *publication) {
	if removed, err := pub.sock.removeIfOurs(); err != nil {
		s.log().Error(err, "Cannot remove a registration socket", "path", pub.path)
	} else if removed {
		s.log().V(2).Info("Registration socket removed", "path", pub.path)
	}
	s.retired.Add(1)
	go func() {
		defer s.retired.Done()
		s.stopGRPC(pub)
	}()
}

// stopGRPC lets in-flight replies go out, within the shutdown timeout;
// then every connection is closed, as gRPC itself would wait for clients
// that have not finished their handshake.
func (s *Server) stopGRPC(pub *publication) {
	srv := pub.grpc
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	timer := time.NewTimer(s.cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		s.log().Info("Graceful stop timed out, closing open kubelet connections", "timeout", s.cfg.ShutdownTimeout)
		pub.conns.closeAll()
		srv.Stop()
		<-done
	}
}

// reconcile looks at the path after a change and restores the
// registration when the node would otherwise be left without one.
func (l *loop) reconcile() error {
	l.mu.Lock()
	pub, state, path := l.pub, l.st.state, l.st.socketPath
	l.mu.Unlock()
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
	l.mu.Lock()
	silent := l.st.state == WaitingForKubelet && (l.st.lastGetInfo.IsZero() || l.st.lastGetInfo.Before(l.st.lastPublish))
	if silent {
		l.st.kubeletSilent = true
	}
	l.mu.Unlock()
	if silent {
		l.logger.Info("kubelet has not called GetInfo on the registration socket: kubelet does not watch the registration directory, or is not running. Check that the directory is the host's <kubelet --root-dir>/plugins_registry (a relocated root dir: microk8s, k0s, --root-dir) and that kubelet runs",
			"path", l.st.socketPath, "directory", l.cfg.Dir, "publishedFor", l.cfg.KubeletSilence)
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
	l.mu.Lock()
	pub, state, path := l.pub, l.st.state, l.st.socketPath
	l.mu.Unlock()
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
	l.mu.Lock()
	name, state := l.st.driverName, l.st.state
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.CheckTimeout)
	defer cancel()
	other, err := askName(ctx, path, l.cfg.CheckTimeout)
	if err != nil {
		if l.suspect == nil || !os.SameFile(l.suspect, file) {
			l.suspect, l.strikes = file, 0
		}
		l.strikes++
		// A socket that refuses connections is dead, or was bound a
		// moment ago and is not listening yet (another registrar between
		// its bind and its listen): one more look after the grace. One
		// that accepts and does not answer in time is slow, perhaps only
		// on a loaded node: it is replaced only after maxStrikes looks.
		if l.strikes < 2 || l.strikes < maxStrikes && socketAnswers(path, l.cfg.CheckTimeout) {
			l.logger.V(2).Info("The socket at the path does not answer: looking again shortly", "path", path, "err", err, "looks", l.strikes)
			l.awaitVacancy()
			return nil
		}
	}
	l.suspect = nil
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
		l.mu.Lock()
		l.pub = nil
		l.st.superseded()
		l.mu.Unlock()
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
		case l.ownerLost <- id:
		case <-ctx.Done():
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
	// The verdict on the owner's socket no longer holds.
	l.identity.forget()
	l.logger.V(2).Info("The connection to the instance that owns the registration socket ended: checking the socket")
	return l.reconcile()
}

// verdict records kubelet's answer for a publication.
func (l *loop) verdict(v verdict) error {
	l.mu.Lock()
	current := l.pub != nil && l.pub.gen == v.gen
	var changed bool
	if current {
		changed = l.st.verdict(v.registered, v.reason)
	}
	l.mu.Unlock()
	if !current {
		l.logger.V(2).Info("Ignoring kubelet's verdict on an earlier registration socket", "registered", v.registered, "reason", v.reason)
		return nil
	}
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
			l.cfg.Registered()
		}
		return nil
	}

	if changed {
		l.logger.Error(nil, "kubelet rejected the plugin", "reason", v.reason, "policy", l.cfg.OnRejection)
	} else {
		l.logger.V(2).Info("kubelet rejected the plugin again", "reason", v.reason)
	}
	if l.cfg.Rejected != nil {
		l.cfg.Rejected(v.reason)
	}
	if l.cfg.OnRejection == Exit {
		return &RejectedError{Reason: v.reason}
	}
	if l.retry == nil {
		l.logger.Info("Publishing the registration socket again after a backoff, so that kubelet tries again", "backoff", l.backoff)
		l.retry = time.NewTimer(l.backoff)
		l.mu.Lock()
		l.st.nextRetry = time.Now().Add(l.backoff)
		l.mu.Unlock()
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
	l.mu.Lock()
	l.st.nextRetry = time.Time{}
	l.mu.Unlock()
}

func (l *loop) retryAfterRejection() error {
	l.retry = nil
	l.mu.Lock()
	pub, state := l.pub, l.st.state
	l.st.nextRetry = time.Time{}
	l.mu.Unlock()
	if state != Rejected || pub == nil {
		return nil
	}
	l.logger.V(2).Info("Publishing the registration socket again after kubelet's rejection")
	return l.publish(ReasonRetry)
}

// shutdown withdraws the registration before it stops answering, so that
// kubelet deregisters the driver rather than failing to reach it.
func (s *Server) shutdown(logger logr.Logger) {
	s.mu.Lock()
	pub := s.pub
	s.pub = nil
	s.st.stopped()
	s.mu.Unlock()
	if pub != nil {
		removed, err := pub.sock.removeIfOurs()
		switch {
		case err != nil:
			logger.Error(err, "Cannot remove the registration socket", "path", pub.path)
		case removed:
			logger.Info("Registration socket removed", "path", pub.path)
			if s.cfg.Withdrawn != nil {
				s.cfg.Withdrawn()
			}
		default:
			logger.Info("Registration socket left in place: another instance published it", "path", pub.path)
		}
		// Clients that have not said anything yet have nothing in flight,
		// and nothing to gain from a socket that is gone: a client that
		// never speaks must not hold the exit.
		pub.conns.closeSilent()
		s.stopGRPC(pub)
	}
	s.retired.Wait()
}

// rpcServer implements kubelet's registration API for one publication.
type rpcServer struct {
	registerapi.UnimplementedRegistrationServer
	s    *Server
	gen  uint64
	name string
}

func (r *rpcServer) GetInfo(ctx context.Context, _ *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	if calledByRegistrar(ctx) {
		r.s.log().V(4).Info("GetInfo called by another instance of the registrar or by --diagnose", "driver", r.name)
	} else {
		r.s.log().V(4).Info("GetInfo called by kubelet", "driver", r.name)
		r.s.mu.Lock()
		r.s.st.calledGetInfo()
		r.s.mu.Unlock()
	}
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.name,
		Endpoint:          r.s.cfg.Endpoint,
		SupportedVersions: SupportedVersions,
	}, nil
}

func (r *rpcServer) NotifyRegistrationStatus(_ context.Context, status *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.s.log().V(4).Info("NotifyRegistrationStatus called by kubelet", "driver", r.name, "registered", status.PluginRegistered, "error", status.Error)
	r.s.mu.Lock()
	r.s.st.calledNotify(status.PluginRegistered)
	r.s.mu.Unlock()
	select {
	case r.s.verdicts <- verdict{gen: r.gen, registered: status.PluginRegistered, reason: status.Error}:
	case <-r.s.done:
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (s *Server) log() logr.Logger {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logger
}

func (s *Server) setDriverReachable(reachable bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.driverReachable = reachable
}
