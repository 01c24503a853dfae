package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// startFigures come from the same runs: each starts a registrar next to a
// ready driver, registers it, then deletes its socket.
type startFigures struct {
	listen, recreate, rss figure
	// driverListen is the test driver's exec -> listening, for reference.
	driverListen durations
	// version and upstreamVersion are exec -> exit of --version, which
	// returns from main after parsing the flags: what starting the process
	// and initialising its packages cost, before main can do anything.
	version, upstreamVersion durations
	// upstreamListen and upstreamRSS are upstream's registrar's, from runs
	// interleaved with this one's; empty without -upstream.
	upstreamListen durations
	upstreamMemory memorySample
}

func measureStart(ctx context.Context, cfg config) (startFigures, error) {
	var listen, recreate, driverListen durations
	var mem memorySample
	var s startFigures
	for i := range cfg.runs {
		// Upstream's run goes first every other time, so that neither
		// binary always follows the other.
		if cfg.upstream != "" && i%2 == 1 {
			if err := s.startUpstreamOnce(ctx, cfg); err != nil {
				return startFigures{}, err
			}
		}
		d, l, r, m, err := startOnce(ctx, cfg, false)
		if err != nil {
			return startFigures{}, err
		}
		driverListen, listen, recreate = append(driverListen, d), append(listen, l), append(recreate, r)
		mem.add(m)
		if err := s.timeVersion(cfg); err != nil {
			return startFigures{}, err
		}
		if cfg.upstream != "" && i%2 == 0 {
			if err := s.startUpstreamOnce(ctx, cfg); err != nil {
				return startFigures{}, err
			}
		}
	}
	s.listen = figure{
		name: "exec -> registration socket listening, driver ready", stat: "median",
		value: ms(listen.median()), unit: "ms", atMost: true, target: 5, detail: listen.spread(),
	}
	s.recreate = figure{
		name: "registration socket deleted -> re-created", stat: "worst",
		value: ms(recreate.max()), unit: "ms", atMost: true, target: 250, detail: recreate.spread(),
	}
	s.rss = mem.figure()
	s.rss.atMost, s.rss.target = true, 13
	s.driverListen = driverListen
	return s, nil
}

// timeVersion adds one exec -> exit of --version of each binary to s.
func (s *startFigures) timeVersion(cfg config) error {
	for _, b := range []struct {
		bin    string
		env    []string
		sample *durations
	}{{cfg.registrar, cfg.registrarEnv, &s.version}, {cfg.upstream, nil, &s.upstreamVersion}} {
		if b.bin == "" {
			continue
		}
		cmd := exec.Command(b.bin, "--version")
		cmd.Env = append(os.Environ(), b.env...)
		started := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s --version: %w\n%s", b.bin, err, out)
		}
		*b.sample = append(*b.sample, time.Since(started))
	}
	return nil
}

// startUpstreamOnce adds one run of upstream's registrar to s.
func (s *startFigures) startUpstreamOnce(ctx context.Context, cfg config) error {
	_, l, _, mem, err := startOnce(ctx, cfg, true)
	if err != nil {
		return err
	}
	s.upstreamListen = append(s.upstreamListen, l)
	s.upstreamMemory.add(mem)
	return nil
}

// memorySample is the memory of a registrar after registration, one entry
// per run.
type memorySample struct{ rss, anon, file []int64 }

func (m *memorySample) add(mem memory) {
	m.rss, m.anon, m.file = append(m.rss, mem.vmRSS), append(m.anon, mem.rssAnon), append(m.file, mem.rssFile)
}

// figure is the median VmRSS, without a target.
func (m memorySample) figure() figure {
	return figure{
		name: "VmRSS after registration", stat: "median",
		value: megabytes(medianInt64(m.rss)), unit: "MB",
		detail: fmt.Sprintf("(RssAnon %s MB, RssFile %s MB, medians; min %s, max %s MB; %d runs)",
			trim(megabytes(medianInt64(m.anon))), trim(megabytes(medianInt64(m.file))),
			trim(megabytes(slices.Min(m.rss))), trim(megabytes(slices.Max(m.rss))), len(m.rss)),
	}
}

// startOnce times the driver's and the registrar's exec -> listening, reads
// the registrar's memory once kubelet's registration is confirmed, then
// times the re-creation of a deleted socket. For upstream's registrar,
// which does not re-create its socket, it returns once memory is read.
func startOnce(ctx context.Context, cfg config, upstream bool) (driverListen, listen, recreate time.Duration, mem memory, err error) {
	n, err := newNode(cfg)
	if err != nil {
		return 0, 0, 0, memory{}, err
	}
	defer n.close()
	n.upstream = upstream
	if driverListen, err = n.startDriver(ctx, n.driverSock); err != nil {
		return 0, 0, 0, memory{}, err
	}
	waiter, err := newSocketWaiter(n.regSock)
	if err != nil {
		return 0, 0, 0, memory{}, err
	}
	defer waiter.Close()

	started := time.Now()
	if err := n.startRegistrar(); err != nil {
		return 0, 0, 0, memory{}, err
	}
	listening, err := waiter.wait(ctx, stepTimeout)
	if err != nil {
		return 0, 0, 0, memory{}, n.registrar.failed("the registration socket did not listen", err)
	}
	listen = listening.Sub(started)

	if err := n.registerAsKubelet(ctx); err != nil {
		return 0, 0, 0, memory{}, err
	}
	if mem, err = readMemory(n.registrar.pid()); err != nil {
		return 0, 0, 0, memory{}, err
	}
	if upstream {
		return driverListen, listen, 0, mem, nil
	}

	deleted := time.Now()
	if err := os.Remove(n.regSock); err != nil {
		return 0, 0, 0, memory{}, err
	}
	back, err := waiter.wait(ctx, stepTimeout)
	if err != nil {
		return 0, 0, 0, memory{}, n.registrar.failed("the deleted registration socket was not re-created", err)
	}
	return driverListen, listen, back.Sub(deleted), mem, nil
}

// measureDriverAppears starts the registrar first; once it waits for the
// driver, a driver socket that already listens under a hidden name is
// renamed into place, so that the socket appears listening at one instant.
func measureDriverAppears(ctx context.Context, cfg config) (figure, error) {
	var sample durations
	for range cfg.runs {
		d, err := driverAppearsOnce(ctx, cfg)
		if err != nil {
			return figure{}, err
		}
		sample = append(sample, d)
	}
	return figure{
		name: "driver socket appears -> registration socket listening", stat: "worst",
		value: ms(sample.max()), unit: "ms", atMost: true, target: 20, detail: sample.spread(),
	}, nil
}

func driverAppearsOnce(ctx context.Context, cfg config) (time.Duration, error) {
	n, err := newNode(cfg)
	if err != nil {
		return 0, err
	}
	defer n.close()
	hidden := filepath.Join(filepath.Dir(n.driverSock), ".csi.sock")
	if _, err := n.startDriver(ctx, hidden); err != nil {
		return 0, err
	}
	if err := n.startRegistrar(); err != nil {
		return 0, err
	}
	// Logged after the first attempt failed, with the watch in place.
	waitCtx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := n.registrar.output.waitFor(waitCtx, "Waiting for the CSI driver"); err != nil {
		return 0, n.registrar.failed("the registrar did not start waiting for the driver", err)
	}
	waiter, err := newSocketWaiter(n.regSock)
	if err != nil {
		return 0, err
	}
	defer waiter.Close()

	appeared := time.Now()
	if err := os.Rename(hidden, n.driverSock); err != nil {
		return 0, err
	}
	listening, err := waiter.wait(ctx, stepTimeout)
	if err != nil {
		return 0, n.registrar.failed("the registration socket did not listen", err)
	}
	return listening.Sub(appeared), nil
}

// measureHealthz probes a registered registrar's /healthz: with concurrent
// clients, then one at a time; with a new connection for each request, as
// kubelet's prober does, then with kept connections. The concurrent loads
// are also run against the reference HTTP server, for comparison.
func measureHealthz(ctx context.Context, cfg config) ([]figure, error) {
	n, err := registered(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer n.close()
	var figures []figure
	for _, load := range []struct {
		clients   int
		keepAlive bool
	}{{cfg.healthzClients, false}, {cfg.healthzClients, true}, {1, false}, {1, true}} {
		result, err := probeLoad(ctx, n.httpAddr, n.registrar, cfg, load.clients, load.keepAlive)
		if err != nil {
			return nil, err
		}
		figures = append(figures, result.figure())
	}
	// Days of kubelet's probes, in a few seconds: what the registrar
	// keeps resident once its collector has run many times.
	mem, err := readMemory(n.registrar.pid())
	if err != nil {
		return nil, err
	}
	figures = append(figures, figure{
		name: "VmRSS after those /healthz requests", stat: "now", value: megabytes(mem.vmRSS), unit: "MB",
		reference: true, note: "(no target: the steady state)",
		detail: fmt.Sprintf("(RssAnon %s MB, RssFile %s MB; %d requests)", trim(megabytes(mem.rssAnon)), trim(megabytes(mem.rssFile)), 4*cfg.healthzRequests),
	})
	scrape, err := scrapeCPU(n.httpAddr, n.registrar, cfg.healthzRequests/5+1)
	if err != nil {
		return nil, err
	}
	figures = append(figures, scrape)

	ref, addr, err := referenceHTTP(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer ref.stop()
	for _, keepAlive := range []bool{false, true} {
		result, err := probeLoad(ctx, addr, ref, cfg, cfg.healthzClients, keepAlive)
		if err != nil {
			return nil, err
		}
		result.reference = true
		figures = append(figures, result.figure())
	}
	return figures, nil
}

// scrapeCPU GETs /metrics scrapes times, one after another on a kept
// connection as Prometheus scrapes, and returns the registrar's CPU per
// scrape.
func scrapeCPU(addr string, p *process, scrapes int) (figure, error) {
	before, err := readCPU(p.pid())
	if err != nil {
		return figure{}, err
	}
	client := newProbeClient(addr, "/metrics", true)
	defer client.close()
	for range scrapes {
		code, err := client.get()
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("GET /metrics: %d", code)
		}
		if err != nil {
			return figure{}, p.failed("scraping /metrics", err)
		}
	}
	after, err := readCPU(p.pid())
	return figure{
		name: "/metrics scrape: the registrar's CPU", stat: "mean",
		value: float64((after.exact - before.exact).Microseconds()) / float64(scrapes), unit: "µs",
		reference: true, note: "(no target)",
		detail: fmt.Sprintf("(%d scrapes, one after another on a kept connection)", scrapes),
	}, err
}

// measureGetInfo calls GetInfo on the registration socket of a freshly
// registered registrar, as fast as its clients can, and reads the
// registrar's memory before and after.
func measureGetInfo(ctx context.Context, cfg config) ([]figure, error) {
	n, err := registered(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer n.close()
	before, err := readMemory(n.registrar.pid())
	if err != nil {
		return nil, err
	}
	calls, after, err := getInfoThroughput(ctx, n, cfg.getInfoCalls, cfg.getInfoClients)
	if err != nil {
		return nil, err
	}
	return []figure{
		{
			name: fmt.Sprintf("GetInfo over the registration socket, %d clients", cfg.getInfoClients), stat: "rate",
			value: calls, unit: "/s", target: 20000,
			detail: fmt.Sprintf("(%d calls, one connection per client, set up beforehand)", cfg.getInfoCalls),
		},
		{
			name: "GetInfo load: VmRSS growth", stat: "growth",
			value: megabytes(after.vmRSS - before.vmRSS), unit: "MB", atMost: true, target: 4,
			detail: fmt.Sprintf("(VmRSS %s -> %s MB, RssAnon %s -> %s MB, clients still connected)",
				trim(megabytes(before.vmRSS)), trim(megabytes(after.vmRSS)), trim(megabytes(before.rssAnon)), trim(megabytes(after.rssAnon))),
		},
	}, nil
}

// loadResult is what a /healthz load measured.
type loadResult struct {
	clients   int
	keepAlive bool
	latencies durations
	elapsed   time.Duration
	serverCPU time.Duration // the server's, during the load
	// clientProcs is the bench's GOMAXPROCS during the load.
	clientProcs int
	// reference is set for a load on the reference server, not the
	// registrar: its line has no target.
	reference bool
}

// figure is the p99 with concurrent clients, the p50 of a single one.
func (r loadResult) figure() figure {
	connections := "new connections"
	if r.keepAlive {
		connections = "kept connections"
	}
	name, server := "/healthz", "registrar"
	if r.reference {
		name, server = "reference: bare net/http", "server"
	}
	f := figure{name: fmt.Sprintf("%s, %d clients, %s", name, r.clients, connections),
		stat: "p99", value: ms(r.latencies.quantile(0.99)), unit: "ms", atMost: true, target: 1, reference: r.reference}
	if r.clients == 1 {
		f.name = name + ", sequential, " + connections
		f.stat, f.value, f.target = "p50", ms(r.latencies.median()), 0.2
	}
	f.detail = fmt.Sprintf("(p50 %s, p99 %s, max %s ms; %.0f requests/s; %s CPU %.0f µs/request; %d requests; client GOMAXPROCS %d)",
		trim(ms(r.latencies.median())), trim(ms(r.latencies.quantile(0.99))), trim(ms(r.latencies.max())),
		float64(len(r.latencies))/r.elapsed.Seconds(), server, float64(r.serverCPU.Microseconds())/float64(len(r.latencies)), len(r.latencies), r.clientProcs)
	return f
}

// probeLoad makes cfg.healthzRequests GET /healthz requests to the server
// p at addr from clients goroutines, each waiting for its answer before the
// next request, and times each. Meanwhile the bench runs with
// cfg.healthzClientProcs Ps: with Go's default of one per core, the
// client's threads and the server's outnumber the cores of a small machine,
// and the latencies then measure the kernel's time slices more than the
// server (wrk and ab, both one thread, measured lower tails than the
// default did).
func probeLoad(ctx context.Context, addr string, p *process, cfg config, clients int, keepAlive bool) (loadResult, error) {
	requests := cfg.healthzRequests
	result := loadResult{clients: clients, keepAlive: keepAlive, latencies: make(durations, requests)}
	before, err := readCPU(p.pid())
	if err != nil {
		return result, err
	}
	if cfg.healthzClientProcs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(cfg.healthzClientProcs))
	}
	result.clientProcs = runtime.GOMAXPROCS(0)
	var next atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	started := time.Now()
	for range clients {
		g.Go(func() error {
			client := newProbeClient(addr, "/healthz", keepAlive)
			defer client.close()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(requests) {
					return nil
				}
				t := time.Now()
				code, err := client.get()
				result.latencies[i] = time.Since(t)
				if err != nil {
					return err
				}
				if code != http.StatusOK {
					return fmt.Errorf("GET /healthz: %d", code)
				}
			}
			return ctx.Err()
		})
	}
	if err := g.Wait(); err != nil {
		return result, p.failed("probing /healthz", err)
	}
	result.elapsed = time.Since(started)
	after, err := readCPU(p.pid())
	result.serverCPU = after.exact - before.exact
	return result, err
}

// getInfoThroughput connects clients to the registration socket, then
// makes calls GetInfo calls spread over them. It returns the calls per
// second and the registrar's memory after the calls, before the clients
// disconnect.
func getInfoThroughput(ctx context.Context, n *node, calls, clients int) (float64, memory, error) {
	stubs := make([]registerapi.RegistrationClient, clients)
	for i := range stubs {
		conn, err := grpc.NewClient("unix:"+n.regSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return 0, memory{}, err
		}
		defer conn.Close()
		stubs[i] = registerapi.NewRegistrationClient(conn)
		// Connect now: the figure is about calls, not connections.
		if _, err := stubs[i].GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
			return 0, memory{}, n.registrar.failed("GetInfo", err)
		}
	}
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	started := time.Now()
	for _, stub := range stubs {
		g.Go(func() error {
			for next.Add(1) <= int64(calls) {
				if _, err := stub.GetInfo(gctx, &registerapi.InfoRequest{}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, memory{}, n.registrar.failed("GetInfo", err)
	}
	elapsed := time.Since(started)
	after, err := readMemory(n.registrar.pid())
	return float64(calls) / elapsed.Seconds(), after, err
}

// idleSettle is how long after registration the idle figures start.
const idleSettle = 3 * time.Second

// measureIdle leaves a registered registrar alone and counts the CPU it
// uses meanwhile, and how often its threads were woken (time slices), next
// to a bare Go program blocked in Accept over the same time with the same
// environment: what the Go runtime costs any idle server. With -upstream,
// upstream's registrar, registered too, is left alone over the same time.
func measureIdle(ctx context.Context, cfg config) ([]fmt.Stringer, error) {
	n, err := registered(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer n.close()
	var up *node
	if cfg.upstream != "" {
		if up, err = registeredUpstream(ctx, cfg); err != nil {
			return nil, err
		}
		defer up.close()
	}
	bare, _, err := referenceHTTP(ctx, cfg.registrarEnv)
	if err != nil {
		return nil, err
	}
	defer bare.stop()
	// What registration itself set off (the harness's connections
	// closing, a collection) is over within a second or two.
	select {
	case <-time.After(idleSettle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	before, err := readCPU(n.registrar.pid())
	if err != nil {
		return nil, err
	}
	bareBefore, err := readCPU(bare.pid())
	if err != nil {
		return nil, err
	}
	var upBefore cpuUsage
	if up != nil {
		if upBefore, err = readCPU(up.registrar.pid()); err != nil {
			return nil, err
		}
	}
	select {
	case <-time.After(cfg.idle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	after, err := readCPU(n.registrar.pid())
	if err != nil {
		return nil, err
	}
	bareAfter, err := readCPU(bare.pid())
	if err != nil {
		return nil, err
	}
	var upAfter cpuUsage
	if up != nil {
		if upAfter, err = readCPU(up.registrar.pid()); err != nil {
			return nil, err
		}
	}
	// The target is per minute, whatever -idle is.
	perMinute := float64(time.Minute) / float64(cfg.idle)
	wakeUps := figure{
		name: "idle wake-ups per minute, registered", stat: "slices",
		value: float64(after.timeSlices-before.timeSlices) * perMinute, unit: "/min", atMost: true, target: 3,
		detail: fmt.Sprintf("(time slices of all threads, /proc/PID/task/*/schedstat: %d in %s)", after.timeSlices-before.timeSlices, cfg.idle),
	}
	figures := []fmt.Stringer{figure{
		name: fmt.Sprintf("idle CPU over %s, from %s after registration", cfg.idle, idleSettle), stat: "ticks",
		value: float64(after.ticks - before.ticks), unit: "ticks", atMost: true, target: 0,
		detail: fmt.Sprintf("(utime+stime at %d ticks/s; by the scheduler's count %s on CPU)",
			clockTicksPerSecond, (after.exact - before.exact).Round(time.Microsecond)),
	}, wakeUps, figure{
		name: "idle wake-ups per minute, bare Go program in Accept", stat: "slices",
		value: float64(bareAfter.timeSlices-bareBefore.timeSlices) * perMinute, unit: "/min", reference: true,
		note:   "a net/http server that only waits, same environment",
		detail: fmt.Sprintf("(%d in %s)", bareAfter.timeSlices-bareBefore.timeSlices, cfg.idle),
	}}
	if up == nil {
		return figures, nil
	}
	theirs := upstreamFigure(wakeUps)
	theirs.value = float64(upAfter.timeSlices-upBefore.timeSlices) * perMinute
	theirs.detail = fmt.Sprintf("(%d in %s, over the same time; idle CPU %d ticks)", upAfter.timeSlices-upBefore.timeSlices, cfg.idle, upAfter.ticks-upBefore.ticks)
	return append(figures, theirs, ratio{name: wakeUps.name, ours: wakeUps.value, upstream: theirs.value, unit: "/min", budget: 1, budgetNote: " (unchanged)"}), nil
}
