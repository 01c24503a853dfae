// Package registration publishes <driver>-reg.sock in kubelet's plugin
// registry, serves kubelet's plugin registration API on it, and keeps it
// there: published again when deleted, rejected or renamed, handed over to
// (or taken from) another instance of the same driver, which package
// handover carries out.
package registration

import (
	"context"
	"errors"
	"fmt"
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

// SupportedVersions: kubelet's CSI handler requires the highest to be 1.x.
var SupportedVersions = []string{"1.0.0"}

// Defaults for Config.
const (
	DefaultShutdownTimeout = 3 * time.Second // of a gRPC server
	DefaultCheckTimeout    = time.Second
)

// kubeletSilence: kubelet's plugin watcher calls GetInfo at once, its
// reconciler within a second.
const kubeletSilence = 10 * time.Second

// rejectionBackoff starts over once kubelet accepts.
var rejectionBackoff = doubling(time.Second, 5*time.Minute)

// Policy says what to do when kubelet rejects the plugin.
type Policy string

const (
	// Retry publishes the socket again after a backoff until kubelet accepts.
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
	// ReasonCSINodeLost: CSINode lost the driver kubelet had registered.
	ReasonCSINodeLost = "csinode-lost"
	// ReasonHandover: the previous instance handed its socket over.
	ReasonHandover = "handover"
)

// Config says where to register and how to behave.
type Config struct {
	// Endpoint is the driver's socket on the host, given to kubelet as is.
	Endpoint string
	// Dir is kubelet's plugin registry directory as mounted here.
	Dir string
	// OnRejection is Retry when empty.
	OnRejection Policy
	// CheckTimeout bounds each call to a socket another process published.
	CheckTimeout time.Duration
	// Clock is the real one when nil.
	Clock clock.WithTicker
	// ConfirmCSINode: registered only once ReportCSINode says CSINode lists
	// the driver; a CSINode that loses it gets a new publication.
	ConfirmCSINode bool
}

// RejectedError is returned by Run when kubelet did not accept the plugin
// and the policy is Exit.
type RejectedError struct {
	Reason string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("kubelet rejected the plugin: %s", e.Reason)
}

// Server publishes the registration socket and answers kubelet on it.
// Run's event loop alone owns the registration; others send it events and
// read the immutable snapshot it stores after each.
type Server struct {
	cfg             Config
	shutdownTimeout time.Duration

	// driver and csinode hold the latest report the loop has not taken;
	// reports makes each replacement of one a single step.
	driver  chan driverReport
	csinode chan CSINodeReport
	reports sync.Mutex
	events  chan event
	// done is closed once the loop no longer reads events; only what the
	// loop started sends them.
	done chan struct{}
	ran  atomic.Bool

	started   time.Time
	shared    atomic.Pointer[snapshot]
	observers []Observer
}

// An Observer is given each snapshot, with what happened since the last,
// on the registration's goroutine: it must not block.
type Observer func(now Status, happened []Transition)

// snapshot is never written once stored, nor anything it points to; pub
// is for the tests, which stop its server as a killed process would.
type snapshot struct {
	m   machine
	pub *publication // nil while none is served
}

// driverReport is what the driver's side said; name is "" when it named none.
type driverReport struct {
	name      string
	reachable bool
	err       string // why it cannot be asked, from DriverUnreachable
}

// publication is one socket with its own gRPC server, whose handlers send
// the loop its generation: kubelet's verdicts count for the one they came
// through only. Not written once installed.
type publication struct {
	sock *sockfile.Socket
	grpc *grpc.Server
}

// Validate says what is wrong with cfg's values; New checks the directory.
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

// ConfigError is a value of Config that cannot be used; Field names it.
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func dirError(err error) error { return &ConfigError{Field: "Dir", Err: err} }

// New checks cfg; Run publishes the socket once DriverFound names the driver.
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
	s.shared.Store(&snapshot{m: newMachine(cfg, s.started)})
	return s, nil
}

// DriverFound tells the driver's name; another name re-registers. It does
// not block.
func (s *Server) DriverFound(name string) {
	s.report(driverReport{name: name, reachable: true})
}

// DriverGone keeps the registration: kubelet needs the driver only when it
// calls it.
func (s *Server) DriverGone() {
	s.report(driverReport{reachable: false})
}

// DriverUnreachable records why the driver could not be asked, until
// DriverFound. It does not block.
func (s *Server) DriverUnreachable(why string) {
	s.report(driverReport{reachable: false, err: why})
}

// report merges with a report the loop has not taken: the latest name and
// reachability win.
func (s *Server) report(r driverReport) {
	s.reports.Lock()
	defer s.reports.Unlock()
	select {
	case old := <-s.driver:
		if r.name == "" {
			r.name = old.name
		}
	default:
	}
	s.driver <- r
}

// CSINodeReport is what was found of the driver in this node's CSINode.
type CSINodeReport struct {
	// Listed: the current Node's CSINode lists the driver.
	Listed bool
	// Missing: no CSINode, or it does not list the driver: a registration
	// made again restores it.
	Missing bool
	// Reason says what was found when not Listed.
	Reason string
}

// ReportCSINode replaces a report the loop has not taken; it does not block.
func (s *Server) ReportCSINode(r CSINodeReport) {
	s.reports.Lock()
	defer s.reports.Unlock()
	select {
	case <-s.csinode:
	default:
	}
	s.csinode <- r
}

// Observe adds an observer of the registration; call it before Run.
func (s *Server) Observe(o Observer) { s.observers = append(s.observers, o) }

// send returns false when the loop has returned.
func (s *Server) send(ev event) bool {
	select {
	case s.events <- ev:
		return true
	case <-s.done:
		return false
	}
}

// Run serves kubelet until ctx is done (or, with Exit, a *RejectedError).
// On return the socket is removed if it is still ours, and in-flight
// replies have gone out. A Server runs once.
func (s *Server) Run(ctx context.Context) error {
	if !s.ran.CompareAndSwap(false, true) {
		return errors.New("the registration server has already run")
	}
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
	l := &loop{s: s, ctx: loopCtx, logger: logger, m: newMachine(s.cfg, s.started), outcomes: make(chan outcome, 1)}
	// Stopped until the machine has a deadline.
	l.timer = s.cfg.Clock.NewTimer(time.Hour)
	l.timer.Stop()
	l.unfollowOwner = func() {}
	err = l.run(watcher)
	// Senders (RPC handlers among them) must not wait for a loop that is
	// gone, or the gRPC servers' graceful stop would wait for them.
	close(s.done)
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
