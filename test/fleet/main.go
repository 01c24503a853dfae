// Command fleet measures what the registrar's API features cost a
// kube-apiserver at fleet scale (make fleet; docs/performance.md, "At fleet
// scale"). It starts a real etcd and kube-apiserver as the tests against
// the API server do (test/apiserver), with deploy/node-gate's and
// deploy/csinode's RBAC and admission policy, creates N Nodes, and runs on
// each what kubelet does that the features react to (the Lease renewed
// every 10 s, the CSINode written at each registration) and the registrar's
// node gate and CSINode confirmation, with their own code and clients. Then
// it runs the scenarios: rest, a rolling update, an outage of the API
// server, Nodes replaced. It prints the figures and the goals of issue 45,
// and exits 1 when a hard goal is missed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

type options struct {
	n              int
	baseline, rest time.Duration
	outage, settle time.Duration
	repo, keepLogs string
	parallel       int
	soft           []string
	// sharedConn: the registrars share one connection (measurement only).
	sharedConn bool
	// profile: where kube-apiserver's profiles go.
	profile string
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 100, "the number of Nodes, each with its kubelet and registrar")
	flag.DurationVar(&o.baseline, "baseline", 2*time.Minute, "the rest with the Leases alone, before the registrars start: the baseline")
	flag.DurationVar(&o.rest, "rest", 12*time.Minute, "scenario (a), the rest with the registrars: the CSINode watches end and start again after 5 to 10 min (client-go's reflector)")
	flag.DurationVar(&o.outage, "outage", time.Minute, "scenario (c): how long kube-apiserver is down")
	flag.DurationVar(&o.settle, "settle", 5*time.Minute, "how long each scenario may take to reach its steady state before the run fails")
	flag.IntVar(&o.parallel, "parallel", 16, "the set-up's requests in flight (creating the Nodes, pods and tokens)")
	flag.StringVar(&o.repo, "repo", "../..", "the repository's root: deploy/ and test/node/_bin/kube-apiserver")
	flag.StringVar(&o.keepLogs, "logs", "", "a directory for the logs of etcd, kube-apiserver and the simulated registrars (default: a temporary one, kept only on failure)")
	flag.BoolVar(&o.sharedConn, "shared-connection", false, "the simulated registrars share one client connection (HTTP/2, as many as its stream limit needs) instead of one each: the difference at rest is what their own connections cost kube-apiserver, apart from their watches")
	flag.StringVar(&o.profile, "profile", "", "the start of the names of files for kube-apiserver's profiles (/debug/pprof): .baseline.cpu and .rest.cpu over those phases, .baseline.heap and .rest.heap after a collection at their ends; go tool pprof -diff_base shows what the registrars cost")
	soft := flag.String("soft", "", "goals (by the ids the report gives them) reported but not failing the run, comma-separated; the extrapolations to 5,000 nodes are always")
	flag.Parse()
	if *soft != "" {
		o.soft = strings.Split(*soft, ",")
	}
	if o.n < 10 {
		fmt.Fprintln(os.Stderr, "fleet: -n must be at least 10 (a rolling update goes 10 % at a time)")
		os.Exit(2)
	}
	ok, err := run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet: FAILED:", err)
		os.Exit(1)
	}
	if !ok {
		fmt.Fprintln(os.Stderr, "fleet: FAILED: a hard goal is missed (above)")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (goalsMet bool, err error) {
	repo, err := filepath.Abs(o.repo)
	if err != nil {
		return false, err
	}
	dir := o.keepLogs
	if dir == "" {
		if dir, err = os.MkdirTemp("", "fleet"); err != nil {
			return false, err
		}
		defer func() {
			if err == nil && goalsMet {
				_ = os.RemoveAll(dir)
			} else {
				fmt.Fprintln(os.Stderr, "fleet: the logs are in", dir)
			}
		}()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	// The registrars' and client-go's logs: thousands of lines at scale.
	logFile, err := os.Create(filepath.Join(dir, "registrars.log"))
	if err != nil {
		return false, err
	}
	defer logFile.Close()
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	if err := errors.Join(klogFlags.Set("logtostderr", "false"), klogFlags.Set("stderrthreshold", "FATAL")); err != nil {
		return false, err
	}
	// By severity: SetOutput would write each error three times.
	klog.SetOutputBySeverity("INFO", logFile)
	defer klog.Flush()

	f, err := startFleet(ctx, o, repo, dir)
	if f != nil {
		defer f.close()
	}
	if err != nil {
		return false, err
	}
	rep, err := f.scenarios(ctx)
	rep.print(os.Stdout, o)
	if err != nil {
		return false, err
	}
	return rep.hardGoalsMet(), nil
}

var errDeadline = errors.New("deadline")
