// Command e2e-node runs a one-node Kubernetes cluster (etcd, containerd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet) and
// checks the registrar's image as the sidecar of a CSI driver's DaemonSet
// under that real kubelet. It expects to run as PID 1 of new network, mount
// and PID namespaces with a scratch directory prepared by hack/e2e-node.sh,
// which also removes what the node leaves outside that directory.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/node/localnode"
)

func main() {
	flags := localnode.RegisterFlags()
	var opts options
	flag.DurationVar(&opts.maxRolloutGap, "max-rollout-gap", 0, "the longest time without the driver in CSINode that the rolling update check (4a) accepts; 0: none")
	only := flag.String("checks", "", "comma-separated checks to run after check 1, in the usual order (2, 3, 4a, 4b, 4c, 4d, 5, 7, 8, 9, 10, 11, 12, 13; 2 is 2b, 8 is 8a-8c, 12 is 12a-12b, 13 is 13a-13c); empty: all. A check may rely on what an earlier one leaves (4c on 4b)")
	flags.Parse()
	if *only != "" {
		opts.only = map[string]bool{}
		for _, id := range strings.Split(*only, ",") {
			id = strings.TrimSpace(id)
			if !slices.Contains(stepIDs(), id) {
				fmt.Fprintf(os.Stderr, "e2e-node: -checks %q: no check %q; the checks after 1 are %s\n", *only, id, strings.Join(stepIDs(), ", "))
				os.Exit(2)
			}
			opts.only[id] = true
		}
	}
	s := &suite{Node: &localnode.Node{Flags: flags, StartupTaint: startupTaint}, options: opts, watch: localnode.NewWatch(localnode.DriverName)}
	os.Exit(s.Run("e2e-node", s.run))
}

// steps are the checks after check 1, in the order they run: what each
// one leaves is what the next ones expect.
var steps = []struct {
	id  string
	run func(*suite, context.Context) bool
}{
	{"2", (*suite).checkProbes},
	{"5", (*suite).checkSocketDeleted},
	{"4a", (*suite).checkRollingUpdate},
	{"3", (*suite).checkPodDeleted},
	{"4b", (*suite).checkRollbackToUpstream},
	{"4c", (*suite).checkUpgradeFromUpstream},
	{"4d", (*suite).checkSharedPortRollout},
	{"7", (*suite).checkDriverLiveness},
	{"8", (*suite).checkVolume},
	{"10", (*suite).checkMistypedPath},
	{"12", (*suite).checkRejectedThenAccepted},
	{"13", (*suite).checkCSINode}, // replaces the Node: keeps its startup taint for 9
	{"9", (*suite).checkNodeGate}, // last to change the node: it removes the startup taint
	{"11", (*suite).checkKubeletLog},
}

func stepIDs() []string {
	var ids []string
	for _, step := range steps {
		ids = append(ids, step.id)
	}
	return ids
}

// run runs the checks on the node that is up.
func (s *suite) run(ctx context.Context, began time.Time) int {
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go s.watch.Run(watchCtx, s.Client)

	// Every later step works on the pod of the first; each one leaves a
	// running, registered pod unless it failed badly, so a failure does
	// not stop the next ones.
	if s.checkFirstRegistration(ctx) {
		for _, step := range steps {
			if ctx.Err() != nil {
				break
			}
			if s.only == nil || s.only[step.id] {
				step.run(s, ctx)
			}
		}
	}

	return s.summary(ctx, began)
}

// summary prints the report and returns the exit code: 1 if a check
// failed, was skipped in CI, or (in a full run) did not run.
func (s *suite) summary(ctx context.Context, began time.Time) int {
	c, opts := s.Node, s.options
	fmt.Println()
	fmt.Printf("e2e-node report (kubelet %s)\n", c.KubeletVersion)
	for _, t := range c.Timings {
		fmt.Printf("  %-7s %s: %s\n", "", t.What, ms(t.Took))
	}
	failed, skipped := 0, 0
	for _, r := range s.results {
		switch r.status() {
		case "SKIPPED":
			skipped++
		case "FAIL":
			failed++
		}
		fmt.Printf("  %-7s %s\n          %s\n", r.status(), r.name, r.detail)
	}
	if skipped > 0 && s.FailOnSkip {
		fmt.Printf("  FAIL: %d check(s) skipped in CI: a skip there is a failure to look at\n", skipped)
		failed += skipped
	}
	const want = 21 // 1, 2a, 2b, 3, 4a, 4b, 4c, 4d, 5, 7, 8a, 8b, 8c, 10, 12a, 12b, 13a, 13b, 13c, 9, 11
	if ctx.Err() != nil {
		fmt.Println("  interrupted")
	}
	if opts.only != nil {
		var ran []string
		for _, id := range stepIDs() {
			if opts.only[id] {
				ran = append(ran, id)
			}
		}
		fmt.Printf("  PARTIAL RUN: check 1 and -checks %s only (E2E_NODE_CHECKS); the others were not run\n", strings.Join(ran, ","))
	} else if len(s.results) < want {
		fmt.Printf("  NOT RUN: %d check(s)\n", want-len(s.results))
	}
	fmt.Printf("  total %s; check 6 (clean-up) follows from hack/e2e-node.sh once the namespaces are gone\n", ms(time.Since(began)))
	if failed > 0 || (opts.only == nil && len(s.results) < want) {
		return 1
	}
	return 0
}
