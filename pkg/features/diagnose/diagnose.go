// Package diagnose answers "why is my driver not registered?" from inside the
// registrar's container: it checks the registry directory, the CSI driver,
// the registration socket and its registrar, and prints one verdict per
// line. It changes nothing, and it needs no shell, so that it works through
// `kubectl exec` in a distroless image.
package diagnose

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/utils/clock"
)

// Config is what the registrar was told, as given on its command line.
type Config struct {
	CSIAddress              string
	KubeletRegistrationPath string // the driver's socket path on the host
	RegistrationDir         string
	Timeout                 time.Duration // bounds each RPC but NodeGetInfo
	// Output, when set, gets each check's line as soon as the check is
	// done, and a [WAIT] line from a check still waiting after SlowCheck,
	// so that the operator never waits in silence; PrintSummary ends it.
	Output io.Writer
	// Clock times the waits; nil: the real clock.
	Clock clock.WithDelayedExecution
}

// SlowCheck is how long a check waits before it says what for.
const SlowCheck = 3 * time.Second

// KubeletNodeGetInfoTimeout is how long kubelet waits for the driver's
// NodeGetInfo when it registers the driver: csiTimeout (2 minutes) of
// kubelet's CSI plugin (k8s.io/kubernetes pkg/volume/csi/csi_plugin.go,
// RegisterPlugin; its plugin manager passes no timeout of its own), the
// same from v1.28 to v1.37. The diagnosis waits as long: an answer that
// comes later is one kubelet never sees.
const KubeletNodeGetInfoTimeout = 2 * time.Minute

// Outcome is the verdict of one check.
type Outcome int

const (
	OK   Outcome = iota // nothing to do
	Warn                // probably fine, but worth a look; the diagnosis still passes
	Fail                // the driver cannot be registered (or stay registered) this way
	Skip                // the check needs the result of an earlier one that failed
)

// String is the verdict as printed at the start of a line, all of one width.
func (v Outcome) String() string {
	return [...]string{OK: "[ OK ]", Warn: "[WARN]", Fail: "[FAIL]", Skip: "[ -- ]"}[v]
}

// Check is one line of the checklist.
type Check struct {
	Name    string // what was checked, with the path it was checked at
	Outcome Outcome
	Detail  string // what was found and, when it is not OK, what to do
}

// Run performs every check, in order; a check that needs what an earlier
// one could not establish is skipped, saying why. Run only reads, except on
// Windows (checkWritable). Each RPC has a connection of its own and
// cfg.Timeout, but NodeGetInfo, which has kubelet's; there are four of them
// (the driver's GetPluginInfo and NodeGetInfo, the registration socket, its
// registrar's state).
func Run(ctx context.Context, cfg Config) []Check {
	cfg.Output = cmp.Or[io.Writer](cfg.Output, io.Discard)
	d := &diagnosis{cfg: cfg, clock: cmp.Or[clock.WithDelayedExecution](cfg.Clock, clock.RealClock{})}
	steps := []func(context.Context) Check{
		d.checkRegistryDir,
		d.checkDriverSocket,
		d.checkDriverInfo,
		d.checkNodeInfo,
		d.checkSocketPathLength,
		d.checkRegistrationSocket,
		d.checkKubeletVerdict,
		d.checkKubeletRegistrationPath,
	}
	checks := make([]Check, 0, len(steps))
	for _, step := range steps {
		c := step(ctx)
		printCheck(d.cfg.Output, c)
		checks = append(checks, c)
	}
	return checks
}

// waiting has the check named name say, once it has waited SlowCheck,
// what it waits for. The wait ends with the returned function, which says
// how long it lasted; nothing is written after it returned.
func (d *diagnosis) waiting(name, what string) (end func() time.Duration) {
	start := d.clock.Now()
	said := make(chan struct{})
	timer := d.clock.AfterFunc(SlowCheck, func() {
		fmt.Fprintf(d.cfg.Output, "[WAIT] %s: no answer after %v; %s ...\n", name, SlowCheck, what)
		close(said)
	})
	return func() time.Duration {
		if !timer.Stop() {
			<-said
		}
		return d.clock.Since(start)
	}
}

// diagnosis carries what earlier checks established to later ones.
type diagnosis struct {
	cfg            Config
	clock          clock.WithDelayedExecution
	dirExists      bool   // the registry directory is one
	driverSocket   string // the path --csi-address names, "" when it does not parse
	socketFound    bool   // a socket is at driverSocket
	driverName     string // the driver's valid name, "" when unknown
	nodeInfoFailed bool   // NodeGetInfo failed, or kubelet would refuse its answer
	socketPath     string // the registration socket's path, once the driver's name is known
	socketAnswered bool   // a socket there answered GetInfo
	kubeletRoot    string // kubelet's root dir on the host from the registry's mount, or ""
}

func printCheck(w io.Writer, c Check) {
	fmt.Fprintf(w, "%s %s: %s\n", c.Outcome, c.Name, c.Detail)
}

// PrintSummary writes the summary line of checks. It returns true when no
// check failed: warnings and skipped checks do not count as failures (a
// check is only skipped after an earlier failure).
func PrintSummary(w io.Writer, checks []Check) bool {
	counts := map[Outcome]int{}
	for _, c := range checks {
		counts[c.Outcome]++
	}
	summary := fmt.Sprintf("OK: all %d checks passed", len(checks))
	switch {
	case counts[Fail] > 0:
		parts := []string{plural(counts[Fail], "check failed", "checks failed")}
		if counts[Warn] > 0 {
			parts = append(parts, plural(counts[Warn], "warning", "warnings"))
		}
		if counts[Skip] > 0 {
			parts = append(parts, plural(counts[Skip], "check skipped", "checks skipped"))
		}
		summary = "NOT OK: " + strings.Join(parts, ", ") + "; fix the first [FAIL] line first, the others often follow from it"
	case counts[Warn] > 0:
		summary = "OK with " + plural(counts[Warn], "warning", "warnings") + ": the driver can be registered; read the [WARN] lines"
	}
	fmt.Fprintln(w, summary)
	return counts[Fail] == 0
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
