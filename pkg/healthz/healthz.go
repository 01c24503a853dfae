// Package healthz serves the registrar's HTTP endpoint: the /healthz
// liveness probe, the /readyz readiness probe, /status, /metrics and, when
// enabled, the Go profiler under /debug/pprof/.
package healthz

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/internal/httpserver"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// A Feature is an optional part of the registrar that reports here, so
// that this package imports none.
type Feature interface {
	// StatusSection is its /status section under a plain ASCII key; "" for none.
	StatusSection() (key string, value any)
	Metrics() prometheus.Gatherer
}

// Options configure the HTTP endpoint.
type Options struct {
	Features []Feature
	// EnablePprof serves the Go profiler under /debug/pprof/.
	EnablePprof bool
	Version     string
	// FailureLimit fails /healthz, so that kubelet restarts the container
	// as upstream's exit would.
	FailureLimit registration.FailureLimit
}

// Server answers probes and scrapes for the registrar.
type Server struct {
	opts         Options
	mux          *http.ServeMux
	registration *registration.Server
	revision     string // the commit built, for the build_info metric

	// No status snapshot holds the driver's calls: counted as they happen.
	pluginInfo       prometheus.Histogram
	pluginInfoErrors *prometheus.CounterVec // by gRPC code

	lastCode atomic.Int64 // of /healthz, so that only a change is logged
}

// New builds the HTTP handlers, reporting on reg.
func New(reg *registration.Server, opts Options) *Server {
	s := &Server{
		opts:         opts,
		mux:          http.NewServeMux(),
		registration: reg,
		revision:     vcsRevision(),
	}
	s.pluginInfo = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "csi_node_driver_registrar_driver_get_plugin_info_duration_seconds",
		Help:    "Duration of GetPluginInfo calls to the CSI driver, failed ones included.",
		Buckets: pluginInfoBuckets,
	})
	s.pluginInfoErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "csi_node_driver_registrar_driver_get_plugin_info_errors_total",
		Help: "Failed GetPluginInfo calls to the CSI driver, by gRPC code.",
	}, []string{"code"})
	s.lastCode.Store(http.StatusOK)
	s.mux.HandleFunc("GET /healthz", s.serveHealthz)
	s.mux.HandleFunc("GET /readyz", s.serveReadyz)
	s.mux.HandleFunc("GET /status", s.serveStatus)
	s.mux.Handle("GET /metrics", s.metricsHandler())
	if opts.EnablePprof {
		s.mux.HandleFunc("/debug/pprof/", pprof.Index)
		s.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		s.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		s.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		s.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return s
}

// ObservePluginInfo records one GetPluginInfo call to the CSI driver.
func (s *Server) ObservePluginInfo(d time.Duration, err error) {
	s.pluginInfo.Observe(d.Seconds())
	if err != nil {
		s.pluginInfoErrors.WithLabelValues(status.Code(err).String()).Inc()
	}
}

// serveHealthz counts a newer instance's socket healthy: restarting this
// older one would take the registration back from it.
func (s *Server) serveHealthz(w http.ResponseWriter, r *http.Request) {
	reason, err := s.registration.Health()
	code := http.StatusOK
	switch {
	case errors.Is(err, fs.ErrNotExist):
		code, reason = http.StatusNotFound, err.Error() // as upstream answers
	case err != nil:
		code, reason = http.StatusInternalServerError, err.Error()
	default:
		if f, tooLong := s.opts.FailureLimit.Exceeded(s.registration.Status()); tooLong {
			code = http.StatusServiceUnavailable
			reason = fmt.Sprintf("the registration has failed for %v (the limit is %v): %s", f.Lasted.Round(time.Second), s.opts.FailureLimit.After, f.Reason)
		}
	}
	s.logChange(r.Context(), code, reason)
	// http.Error writes any answer as plain text, a 200 too.
	http.Error(w, reason, code)
}

// serveReadyz tells operators and rollouts whether the driver is
// registered; an unready pod is not restarted.
func (s *Server) serveReadyz(w http.ResponseWriter, r *http.Request) {
	st := s.registration.Status()
	code := http.StatusOK
	if !st.Ready {
		code = http.StatusServiceUnavailable
	}
	klog.FromContext(r.Context()).V(5).Info("Readiness probe", "status", code, "reason", st.Reason)
	http.Error(w, st.Reason, code)
}

type statusDocument struct {
	Version string `json:"version"`
	registration.Status
}

func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) {
	doc, err := json.Marshal(statusDocument{Version: s.opts.Version, Status: s.registration.Status()})
	for _, f := range s.opts.Features {
		if key, section := f.StatusSection(); key != "" && err == nil {
			var v []byte
			v, err = json.Marshal(section)
			// The section goes in before the document's closing brace.
			doc = fmt.Appendf(doc[:len(doc)-1], ",%q:%s}", key, v)
		}
	}
	var out bytes.Buffer
	if err == nil {
		err = json.Indent(&out, doc, "", "  ")
	}
	if err != nil {
		klog.FromContext(r.Context()).Error(err, "Cannot encode /status")
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	out.WriteByte('\n')
	_, _ = out.WriteTo(w)
}

// logChange logs only a change of outcome at the default level, so that a
// failing probe does not flood the log.
func (s *Server) logChange(ctx context.Context, code int, reason string) {
	logger := klog.FromContext(ctx)
	previous := int(s.lastCode.Swap(int64(code)))
	switch {
	case code == previous:
		logger.V(5).Info("Health probe", "status", code, "reason", reason)
	case code == http.StatusOK:
		logger.Info("Health probe passes again", "reason", reason)
	default:
		logger.Info("Health probe fails", "status", code, "reason", reason)
	}
}

// Serve serves each listener received and calls lost when one stops, until
// ctx is done. Without a listener it keeps no connection either, so that a
// kept-alive scraper reaches whoever listens on the address now.
func (s *Server) Serve(ctx context.Context, listeners <-chan net.Listener, lost func(net.Listener), shutdownTimeout time.Duration) error {
	logger := klog.FromContext(ctx)
	srv := httpserver.New(ctx, s.mux)
	var serving sync.WaitGroup
	defer serving.Wait()
	var mu sync.Mutex
	open := 0 // listeners served
	for {
		select {
		case l := <-listeners:
			logger.Info("Serving HTTP", "address", l.Addr().String())
			mu.Lock()
			if open++; open == 1 {
				srv.SetKeepAlivesEnabled(true)
			}
			mu.Unlock()
			serving.Go(func() {
				err := srv.Serve(l)
				if errors.Is(err, http.ErrServerClosed) {
					return
				}
				logger.V(2).Info("Stopped serving HTTP on a listener", "address", l.Addr().String(), "err", err)
				mu.Lock()
				if open--; open == 0 {
					srv.SetKeepAlivesEnabled(false)
				}
				mu.Unlock()
				lost(l)
			})
		case <-ctx.Done():
			return httpserver.Shutdown(ctx, srv, shutdownTimeout)
		}
	}
}
