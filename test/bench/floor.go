package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// floorFlag makes the bench binary serve as the reference HTTP server.
const floorFlag = "serve-reference-http"

// serveReferenceHTTP is the reference the /healthz figures are read
// against: net/http with a handler that only writes a fixed answer, in a
// process of its own like the registrar. Its latency under the same load
// is what this machine allows any net/http server, before the registrar's
// own work.
func serveReferenceHTTP(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	}))
}

// referenceHTTP starts the bench binary itself as the reference server
// and returns it once it accepts connections.
func referenceHTTP(ctx context.Context, env []string) (*process, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	addr, err := freeTCPAddress()
	if err != nil {
		return nil, "", err
	}
	p, err := start("reference HTTP server", env, self, "-"+floorFlag+"="+addr)
	if err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	for {
		conn, err := net.DialTimeout("tcp", addr, stepTimeout)
		if err == nil {
			_ = conn.Close()
			return p, addr, nil
		}
		select {
		case <-ctx.Done():
			p.stop()
			return nil, "", p.failed("the reference HTTP server did not listen", fmt.Errorf("%w: %w", ctx.Err(), err))
		case <-p.exited:
			return nil, "", p.failed("the reference HTTP server did not listen", err)
		case <-time.After(pollInterval):
		}
	}
}
