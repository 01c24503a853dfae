// Command bench measures the built registrar as a whole process on this
// machine: how fast its registration socket listens after exec, after the
// driver's socket appears and after the socket is deleted; /healthz latency;
// GetInfo throughput; memory, also while the HTTP endpoint is flooded with
// connections; the node gate off and on against a real kube-apiserver (as
// root, where etcd and kube-apiserver are found); idle CPU; binary size. It
// prints one line per figure next to its target and never fails because a
// target is missed: the figures depend on the machine and on what else runs
// on it. Lines without a target say what the figures can be read against:
// the resolution of the harness, and how fast the test driver, a Go program
// with the same gRPC and CSI libraries, listens after exec.
//
// With -upstream, upstream's registrar (kubernetes-csi/node-driver-registrar)
// is measured in the same run for the figures its budget compares (exec ->
// listening, VmRSS after registration, binary size, idle wake-ups), its
// runs interleaved with this registrar's, and each of those figures is
// followed by a line with both values, their ratio and the budget for it.
// The ratios are printed, never asserted.
//
//	go run ./test/bench -registrar bin/csi-node-driver-registrar -driver bin/mockdriver
//
// The method is described in docs/performance.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// config says what to measure and how many times.
type config struct {
	registrar string
	driver    string
	// registrarEnv is added to the registrar's environment: the image's
	// ENV lines, so that the binary runs as it does in its container.
	registrarEnv []string
	// upstream is upstream's registrar binary, measured side by side;
	// empty when it is not measured.
	upstream string

	runs            int
	healthzRequests int
	healthzClients  int
	// healthzClientProcs is the bench's GOMAXPROCS while it makes /healthz
	// requests; 0 leaves Go's default.
	healthzClientProcs int
	getInfoCalls       int
	getInfoClients     int
	idle               time.Duration
	// floodHeaderConns and floodIdleConns are the connections of the two
	// floods of the HTTP endpoint, held for floodHold each.
	floodHeaderConns int
	floodIdleConns   int
	floodHold        time.Duration
	// only, when not empty, names the groups of figures to measure.
	only map[string]bool
}

// groups are the names -only accepts, each for a group of figures.
var groups = []string{"start", "appear", "healthz", "getinfo", "flood", "driverhealth", "nodegate", "size", "idle"}

// wants reports whether the group of figures is to be measured.
func (c config) wants(group string) bool { return len(c.only) == 0 || c.only[group] }

func main() {
	var cfg config
	flag.StringVar(&cfg.registrar, "registrar", "bin/csi-node-driver-registrar", "the registrar binary to measure, as `make build` writes it")
	env := flag.String("registrar-env", "", "space-separated `NAME=VALUE` pairs added to the registrar's environment; make bench passes the Dockerfile's ENV lines")
	flag.StringVar(&cfg.upstream, "upstream", "", "upstream's registrar binary (kubernetes-csi/node-driver-registrar), measured side by side for the ratios of the budget; empty: ratios not measured")
	requireUpstream := flag.Bool("require-upstream", false, "fail when -upstream is not an executable file, instead of measuring without the ratios (make bench-smoke under CI=true)")
	flag.StringVar(&cfg.driver, "driver", "", "the test CSI driver binary (go build -o bin/mockdriver ./test/mockdriver); required")
	flag.IntVar(&cfg.runs, "runs", 20, "processes started for each start-up and reaction figure")
	flag.IntVar(&cfg.healthzRequests, "healthz-requests", 5000, "/healthz requests for each latency figure")
	flag.IntVar(&cfg.healthzClients, "healthz-clients", 16, "concurrent /healthz clients")
	flag.IntVar(&cfg.healthzClientProcs, "healthz-client-procs", 1, "GOMAXPROCS of the bench itself while it makes /healthz requests, so that the load generator and the registrar together need no more threads than the machine has cores; 0 keeps Go's default (one per core)")
	flag.IntVar(&cfg.getInfoCalls, "getinfo-calls", 20000, "GetInfo calls for the throughput figure")
	flag.IntVar(&cfg.getInfoClients, "getinfo-clients", 32, "concurrent GetInfo clients, one connection each")
	flag.DurationVar(&cfg.idle, "idle", time.Minute, "how long the registered registrar is left idle for the CPU and wake-up figures; 0 skips them")
	flag.IntVar(&cfg.floodHeaderConns, "flood-header-conns", 200, "connections that each send an unfinished 1 MiB header to the HTTP endpoint")
	flag.IntVar(&cfg.floodIdleConns, "flood-idle-conns", 1000, "connections to the HTTP endpoint that never send a byte")
	flag.DurationVar(&cfg.floodHold, "flood-hold", 2*time.Second, "how long each flood of the HTTP endpoint is held while /healthz is probed")
	floor := flag.String(floorFlag, "", "serve as the reference HTTP server on this address (used by bench itself)")
	only := flag.String("only", "", "measure only these groups of figures, comma-separated: "+strings.Join(groups, ", "))
	flag.Parse()
	if *floor != "" {
		fmt.Fprintln(os.Stderr, "bench:", serveReferenceHTTP(*floor))
		os.Exit(1)
	}
	for _, kv := range strings.Fields(*env) {
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
			fmt.Fprintf(os.Stderr, "bench: -registrar-env: %q is not NAME=VALUE\n", kv)
			os.Exit(2)
		}
		cfg.registrarEnv = append(cfg.registrarEnv, kv)
	}
	if *only != "" {
		cfg.only = map[string]bool{}
		for _, g := range strings.Split(*only, ",") {
			if !slices.Contains(groups, g) {
				fmt.Fprintf(os.Stderr, "bench: -only: unknown group %q; the groups are %s\n", g, strings.Join(groups, ", "))
				os.Exit(2)
			}
			cfg.only[g] = true
		}
	}
	if cfg.driver == "" {
		fmt.Fprintln(os.Stderr, "bench: -driver is required: go build -o bin/mockdriver ./test/mockdriver")
		os.Exit(2)
	}
	missing := checkUpstream(&cfg)
	if missing != "" {
		if *requireUpstream {
			fmt.Fprintf(os.Stderr, "bench: %s; -require-upstream is set: pass -upstream=PATH to upstream's binary\n", missing)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "bench: WARNING: %s\n", missing)
	}
	if cfg.runs < 1 || cfg.healthzRequests < 1 || cfg.healthzClients < 1 || cfg.getInfoCalls < 1 || cfg.getInfoClients < 1 || cfg.floodHeaderConns < 1 || cfg.floodIdleConns < 1 {
		fmt.Fprintln(os.Stderr, "bench: -runs, -healthz-requests, -healthz-clients, -getinfo-calls, -getinfo-clients and -flood-*-conns must be at least 1")
		os.Exit(2)
	}
	if cfg.healthzClientProcs < 0 {
		fmt.Fprintln(os.Stderr, "bench: -healthz-client-procs must be 0 (Go's default) or more")
		os.Exit(2)
	}

	// Ctrl-C stops the processes started so far and removes their files.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, missing); err != nil {
		if ctx.Err() != nil {
			err = errors.New("interrupted; the processes it started are stopped and their files removed")
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		stop()
		os.Exit(1)
	}
}

// checkUpstream makes cfg.upstream absolute, or empty when it is not an
// executable file, and then says why the ratios are not measured.
func checkUpstream(cfg *config) (missing string) {
	if cfg.upstream == "" {
		return "no -upstream: ratios to upstream's registrar not measured"
	}
	path, err := filepath.Abs(cfg.upstream)
	if err == nil {
		var fi os.FileInfo
		if fi, err = os.Stat(path); err == nil && (!fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0) {
			err = fmt.Errorf("not an executable file (mode %v)", fi.Mode())
		}
	}
	if err != nil {
		missing = fmt.Sprintf("upstream's binary not found at %s (%v): ratios not measured", cfg.upstream, err)
		cfg.upstream = ""
		return missing
	}
	cfg.upstream = path
	return ""
}

// run measures every figure and prints it as soon as it is known.
func run(ctx context.Context, cfg config, upstreamMissing string) error {
	if err := printBuild("registrar", cfg.registrar, cfg.registrarEnv); err != nil {
		return err
	}
	if upstreamMissing != "" {
		fmt.Println("UPSTREAM NOT MEASURED:", upstreamMissing)
	} else if err := printBuild("upstream", cfg.upstream, nil); err != nil {
		return err
	}
	before := printMachine("before", nil)

	resolution, err := measureResolution(ctx, cfg.runs)
	if err != nil {
		return fmt.Errorf("measuring the harness: %w", err)
	}
	printReference("harness: socket renamed into place -> seen accepting", resolution,
		"(inotify + connect, "+pollInterval.String()+" polling fallback)")

	var start startFigures
	if cfg.wants("start") {
		if start, err = measureStart(ctx, cfg); err != nil {
			return err
		}
		fmt.Println(start.listen)
		if cfg.upstream != "" {
			up := upstreamFigure(start.listen)
			up.value, up.detail = ms(start.upstreamListen.median()), start.upstreamListen.spread()
			fmt.Println(up)
			fmt.Println(ratio{name: start.listen.name, ours: start.listen.value, upstream: up.value, unit: "ms", budget: 1})
		}
		printReference("reference: exec -> test driver listening", start.driverListen, "(same gRPC and CSI libraries, no work)")
		printReference("reference: exec -> exit, --version", start.version, "(process start and package init: the floor)")
		if cfg.upstream != "" {
			printReference("upstream: exec -> exit, --version", start.upstreamVersion, "(upstream's binary)")
			fmt.Printf("floor of the ratio: --version %s ms / upstream's exec -> socket %s ms = %.3f\n",
				trim(ms(start.version.median())), trim(ms(start.upstreamListen.median())), ms(start.version.median())/ms(start.upstreamListen.median()))
		}
	}
	if cfg.wants("appear") {
		appear, err := measureDriverAppears(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Println(appear)
	}
	if cfg.wants("start") {
		fmt.Println(start.recreate)
	}
	for _, m := range []struct {
		group   string
		measure func(context.Context, config) ([]figure, error)
	}{{"healthz", measureHealthz}, {"getinfo", measureGetInfo}, {"flood", measureFlood}, {"driverhealth", measureDriverHealth}, {"nodegate", measureNodeGate}} {
		if !cfg.wants(m.group) {
			continue
		}
		figures, err := m.measure(ctx, cfg)
		if err != nil {
			return err
		}
		for _, f := range figures {
			fmt.Println(f)
		}
	}
	if cfg.wants("start") {
		fmt.Println(start.rss)
		if cfg.upstream != "" {
			up := upstreamFigure(start.upstreamMemory.figure())
			fmt.Println(up)
			fmt.Println(ratio{name: start.rss.name, ours: start.rss.value, upstream: up.value, unit: "MB", budget: 0.95})
		}
	}
	if cfg.wants("size") {
		size, err := binarySize(cfg.registrar)
		if err != nil {
			return err
		}
		fmt.Println(size)
		if cfg.upstream != "" {
			up, err := binarySize(cfg.upstream)
			if err != nil {
				return err
			}
			fmt.Println(upstreamFigure(up))
			fmt.Println(ratio{name: "stripped binary size", ours: size.value, upstream: up.value, unit: "MB", budget: 0.95})
		}
	}
	if cfg.wants("idle") && cfg.idle > 0 {
		idle, err := measureIdle(ctx, cfg)
		if err != nil {
			return err
		}
		for _, f := range idle {
			fmt.Println(f)
		}
	}
	printMachine("after", &before)
	return nil
}
