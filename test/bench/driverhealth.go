package main

import (
	"context"
	"fmt"
	"slices"
)

// driverHealthPairs is how many registrars are started with and without
// --driver-health-endpoint, alternately, for the memory figures.
const driverHealthPairs = 5

// measureDriverHealth measures what --driver-health-endpoint costs: the
// registrar's memory once registered, with and without the flag (pairs of
// fresh registrars, started alternately, so that both see the same
// machine); then, on one with the flag, the latency and the registrar's CPU
// of the driver's liveness probe, one request after another on a new
// connection each as kubelet's prober sends them, each one an
// Identity.Probe call to the test driver; the registrar's own /healthz on
// the same process for comparison; and its memory after those probes.
func measureDriverHealth(ctx context.Context, cfg config) ([]figure, error) {
	var off, on []int64
	for range min(cfg.runs, driverHealthPairs) {
		for _, flag := range []bool{false, true} {
			var args []string
			if flag {
				addr, err := freeTCPAddress()
				if err != nil {
					return nil, err
				}
				args = []string{"--driver-health-endpoint=" + addr}
			}
			n, err := registered(ctx, cfg, args...)
			if err != nil {
				return nil, err
			}
			mem, err := readMemory(n.registrar.pid())
			n.close()
			if err != nil {
				return nil, err
			}
			if flag {
				on = append(on, mem.vmRSS)
			} else {
				off = append(off, mem.vmRSS)
			}
		}
	}
	memoryFigure := func(name string, sample []int64) figure {
		return figure{name: name, stat: "median", value: megabytes(medianInt64(sample)), unit: "MB",
			reference: true, note: "(no target: for comparison)",
			detail: fmt.Sprintf("(min %s, max %s MB; %d registrars)", trim(megabytes(slices.Min(sample))), trim(megabytes(slices.Max(sample))), len(sample))}
	}
	figures := []figure{
		memoryFigure("VmRSS after registration, without --driver-health-endpoint", off),
		memoryFigure("VmRSS after registration, with --driver-health-endpoint", on),
	}

	healthAddr, err := freeTCPAddress()
	if err != nil {
		return nil, err
	}
	n, err := registered(ctx, cfg, "--driver-health-endpoint="+healthAddr)
	if err != nil {
		return nil, err
	}
	defer n.close()
	for _, target := range []struct{ name, addr string }{
		{"driver liveness /healthz (Identity.Probe), sequential", healthAddr},
		{"the registrar's own /healthz, same process, sequential", n.httpAddr},
	} {
		result, err := probeLoad(ctx, target.addr, n.registrar, cfg, 1, false)
		if err != nil {
			return nil, err
		}
		figures = append(figures, figure{
			name: target.name, stat: "p50", value: ms(result.latencies.median()), unit: "ms",
			reference: true, note: "(no target: for comparison)",
			detail: fmt.Sprintf("(new connection per request; p99 %s ms; registrar CPU %.0f µs/request; %d requests)",
				trim(ms(result.latencies.quantile(0.99))), float64(result.serverCPU.Microseconds())/float64(len(result.latencies)), len(result.latencies)),
		})
	}
	mem, err := readMemory(n.registrar.pid())
	if err != nil {
		return nil, err
	}
	figures = append(figures, figure{
		name: "VmRSS after those probes, with --driver-health-endpoint", stat: "now", value: megabytes(mem.vmRSS), unit: "MB",
		reference: true, note: "(no target: the steady state)",
		detail: fmt.Sprintf("(RssAnon %s MB; %d driver probes, %d of its own)", trim(megabytes(mem.rssAnon)), cfg.healthzRequests, cfg.healthzRequests),
	})
	return figures, nil
}
