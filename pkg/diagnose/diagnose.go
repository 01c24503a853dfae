// Package diagnose answers "why is my driver not registered?" from inside the
// registrar's container: it checks the registry directory, the CSI driver,
// the registration socket and its neighbours, and prints one verdict per
// line. It changes nothing, and it needs no shell, so that it works through
// `kubectl exec` in a distroless image.
package diagnose

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// Config is what the registrar was told, as given on its command line.
type Config struct {
	CSIAddress string
	// KubeletRegistrationPath is the driver's socket path on the host.
	KubeletRegistrationPath string
	RegistrationDir         string
	// Timeout bounds each RPC.
	Timeout time.Duration
}

// Outcome is the verdict of one check.
type Outcome int

const (
	// OK: nothing to do.
	OK Outcome = iota
	// Warn: probably fine, but worth a look; the diagnosis still passes.
	Warn
	// Fail: the driver cannot be registered (or stay registered) this way.
	Fail
	// Skip: the check needs the result of an earlier one that failed.
	Skip
)

// String is the verdict as printed at the start of a line, all of one width.
func (v Outcome) String() string {
	return [...]string{OK: "[ OK ]", Warn: "[WARN]", Fail: "[FAIL]", Skip: "[ -- ]"}[v]
}

// Check is one line of the checklist.
type Check struct {
	// Name says what was checked, with the path it was checked at.
	Name    string
	Outcome Outcome
	// Detail is what was found and, when it is not OK, what to do.
	Detail string
}

// Run performs every check, in order. A failed check does not stop the
// others; a check that needs what an earlier one could not establish is
// skipped, saying why.
//
// Run only reads: that the registry directory is writable is tested
// without a name appearing there (checkWritable), except on Windows. Each
// RPC has a connection of its own and cfg.Timeout; they run in at most four
// rounds (the driver, the registration socket, its registrar's state, then
// up to 20 other sockets at once), so Run takes at most about four times
// cfg.Timeout. Where SELinux is on, a last check reads labels and connects
// once more to the driver's socket, for the driver's label.
func Run(ctx context.Context, cfg Config) []Check {
	d := &diagnosis{cfg: cfg}
	checks := []Check{
		d.checkRegistryDir(),
		d.checkDriverSocket(),
		d.checkDriverInfo(ctx),
		d.checkSocketPathLength(),
		d.checkRegistrationSocket(ctx),
		d.checkKubeletVerdict(ctx),
		d.checkKubeletRegistrationPath(),
		d.checkNeighbours(ctx),
	}
	if c, on := d.checkSELinux(); on {
		checks = append(checks, c)
	}
	return checks
}

// diagnosis carries what earlier checks established to later ones.
type diagnosis struct {
	cfg Config

	// dirExists: the registry directory exists and is a directory;
	// registryDenied: creating a file there was denied.
	dirExists, registryDenied bool
	// driverSocket is the path --csi-address names, "" when it does not
	// parse; socketFound: a socket is there.
	driverSocket string
	socketFound  bool
	// driverName is the driver's valid name, "" when unknown.
	driverName string
	// registrationSocket is the registration socket's path once it
	// answered GetInfo.
	registrationSocket string
	// kubeletRoot is kubelet's root dir on the host, from the registry
	// directory's mount; "" when it cannot be told.
	kubeletRoot string
}

// Print writes the checklist, one line per check, then a summary line. It
// returns true when no check failed: warnings and skipped checks do not
// count as failures (a check is only skipped after an earlier failure).
func Print(w io.Writer, checks []Check) bool {
	counts := map[Outcome]int{}
	for _, c := range checks {
		counts[c.Outcome]++
		fmt.Fprintf(w, "%s %s: %s\n", c.Outcome, c.Name, c.Detail)
	}
	var summary string
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
	default:
		summary = fmt.Sprintf("OK: all %d checks passed", len(checks))
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
