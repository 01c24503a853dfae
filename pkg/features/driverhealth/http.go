package driverhealth

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/internal/httpserver"
	"github.com/csi-registrar/node-driver-registrar/internal/sockerr"
)

// Path is livenessprobe's.
const Path = "/healthz"

const listenRetry = 100 * time.Millisecond

// ServeHTTP answers Path, for any method, as livenessprobe does.
func (p *Prober) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		http.NotFound(w, r)
		return
	}
	err := p.Probe(r.Context())
	p.logOutcome(r.Context(), err)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(err.Error()))
		return
	}
	_, _ = w.Write([]byte("ok"))
}

// logOutcome logs a change of outcome at level 0, each probe at V(5).
func (p *Prober) logOutcome(ctx context.Context, err error) {
	logger := klog.FromContext(ctx)
	outcome := ""
	if err != nil {
		outcome = err.Error()
	}
	last := p.lastOutcome.Swap(&outcome)
	changed := last == nil || *last != outcome
	switch {
	case !changed:
		logger.V(5).Info("CSI driver probe", "ok", err == nil, "err", err)
	case err == nil:
		logger.Info("CSI driver probe passes", "path", p.path)
	default:
		logger.Info("CSI driver probe fails", "path", p.path, "err", err)
	}
}

// Serve answers the probe on address until ctx is done. An address in use is
// waited for: with hostNetwork the older pod of a rolling update holds it.
func (p *Prober) Serve(ctx context.Context, address string, shutdownTimeout time.Duration) error {
	defer p.Close()
	logger := klog.FromContext(ctx)
	l, err := p.listen(ctx, address)
	if err != nil {
		return err
	}
	if l == nil {
		return nil
	}
	logger.Info("Serving the CSI driver's liveness probe", "address", l.Addr().String(), "path", Path, "probeTimeout", p.timeout)
	srv := httpserver.New(ctx, p)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case err := <-served:
		return fmt.Errorf("serving %q: %w", address, err)
	case <-ctx.Done():
	}
	err = httpserver.Shutdown(ctx, srv, shutdownTimeout)
	<-served
	return err
}

// listen returns nil, nil when ctx is done first.
func (p *Prober) listen(ctx context.Context, address string) (net.Listener, error) {
	// No TCP keep-alive: probes are short requests (see cmd/registrar).
	lc := net.ListenConfig{KeepAlive: -1}
	logged := false
	for {
		l, err := lc.Listen(ctx, "tcp", address)
		if err == nil {
			return l, nil
		}
		if !sockerr.AddrInUse(err) {
			if ctx.Err() != nil {
				return nil, nil
			}
			return nil, fmt.Errorf("cannot listen on %q: %w", address, err)
		}
		if !logged {
			klog.FromContext(ctx).Info("The driver health endpoint's address is in use: waiting for it; the registration goes on meanwhile", "address", address, "interval", listenRetry)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-p.clock.After(listenRetry):
		}
	}
}
