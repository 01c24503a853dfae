package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// flood is what one pod anywhere in the cluster can do to the HTTP
// endpoint, which listens on the pod network without authentication: hold
// many connections open, each costing the registrar memory.
type flood struct {
	name  string
	conns int
	// header is sent on each connection, as far as the registrar reads
	// it; empty: the connections never send a byte.
	header []byte
}

// unfinishedHeader is a request head of 1 MiB that never ends: its last
// field has no line end.
func unfinishedHeader() []byte {
	const prefix = "GET /healthz HTTP/1.1\r\nHost: bench\r\nX-Filler: "
	return []byte(prefix + strings.Repeat("a", 1<<20-len(prefix)))
}

// measureFlood floods the HTTP endpoint of a registered registrar, each
// flood on a fresh one, and reads its peak memory and how long a
// legitimate probe of /healthz takes meanwhile.
func measureFlood(ctx context.Context, cfg config) ([]figure, error) {
	var figures []figure
	for _, f := range []flood{
		{name: fmt.Sprintf("%d unfinished 1 MiB headers", cfg.floodHeaderConns), conns: cfg.floodHeaderConns, header: unfinishedHeader()},
		{name: fmt.Sprintf("%d idle connections", cfg.floodIdleConns), conns: cfg.floodIdleConns},
	} {
		fs, err := floodOnce(ctx, cfg, f)
		if err != nil {
			return nil, err
		}
		figures = append(figures, fs...)
	}
	return figures, nil
}

// floodOnce floods a freshly registered registrar, so that its peak memory
// (VmHWM) is the flood's.
func floodOnce(ctx context.Context, cfg config, f flood) ([]figure, error) {
	if err := ensureOpenFiles(f.conns + 256); err != nil {
		return nil, err
	}
	n, err := registered(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer n.close()
	return n.flood(ctx, f, cfg.floodHold)
}

// flood opens f's connections, sends each its header, and holds them for
// hold while a probe client makes one request after another on new
// connections, as kubelet's prober does, and VmRSS is read after each.
func (n *node) flood(ctx context.Context, f flood, hold time.Duration) ([]figure, error) {
	before, err := readMemory(n.registrar.pid())
	if err != nil {
		return nil, err
	}

	dialer := net.Dialer{Timeout: stepTimeout, KeepAlive: -1}
	conns := make([]net.Conn, 0, f.conns)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range f.conns {
		c, err := dialer.DialContext(ctx, "tcp", n.httpAddr)
		if err != nil {
			return nil, n.registrar.failed(fmt.Sprintf("opening connection %d of %d", len(conns)+1, f.conns), err)
		}
		conns = append(conns, c)
	}
	// Each connection sends its header, as far as the registrar reads it,
	// then reads until the registrar closes it or the flood ends, hold
	// after the last header was sent.
	var closedByServer atomic.Int64
	var attackers, sending sync.WaitGroup
	for _, c := range conns {
		sending.Add(1)
		attackers.Go(func() {
			var err error
			if len(f.header) > 0 {
				if err = c.SetWriteDeadline(time.Now().Add(stepTimeout)); err == nil {
					_, err = c.Write(f.header)
				}
			}
			sending.Done()
			for buf := make([]byte, 512); err == nil; {
				_, err = c.Read(buf)
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				closedByServer.Add(1)
			}
		})
	}
	sent := make(chan struct{})
	go func() { sending.Wait(); close(sent) }()
	defer func() {
		for _, c := range conns {
			_ = c.SetDeadline(time.Now())
		}
		attackers.Wait()
	}()

	var latencies durations
	var failed int
	var firstFailure error
	peakRSS := before.vmRSS
	var end <-chan time.Time
	for held := false; !held; {
		client := newProbeClient(n.httpAddr, "/healthz", false)
		started := time.Now()
		code, err := client.get()
		latencies = append(latencies, time.Since(started))
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("GET /healthz: %d", code)
		}
		if err != nil {
			if failed++; firstFailure == nil {
				firstFailure = err
			}
		}
		mem, err := readMemory(n.registrar.pid())
		if err != nil {
			return nil, n.registrar.failed("reading VmRSS", err)
		}
		peakRSS = max(peakRSS, mem.vmRSS)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-sent:
			sent, end = nil, time.After(hold)
		case <-end:
			held = true
		case <-time.After(20 * time.Millisecond):
		}
	}
	after, err := readMemory(n.registrar.pid())
	if err != nil {
		return nil, n.registrar.failed("reading VmRSS", err)
	}

	worst := latencies.max().Seconds()
	probes := fmt.Sprintf("(median %s ms; %d probes, one connection each)", trim(ms(latencies.median())), len(latencies))
	if failed > 0 {
		worst = math.Inf(1)
		probes = fmt.Sprintf("(%d of %d probes failed, the first: %v)", failed, len(latencies), firstFailure)
	}
	return []figure{
		{
			name: f.name + ": VmRSS", stat: "peak", value: megabytes(after.vmHWM), unit: "MB",
			atMost: true, target: 48,
			detail: fmt.Sprintf("(VmHWM; VmRSS %s MB before, at most %s MB when read, %s MB at the end; the registrar closed %d of %d connections, held %s once all were open and their headers sent)",
				trim(megabytes(before.vmRSS)), trim(megabytes(peakRSS)), trim(megabytes(after.vmRSS)),
				closedByServer.Load(), f.conns, hold),
		},
		{
			name: "… /healthz meanwhile", stat: "worst", value: worst, unit: "s",
			atMost: true, target: 1, detail: probes,
		},
	}, nil
}
