// Package registration is the kubelet-facing side of the registrar: it
// publishes <driver>-reg.sock in kubelet's plugin registry directory, serves
// kubelet's plugin registration API (pluginregistration.v1) on it, and keeps
// it there: it publishes it again when it is deleted, when kubelet rejected
// it (after a backoff) and when the driver changes its name, and steps aside
// when a newer instance of the same driver takes the path over. Its event
// loop decides when to hand the socket over to such an instance or take it
// from an older one; package handover passes it.
package registration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

// SupportedVersions is what the registrar tells kubelet about the CSI
// driver: kubelet's CSI handler requires the highest version to be 1.x.
var SupportedVersions = []string{"1.0.0"}

// Defaults for Config.
const (
	DefaultShutdownTimeout = 3 * time.Second // of a gRPC server
	DefaultCheckTimeout    = time.Second
)

// kubeletSilence is how long after a publication kubelet may not have
// called GetInfo before the registration is kubelet-silent: kubelet's
// plugin watcher reacts at once, its reconciler within a second.
const kubeletSilence = 10 * time.Second

// rejectionBackoff is the Retry policy's wait after a rejection (unless
// kubelet's own retry is due later); it starts over once kubelet accepts.
var rejectionBackoff = doubling(time.Second, 5*time.Minute)

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
	// ReasonCSINodeLost: this node's CSINode lost the driver while kubelet
	// had it registered (Config.ConfirmCSINode).
	ReasonCSINodeLost = "csinode-lost"
	// ReasonHandover: the previous instance handed its listening socket
	// over; the file at the path did not change.
	ReasonHandover = "handover"
)

// Config says where to register and how to behave.
type Config struct {
	// Endpoint is the driver's socket as kubelet sees it on the host; it
	// is returned to kubelet verbatim.
	Endpoint string
	// Dir is kubelet's plugin registry directory as mounted here.
	Dir string
	// OnRejection is the policy when kubelet rejects the plugin; Retry
	// when empty.
	OnRejection Policy
	// CheckTimeout bounds each call that identifies a socket at the path
	// that this process did not create.
	CheckTimeout time.Duration
	// Clock runs every timer of the registration; the real one when nil.
	Clock clock.WithTicker
	// ConfirmCSINode: kubelet's acceptance counts as registered only once
	// ReportCSINode says this node's CSINode lists the driver (state
	// Unconfirmed until then), and a CSINode that loses the driver while
	// kubelet has it registered makes the registration publish its socket
	// again (ReasonCSINodeLost), so that kubelet registers the driver
	// again, which restores it.
	ConfirmCSINode bool
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

// Server publishes the registration socket and answers kubelet on it.
//
// One goroutine, Run's event loop, owns the registration: the driver's
// name, the current publication and the state kubelet sees. Everything
// else talks to it through channels (DriverFound, DriverGone, the RPC
// handlers, the watch of the socket's owner, each gRPC server's Serve),
// and reads what it stores after each event: an immutable snapshot
// (Status, Health), which observers are also given.
type Server struct {
	cfg Config
	// shutdownTimeout bounds the graceful stop of a gRPC server.
	shutdownTimeout time.Duration

	// The loop's inputs. driver holds what DriverFound and DriverGone
	// said since the loop last looked.
	driver      chan driverReport
	driverMutex sync.Mutex
	// csinode holds the latest CSINode report the loop has not taken yet.
	csinode      chan CSINodeReport
	csinodeMutex sync.Mutex
	events       chan event
	// done is closed once the loop no longer reads events: senders stop
	// waiting.
	done      chan struct{}
	closeDone func()
	ran       atomic.Bool

	// started is when New made the server: the registration fails from
	// then until the driver names itself.
	started time.Time
	// shared is the loop's latest snapshot; observers are told of each.
	shared    atomic.Pointer[snapshot]
	observers []Observer
}

// An Observer is told, in order and on the registration's goroutine, of
// each snapshot of the registration with what happened since the last one
// (often nothing): it must not block.
type Observer func(now Status, happened []Transition)

// snapshot is what the loop stores after each event: a copy of its
// machine, which Status and Health read without I/O of their own, and the
// current publication. Neither it nor anything it points to is written
// again.
type snapshot struct {
	m   machine
	pub *publication // nil while none is served
}

// driverReport is what the driver's side said, an event of the machine:
// its name, when it named one, and whether its socket answers.
type driverReport struct {
	name      string
	reachable bool
	err       string // why it cannot be asked, from DriverUnreachable
}

// publication is one socket put in place, with its own gRPC server.
// Kubelet's verdicts are attributed to the publication they came through,
// so an old socket's verdict never counts for the current one. Its fields
// are not written once it is installed.
type publication struct {
	gen  uint64
	name string
	path string
	sock *sockfile.Socket
	grpc *grpc.Server
}

// file is pub's socket file; zero when pub is nil.
func (pub *publication) file() sockfile.ID {
	if pub == nil {
		return sockfile.ID{}
	}
	return pub.sock.File
}

// Validate says what is wrong with cfg's values; the registry directory
// is checked by New.
func (cfg Config) Validate() error {
	var errs []error
	if cfg.Endpoint == "" {
		errs = append(errs, &ConfigError{"Endpoint", errors.New("the endpoint is required: the CSI driver's socket path on the host, e.g. /var/lib/kubelet/plugins/<driver>/csi.sock")})
	}
	switch cfg.OnRejection {
	case "", Retry, Exit:
	default:
		errs = append(errs, &ConfigError{"OnRejection", fmt.Errorf("rejection policy %q is not supported: use %q or %q", cfg.OnRejection, Retry, Exit)})
	}
	return errors.Join(errs...)
}

// New checks cfg (Validate, and that its directory exists); Run publishes
// the socket once DriverFound named the driver.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := CheckDir(cfg.Dir); err != nil {
		return nil, err
	}
	if cfg.OnRejection == "" {
		cfg.OnRejection = Retry
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = DefaultCheckTimeout
	}
	s := &Server{
		cfg:             cfg,
		shutdownTimeout: DefaultShutdownTimeout,
		driver:          make(chan driverReport, 1),
		csinode:         make(chan CSINodeReport, 1),
		events:          make(chan event, 16),
		done:            make(chan struct{}),
		started:         cfg.Clock.Now(),
	}
	s.closeDone = sync.OnceFunc(func() { close(s.done) })
	s.shared.Store(&snapshot{m: newMachine(cfg, s.started)})
	return s, nil
}

// DriverFound tells the server the driver's name: the first call lets Run
// publish the socket, a later call with another name re-registers under
// it. It does not block.
func (s *Server) DriverFound(name string) {
	s.report(driverReport{name: name, reachable: true})
}

// DriverGone records that the driver's socket went away. The registration
// stays: kubelet needs the driver only when it calls it.
func (s *Server) DriverGone() {
	s.report(driverReport{reachable: false})
}

// DriverUnreachable records why the driver could not be asked, for the
// reason of the state waiting-for-driver; DriverFound clears it. It does
// not block.
func (s *Server) DriverUnreachable(why string) {
	s.report(driverReport{reachable: false, err: why})
}

// report passes a report of the driver to the loop without waiting:
// merged with one the loop has not taken yet, the latest name and
// reachability win.
func (s *Server) report(r driverReport) {
	s.driverMutex.Lock()
	defer s.driverMutex.Unlock()
	select {
	case old := <-s.driver:
		if r.name == "" {
			r.name = old.name
		}
	default:
	}
	s.driver <- r
}

// CSINodeReport is what was last found of the driver in this node's
// CSINode (pkg/features/csinode finds it).
type CSINodeReport struct {
	// Listed: the CSINode of the current Node lists the driver.
	Listed bool
	// Missing: the CSINode does not exist, or does not list the driver: a
	// registration made again by kubelet restores it.
	Missing bool
	// Reason says what was found when the driver is not Listed, in one
	// line.
	Reason string
}

// ReportCSINode passes what was found in this node's CSINode to the loop
// (Config.ConfirmCSINode) without waiting: a report the loop has not taken
// yet is replaced.
func (s *Server) ReportCSINode(r CSINodeReport) {
	s.csinodeMutex.Lock()
	defer s.csinodeMutex.Unlock()
	select {
	case <-s.csinode:
	default:
	}
	s.csinode <- r
}

// Observe adds an observer of the registration; call it before Run.
func (s *Server) Observe(o Observer) { s.observers = append(s.observers, o) }

// store keeps a snapshot of the loop's state for readers and tells the
// observers what happened since the last one.
func (s *Server) store(m machine, pub *publication, happened []Transition) {
	m.log.publications = maps.Clone(m.log.publications)
	s.shared.Store(&snapshot{m: m, pub: pub})
	if len(s.observers) == 0 {
		return
	}
	now := s.Status()
	for _, o := range s.observers {
		o(now, happened)
	}
}

// send passes an event to the loop; false when the loop has returned.
func (s *Server) send(ev event) bool {
	select {
	case s.events <- ev:
		return true
	case <-s.done:
		return false
	}
}

// Run publishes the registration socket once the driver's name is known and
// serves kubelet until ctx is done, keeping the socket in place. With the
// Exit policy it also returns, with a *RejectedError, when kubelet rejects
// the plugin. On return the socket is removed if it is still the one this
// server published, and in-flight replies have gone out. A Server runs
// once: a second call returns an error at once.
func (s *Server) Run(ctx context.Context) error {
	if !s.ran.CompareAndSwap(false, true) {
		return errors.New("the registration server has already run")
	}
	defer s.closeDone()
	logger := klog.FromContext(ctx)

	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("cannot watch the registration directory: %w", err)
	}
	defer watcher.Close()
	if err := watcher.Add(s.cfg.Dir); err != nil {
		return fmt.Errorf("cannot watch the registration directory %q: %w", s.cfg.Dir, err)
	}

	loopCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := &loop{s: s, ctx: loopCtx, logger: logger, m: newMachine(s.cfg, s.started), outcomes: make(chan outcome, 1)}
	err = l.run(watcher)
	// Events sent from now on have nobody to act on them: their senders,
	// RPC handlers among them, must not wait, or the graceful stop of the
	// gRPC servers would wait for them; a conversation under way ends.
	s.closeDone()
	cancel()
	l.shutdown()
	return err
}

// rpcServer implements kubelet's registration API for one publication.
type rpcServer struct {
	registerapi.UnimplementedRegistrationServer
	s      *Server
	gen    uint64
	name   string
	logger logr.Logger
}

func (r *rpcServer) GetInfo(ctx context.Context, _ *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	if calledByRegistrar(ctx) {
		r.logger.V(4).Info("GetInfo called by another instance of the registrar or by --diagnose", "driver", r.name)
	} else {
		r.logger.V(4).Info("GetInfo called by kubelet", "driver", r.name)
		r.s.send(kubeletCall{gen: r.gen})
	}
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.name,
		Endpoint:          r.s.cfg.Endpoint,
		SupportedVersions: SupportedVersions,
	}, nil
}

func (r *rpcServer) NotifyRegistrationStatus(_ context.Context, status *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.logger.V(4).Info("NotifyRegistrationStatus called by kubelet", "driver", r.name, "registered", status.PluginRegistered, "error", status.Error)
	r.s.send(kubeletCall{gen: r.gen, notify: true, registered: status.PluginRegistered, reason: status.Error})
	return &registerapi.RegistrationStatusResponse{}, nil
}
