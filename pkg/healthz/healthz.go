// Package healthz serves the registrar's HTTP endpoint: the /healthz
// liveness probe and, when enabled, the Go profiler under /debug/pprof/.
package healthz

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// Checker reports the state of the registration socket.
type Checker interface {
	Health(ctx context.Context) registration.Health
}

// Server answers probes for the registrar.
type Server struct {
	mux *http.ServeMux

	mu       sync.Mutex
	checker  Checker
	lastCode int
}

// New builds the HTTP handlers; with enablePprof it also serves the Go
// profiler under /debug/pprof/.
func New(enablePprof bool) *Server {
	s := &Server{mux: http.NewServeMux(), lastCode: http.StatusOK}
	s.mux.HandleFunc("GET /healthz", s.serveHealthz)
	if enablePprof {
		s.mux.HandleFunc("/debug/pprof/", pprof.Index)
		s.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		s.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		s.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		s.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return s
}

// SetChecker starts checking the registration socket. Until it is called,
// the registrar is waiting for its driver and /healthz answers 200:
// waiting is not a fault that restarting the container would fix.
func (s *Server) SetChecker(c Checker) {
	s.mu.Lock()
	s.checker = c
	s.mu.Unlock()
}

// ServeHTTP makes the Server usable as a handler in tests.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

func (s *Server) serveHealthz(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	checker := s.checker
	s.mu.Unlock()

	code, reason := http.StatusOK, "waiting for the CSI driver"
	if checker != nil {
		h := checker.Health(r.Context())
		code, reason = statusCode(h.State), h.Reason
	}
	s.logChange(r.Context(), code, reason)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, reason)
}

// statusCode maps a socket state to the answer a liveness probe expects.
// A socket published by a newer instance of the driver is healthy: a
// restart of this older instance would take the registration back from
// it. A missing socket is 404, as upstream answers.
func statusCode(state registration.State) int {
	switch state {
	case registration.Serving, registration.Superseded, registration.Starting:
		return http.StatusOK
	case registration.Missing:
		return http.StatusNotFound
	default:
		return http.StatusInternalServerError
	}
}

// logChange logs each probe at V(5) and only a change of outcome at the
// default level, so a failing probe does not flood the log.
func (s *Server) logChange(ctx context.Context, code int, reason string) {
	logger := klog.FromContext(ctx)
	s.mu.Lock()
	previous := s.lastCode
	s.lastCode = code
	s.mu.Unlock()
	switch {
	case code == previous:
		logger.V(5).Info("Health probe", "status", code, "reason", reason)
	case code == http.StatusOK:
		logger.Info("Health probe passes again", "reason", reason)
	default:
		logger.Info("Health probe fails", "status", code, "reason", reason)
	}
}

// Run serves on l until ctx is done, then shuts the server down, giving
// open requests up to shutdownTimeout to finish.
func (s *Server) Run(ctx context.Context, l net.Listener, shutdownTimeout time.Duration) error {
	logger := klog.FromContext(ctx)
	srv := &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	logger.Info("Serving HTTP", "address", l.Addr().String())

	select {
	case err := <-served:
		return fmt.Errorf("HTTP server on %s stopped: %w", l.Addr(), err)
	case <-ctx.Done():
	}
	// The base context is done, so the shutdown gets a fresh one.
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	if serveErr := <-served; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}
