package harness

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/kubelet/report"
)

// Kubelet is a running the e2e kubelet (test/kubelet): kubelet's plugin manager and CSI
// registration handler on a fake API server, read through its reports.
type Kubelet struct {
	*Process
	RegistryDir string

	mu       sync.Mutex
	events   []report.Event
	received []time.Time // when each of events was read
	failures []report.OperationFailure
	badLines []string
	// watcherErrors are the lines of kubelet's plugin watcher that say it
	// could not handle a file created in the registry directory.
	watcherErrors []string
}

// ReceivedEvent is a report with the time the harness read it: within a
// millisecond or so of kubelet's handler call on an idle machine.
type ReceivedEvent struct {
	report.Event
	Received time.Time
}

// KubeletConfig says how to run the e2e kubelet (test/kubelet).
type KubeletConfig struct {
	// RegistryDir is the plugin registration directory it watches.
	RegistryDir string
	// NodeName names its Node; empty means fakekubelet's default.
	NodeName string
	// Verbosity is its klog -v level.
	Verbosity int
	// StartTimeout bounds the wait for it to be ready; zero means 60 s.
	StartTimeout time.Duration
}

// StartKubelet starts bin (the e2e kubelet (test/kubelet)) and waits until it is ready.
func StartKubelet(bin string, cfg KubeletConfig) (*Kubelet, error) {
	k := &Kubelet{RegistryDir: cfg.RegistryDir}
	args := []string{"--registry-dir=" + cfg.RegistryDir, fmt.Sprintf("-v=%d", cfg.Verbosity)}
	if cfg.NodeName != "" {
		args = append(args, "--node-name="+cfg.NodeName)
	}
	p, err := StartProcess("kubelet", bin, args, k.parse)
	if err != nil {
		return nil, err
	}
	k.Process = p
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	err = p.WaitUntil(timeout, "the kubelet to be ready", func() bool {
		return slices.ContainsFunc(k.Events(), func(e report.Event) bool { return e.Kind == report.Ready })
	})
	if err != nil {
		p.Kill()
		return nil, fmt.Errorf("%w\n%s", err, p.Output())
	}
	return k, nil
}

func (k *Kubelet) parse(stream Stream, line string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch stream {
	case Stdout:
		e, err := report.Decode([]byte(line))
		if err != nil {
			k.badLines = append(k.badLines, line)
			return
		}
		k.events = append(k.events, e)
		k.received = append(k.received, time.Now())
	case Stderr:
		if f, ok := report.ParseOperationFailure(line); ok {
			k.failures = append(k.failures, f)
		}
		// plugin_watcher.go logs these at error level: a file it was told
		// of is gone when it stats it ("Error when handling create event"),
		// or its walk at start failed ("Error when handling create").
		if strings.Contains(line, "Error when handling create") {
			k.watcherErrors = append(k.watcherErrors, line)
		}
	}
}

// Version is the version of kubelet's code the kubelet runs, as its Ready
// report says.
func (k *Kubelet) Version() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.events {
		if e.Kind == report.Ready {
			return e.Version
		}
	}
	return ""
}

// WatcherErrors are the errors kubelet's plugin watcher logged so far.
func (k *Kubelet) WatcherErrors() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.watcherErrors)
}

// Events are the kubelet's reports so far.
func (k *Kubelet) Events() []report.Event {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.events)
}

// OperationFailures are the failed operations kubelet logged so far.
func (k *Kubelet) OperationFailures() []report.OperationFailure {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.failures)
}

// ReceivedEvents are the kubelet's reports so far, each with the time it
// was read.
func (k *Kubelet) ReceivedEvents() []ReceivedEvent {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]ReceivedEvent, len(k.events))
	for i, e := range k.events {
		out[i] = ReceivedEvent{Event: e, Received: k.received[i]}
	}
	return out
}

// State is the API objects as of the latest report.
func (k *Kubelet) State() report.State {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.events) == 0 {
		return report.State{}
	}
	return k.events[len(k.events)-1].State
}

// EventsFor are the reports about one driver.
func (k *Kubelet) EventsFor(driver string) []report.Event {
	var out []report.Event
	for _, e := range k.Events() {
		if e.Driver == driver {
			out = append(out, e)
		}
	}
	return out
}

// CountEvents counts the reports of a kind about a driver; with succeeded,
// only those without an error.
func (k *Kubelet) CountEvents(driver string, kind report.Kind, succeeded bool) int {
	n := 0
	for _, e := range k.EventsFor(driver) {
		if e.Kind == kind && (!succeeded || e.Error == "") {
			n++
		}
	}
	return n
}

// WaitForEvents waits until there are at least n reports of a kind about a
// driver (only successful ones, with succeeded) and returns the n-th.
func (k *Kubelet) WaitForEvents(timeout time.Duration, driver string, kind report.Kind, succeeded bool, n int) (report.Event, error) {
	var found report.Event
	what := fmt.Sprintf("%d %s report(s) for driver %q", n, kind, driver)
	err := k.WaitUntil(timeout, what, func() bool {
		seen := 0
		for _, e := range k.EventsFor(driver) {
			if e.Kind == kind && (!succeeded || e.Error == "") {
				seen++
				if seen == n {
					found = e
					return true
				}
			}
		}
		return false
	})
	return found, err
}

// WaitForDriver waits until CSINode lists the driver with a node ID and
// returns its entry.
func (k *Kubelet) WaitForDriver(timeout time.Duration, driver string) (report.Driver, error) {
	var found report.Driver
	err := k.WaitUntil(timeout, fmt.Sprintf("CSINode to list driver %q with a node ID", driver), func() bool {
		d, ok := k.State().Driver(driver)
		found = d
		return ok && d.NodeID != ""
	})
	return found, err
}

// WaitForNoDriver waits until CSINode does not list the driver.
func (k *Kubelet) WaitForNoDriver(timeout time.Duration, driver string) error {
	return k.WaitUntil(timeout, fmt.Sprintf("CSINode to stop listing driver %q", driver), func() bool {
		_, ok := k.State().Driver(driver)
		return !ok
	})
}

// WaitForNodeIDAnnotation waits until the Node's
// csi.volume.kubernetes.io/nodeid annotation has an entry for the driver and
// returns it.
func (k *Kubelet) WaitForNodeIDAnnotation(timeout time.Duration, driver string) (string, error) {
	var nodeID string
	what := fmt.Sprintf("the Node annotation %s to name driver %q", report.NodeIDAnnotation, driver)
	err := k.WaitUntil(timeout, what, func() bool {
		id, ok := k.State().NodeIDs[driver]
		nodeID = id
		return ok
	})
	return nodeID, err
}

// WaitForOperationFailure waits until kubelet logs a failed operation for
// socket and returns the first one.
func (k *Kubelet) WaitForOperationFailure(timeout time.Duration, socket string) (report.OperationFailure, error) {
	var found report.OperationFailure
	err := k.WaitUntil(timeout, fmt.Sprintf("kubelet to log a failed operation for %s", socket), func() bool {
		for _, f := range k.OperationFailures() {
			if f.Socket == socket {
				found = f
				return true
			}
		}
		return false
	})
	return found, err
}

// ReplaceNode has the e2e kubelet replace its Node (SIGUSR1: deleted and
// created again with a new UID, the old Node's CSINode deleted, as node
// repair and the garbage collector do) and returns its report of it.
func (k *Kubelet) ReplaceNode(timeout time.Duration) (report.Event, error) {
	before := len(k.eventsOf(report.NodeReplaced))
	if err := k.Signal(syscall.SIGUSR1); err != nil {
		return report.Event{}, err
	}
	var found report.Event
	err := k.WaitUntil(timeout, "the kubelet to replace its Node", func() bool {
		replaced := k.eventsOf(report.NodeReplaced)
		if len(replaced) > before {
			found = replaced[before]
			return true
		}
		return false
	})
	return found, err
}

func (k *Kubelet) eventsOf(kind report.Kind) []report.Event {
	var out []report.Event
	for _, e := range k.Events() {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// Summary describes the reports for a log: one line each.
func (k *Kubelet) Summary() string {
	var b strings.Builder
	for _, e := range k.Events() {
		fmt.Fprintf(&b, "%s driver=%q endpoint=%q error=%q drivers=%v nodeIDs=%v node=%s csiNodeOwner=%s",
			e.Kind, e.Driver, e.Endpoint, e.Error, e.State.Drivers, e.State.NodeIDs, e.State.NodeUID, e.State.CSINodeOwner)
		if e.State.ReadError != "" {
			fmt.Fprintf(&b, " readError=%q", e.State.ReadError)
		}
		b.WriteByte('\n')
	}
	k.mu.Lock()
	for _, l := range k.badLines {
		fmt.Fprintf(&b, "unparsed: %s\n", l)
	}
	k.mu.Unlock()
	return b.String()
}
