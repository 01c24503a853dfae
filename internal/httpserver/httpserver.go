// Package httpserver makes the registrar's HTTP servers, bounded in what a
// client on the pod network can make them hold, and shut down in one way.
package httpserver

import (
	"container/list"
	"context"
	"errors"
	"net"
	"net/http"
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
