// Package httpserver makes the registrar's HTTP servers, bounded in what a
// client on the pod network can make them hold, and shut down in one way.
package httpserver

import (
	"container/list"
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// New is an HTTP server for handler whose requests carry ctx.
func New(ctx context.Context, handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    MaxHeaderBytes,
		ConnState:         (&connLimiter{byConn: map[net.Conn]*list.Element{}}).track,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
}

// Shutdown gives open requests up to timeout to finish.
func Shutdown(ctx context.Context, srv *http.Server, timeout time.Duration) error {
	// The base context is done, so the shutdown gets a fresh one.
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	return err
}

// Any pod can connect to the endpoint without authentication: these limits
// bound what it holds (docs/probes-and-metrics.md has the figures).
const (
	// MaxHeaderBytes leaves room for a scrape's bearer token several times over.
	MaxHeaderBytes = 16 << 10
	// MaxConnections: legitimate clients need a few.
	MaxConnections = 256
)

// connLimiter closes the least recently changed connection past
// MaxConnections. Unlike netutil's LimitListener it never makes a new client
// wait, so that kubelet's probe is answered during a flood.
type connLimiter struct {
	mu sync.Mutex
	// recent holds the open connections, the least recently changed first.
	recent list.List
	byConn map[net.Conn]*list.Element
}

func (l *connLimiter) track(conn net.Conn, state http.ConnState) {
	var evicted net.Conn
	l.mu.Lock()
	e, open := l.byConn[conn]
	switch {
	case state == http.StateNew:
		l.byConn[conn] = l.recent.PushBack(conn)
		if l.recent.Len() > MaxConnections {
			evicted = l.recent.Remove(l.recent.Front()).(net.Conn)
			delete(l.byConn, evicted)
		}
	case !open:
		// Closed as one too many; its own goroutine has not seen it yet.
	case state == http.StateActive || state == http.StateIdle:
		l.recent.MoveToBack(e)
	default: // closed or hijacked
		l.recent.Remove(e)
		delete(l.byConn, conn)
	}
	l.mu.Unlock()
	if evicted != nil {
		_ = evicted.Close()
	}
}
