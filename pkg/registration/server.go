// Package registration is the kubelet-facing side of the registrar: it
// publishes <driver>-reg.sock in kubelet's plugin registry directory and
// serves kubelet's plugin registration API (pluginregistration.v1) on it.
package registration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// SupportedVersions is what the registrar tells kubelet about the CSI
// driver: kubelet's CSI handler requires the highest version to be 1.x.
var SupportedVersions = []string{"1.0.0"}

// DefaultShutdownTimeout bounds the graceful stop of the gRPC server.
const DefaultShutdownTimeout = 5 * time.Second

// Config says what to register and where.
type Config struct {
	// DriverName is the CSI driver's name from GetPluginInfo.
	DriverName string
	// Endpoint is the driver's socket as kubelet sees it on the host
	// (--kubelet-registration-path); it is returned to kubelet verbatim.
	Endpoint string
	// Dir is kubelet's plugin registry directory as mounted here
	// (--plugin-registration-path).
	Dir string
	// CheckTimeout bounds the GetInfo call that identifies a socket at the
	// path that this process did not create.
	CheckTimeout time.Duration
	// ShutdownTimeout bounds the graceful stop of the gRPC server;
	// DefaultShutdownTimeout when zero.
	ShutdownTimeout time.Duration
}

// RejectedError is returned by Run when kubelet did not accept the plugin.
type RejectedError struct {
	// Reason is kubelet's error message from NotifyRegistrationStatus.
	Reason string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("kubelet rejected the plugin: %s", e.Reason)
}

// Server publishes the registration socket and answers kubelet on it.
type Server struct {
	cfg      Config
	path     string
	grpc     *grpc.Server
	rejected chan string

	mu         sync.Mutex
	logger     logr.Logger
	sock       *publishedSocket
	stopped    bool
	registered bool

	identity foreignCache
}

// New checks cfg and prepares a server; Run publishes the socket.
func New(cfg Config) (*Server, error) {
	if cfg.DriverName == "" {
		return nil, errors.New("registration: the driver name is empty")
	}
	if cfg.Endpoint == "" {
		return nil, errors.New("--kubelet-registration-path is required: set it to the CSI driver's socket path on the host, e.g. /var/lib/kubelet/plugins/<driver>/csi.sock")
	}
	if err := CheckDir(cfg.Dir); err != nil {
		return nil, err
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = time.Second
	}
	s := &Server{
		cfg:      cfg,
		path:     SocketPath(cfg.Dir, cfg.DriverName),
		grpc:     grpc.NewServer(),
		rejected: make(chan string, 1),
		logger:   klog.Background(),
	}
	if len(s.path) > MaxSocketPathLength {
		_, err := checkSocketPath(s.path)
		return nil, err
	}
	registerapi.RegisterRegistrationServer(s.grpc, &rpcServer{s: s})
	return s, nil
}

// SocketPath is where the registration socket is published.
func (s *Server) SocketPath() string { return s.path }

// Run publishes the registration socket and serves kubelet until ctx is
// done or kubelet rejects the plugin (a *RejectedError). Either way it
// removes the socket if it is still the one it published, and stops the
// gRPC server after in-flight replies have gone out.
func (s *Server) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("driver", s.cfg.DriverName)
	s.mu.Lock()
	s.logger = logger
	s.mu.Unlock()

	exists, err := checkSocketPath(s.path)
	if err != nil {
		return err
	}
	if exists {
		logger.Info("Replacing the registration socket left at the path", "path", s.path, "live", socketAnswers(s.path, s.cfg.CheckTimeout))
	}
	sock, err := publish(s.path)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.sock = sock
	s.mu.Unlock()
	logger.Info("Registration socket published, waiting for kubelet", "path", s.path, "endpoint", s.cfg.Endpoint)

	served := make(chan error, 1)
	go func() { served <- s.grpc.Serve(sock) }()

	var result error
	select {
	case <-ctx.Done():
	case reason := <-s.rejected:
		result = &RejectedError{Reason: reason}
	case err := <-served:
		result = fmt.Errorf("the registration server stopped unexpectedly: %w", err)
	}
	s.shutdown(logger)
	return result
}

// shutdown withdraws the registration before it stops answering, so that
// kubelet deregisters the driver rather than failing to reach it.
func (s *Server) shutdown(logger logr.Logger) {
	s.mu.Lock()
	s.stopped = true
	sock := s.sock
	s.mu.Unlock()

	removed, err := sock.removeIfOurs()
	switch {
	case err != nil:
		logger.Error(err, "Cannot remove the registration socket", "path", s.path)
	case removed:
		logger.Info("Registration socket removed", "path", s.path)
	default:
		logger.Info("Registration socket left in place: another instance published it", "path", s.path)
	}

	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	timer := time.NewTimer(s.cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		logger.Info("Graceful stop timed out, closing open kubelet connections", "timeout", s.cfg.ShutdownTimeout)
		s.grpc.Stop()
		<-done
	}
}

// rpcServer implements kubelet's registration API for a Server.
type rpcServer struct {
	registerapi.UnimplementedRegistrationServer
	s *Server
}

func (r *rpcServer) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	s := r.s
	s.log().V(4).Info("GetInfo called by kubelet")
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.cfg.DriverName,
		Endpoint:          s.cfg.Endpoint,
		SupportedVersions: SupportedVersions,
	}, nil
}

func (r *rpcServer) NotifyRegistrationStatus(_ context.Context, status *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	s := r.s
	logger := s.log()
	logger.V(4).Info("NotifyRegistrationStatus called by kubelet", "registered", status.PluginRegistered, "error", status.Error)

	s.mu.Lock()
	changed := s.registered != status.PluginRegistered
	s.registered = status.PluginRegistered
	s.mu.Unlock()

	if status.PluginRegistered {
		// kubelet confirms again after each of its restarts: only a
		// change is worth a line at the default level.
		if changed {
			logger.Info("kubelet registered the driver", "endpoint", s.cfg.Endpoint)
		} else {
			logger.V(2).Info("kubelet confirmed the registration again")
		}
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	select {
	case s.rejected <- status.Error:
		logger.Error(nil, "kubelet rejected the plugin", "reason", status.Error)
	default:
		// Already stopping for an earlier rejection.
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (s *Server) log() logr.Logger {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logger
}
