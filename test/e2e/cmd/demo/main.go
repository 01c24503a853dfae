// Command demo shows the registrar at work between a CSI driver and kubelet:
// it starts kubelet's real plugin manager and CSI registration handler on a
// fake API server (test/kubelet), the mock CSI driver and the registrar,
// prints what kubelet registered and what the registrar reports about it
// (/readyz, /metrics, /status), then the registrar's /healthz and /readyz
// until Ctrl-C, SIGTERM or -duration, and stops everything in order: the
// registrar first, so kubelet is seen deregistering the driver.
//
// Run it from test/e2e: go run ./cmd/demo [-duration=5s]. REGISTRAR_BIN,
// MOCKDRIVER_BIN and FAKEKUBELET_BIN name prebuilt binaries; REGISTRAR_VERSION
// is the version the registrar is built with (make demo passes make's).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/e2e/harness"
	"github.com/csi-registrar/node-driver-registrar/test/kubelet/report"
)

type options struct {
	duration            time.Duration
	registrationTimeout time.Duration
	interval            time.Duration
	driver              string
	nodeID              string
}

func main() {
	var opts options
	flag.DurationVar(&opts.duration, "duration", 0, "stop by itself after this long once registered; 0 runs until Ctrl-C or SIGTERM")
	flag.DurationVar(&opts.registrationTimeout, "registration-timeout", 60*time.Second, "give up if kubelet has not registered the driver by then")
	flag.DurationVar(&opts.interval, "interval", 2*time.Second, "how often to print the registrar's /healthz and /readyz")
	flag.StringVar(&opts.driver, "driver", "demo.csi.example.com", "name of the mock CSI driver")
	flag.StringVar(&opts.nodeID, "node-id", "demo-node-0001", "node ID the mock driver reports")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts); err != nil {
		fmt.Fprintf(os.Stderr, "demo: FAILED: %v\n", err)
		os.Exit(1)
	}
}

// demo holds what run started, so that it can stop it all in one place.
type demo struct {
	dir       string
	kubelet   *harness.Kubelet
	driver    *harness.Process
	registrar *harness.Registrar
}

func say(format string, args ...any) {
	fmt.Printf("demo: "+format+"\n", args...)
}

func run(ctx context.Context, opts options) (err error) {
	// Short: socket paths must stay under 108 bytes.
	dir, err := os.MkdirTemp("", "demo")
	if err != nil {
		return err
	}
	d := &demo{dir: dir}
	defer func() {
		if shutdownErr := d.shutdown(opts.driver); shutdownErr != nil {
			err = errors.Join(err, shutdownErr)
		}
		if err != nil {
			d.printLogs()
		}
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			err = errors.Join(err, rmErr)
		} else {
			say("removed %s", dir)
		}
	}()

	binDir := filepath.Join(dir, "bin")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		return err
	}
	start := time.Now()
	bins, err := harness.BuildBinaries(ctx, binDir, func(line string) { say("%s", line) })
	if ctx.Err() != nil {
		say("interrupted while building")
		return nil
	}
	if err != nil {
		return err
	}
	version, err := harness.RegistrarBinaryVersion(ctx, bins.Registrar)
	if err != nil {
		return err
	}
	say("binaries ready in %v; the registrar's --version: %s", time.Since(start).Round(100*time.Millisecond), version)

	registry := filepath.Join(dir, "plugins_registry")
	driverSock := filepath.Join(dir, "csi.sock")
	if err := os.Mkdir(registry, 0o755); err != nil {
		return err
	}
	// kubelet creates the termination message file the registrar writes to.
	termination := filepath.Join(dir, "termination-log")
	if err := os.WriteFile(termination, nil, 0o644); err != nil {
		return err
	}

	d.kubelet, err = harness.StartKubelet(bins.FakeKubelet, harness.KubeletConfig{RegistryDir: registry, NodeName: "demo-node", Verbosity: 2})
	if err != nil {
		return err
	}
	say("kubelet (real plugin manager + CSI handler, fake API server) pid %d watches %s", d.kubelet.Pid(), registry)

	d.driver, err = harness.StartMockDriver(bins.MockDriver, harness.MockDriverConfig{Endpoint: driverSock, Name: opts.driver, NodeID: opts.nodeID})
	if err != nil {
		return err
	}
	say("mock CSI driver %q pid %d serves %s", opts.driver, d.driver.Pid(), driverSock)

	addr, err := harness.FreeLocalAddr()
	if err != nil {
		return err
	}
	d.registrar, err = harness.StartRegistrar("registrar", bins.Registrar, harness.RegistrarConfig{
		CSIAddress:              driverSock,
		KubeletRegistrationPath: driverSock,
		PluginRegistrationPath:  registry,
		HTTPEndpoint:            addr,
		TerminationMessagePath:  termination,
		Verbosity:               5,
	})
	if err != nil {
		return err
	}
	say("registrar pid %d: %s", d.registrar.Pid(), strings.Join(d.registrar.Config.Args(), " "))

	if err := d.waitForRegistration(ctx, opts); err != nil {
		return err
	}
	if err := d.showReadiness(ctx, opts); err != nil {
		return err
	}

	var deadline <-chan time.Time
	if opts.duration > 0 {
		timer := time.NewTimer(opts.duration)
		defer timer.Stop()
		deadline = timer.C
		say("running for %v; Ctrl-C stops earlier", opts.duration)
	} else {
		say("running until Ctrl-C or SIGTERM")
	}
	ticker := time.NewTicker(opts.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			say("signal received: stopping")
			return nil
		case <-deadline:
			say("%v passed: stopping", opts.duration)
			return nil
		case <-d.registrar.Done():
			_, code := d.registrar.Exited()
			return fmt.Errorf("the registrar exited by itself with code %d", code)
		case <-ticker.C:
			var healthz, readyz string
			if code, err := d.registrar.Healthz(); err != nil {
				healthz = err.Error()
			} else {
				healthz = fmt.Sprintf("%d %s", code, statusText(code))
			}
			if code, reason, err := d.registrar.Readyz(); err != nil {
				readyz = err.Error()
			} else {
				readyz = fmt.Sprintf("%d %s", code, reason)
			}
			say("registrar /healthz: %s; /readyz: %s", healthz, readyz)
		}
	}
}

func statusText(code int) string {
	switch code {
	case 200:
		return "OK (registered and serving)"
	case 404:
		return "registration socket missing"
	default:
		return "unhealthy"
	}
}

// waitForRegistration waits until CSINode lists the driver and the Node
// carries its node ID, then prints what kubelet registered.
func (d *demo) waitForRegistration(ctx context.Context, opts options) error {
	done := make(chan error, 1)
	go func() {
		_, err := d.kubelet.WaitForDriver(opts.registrationTimeout, opts.driver)
		if err == nil {
			_, err = d.kubelet.WaitForNodeIDAnnotation(opts.registrationTimeout, opts.driver)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("kubelet did not register driver %q: %w", opts.driver, err)
		}
	case <-ctx.Done():
		return errors.New("interrupted before kubelet registered the driver")
	}

	var registered report.Event
	for _, e := range d.kubelet.EventsFor(opts.driver) {
		if e.Kind == report.Register && e.Error == "" {
			registered = e
		}
	}
	csiNodeDriver, _ := registered.State.Driver(opts.driver)
	say("kubelet registered the driver:")
	fmt.Printf("    driver name:       %s\n", registered.Driver)
	fmt.Printf("    endpoint:          %s\n", registered.Endpoint)
	fmt.Printf("    versions:          %s\n", strings.Join(registered.Versions, ", "))
	fmt.Printf("    CSINode node ID:   %s\n", csiNodeDriver.NodeID)
	fmt.Printf("    Node annotation:   %s: %s\n", report.NodeIDAnnotation, formatNodeIDs(registered.State.NodeIDs))
	fmt.Printf("    registration sock: %s\n", d.registrar.SocketPath(opts.driver))
	return nil
}

// showReadiness waits until the registrar has kubelet's verdict (kubelet
// sends it just after writing CSINode), then prints its /readyz, the
// registration's metrics and /status.
func (d *demo) showReadiness(ctx context.Context, opts options) error {
	done := make(chan error, 1)
	go func() {
		_, err := d.registrar.WaitForReadyz(opts.registrationTimeout, 200, "")
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("the registrar did not report ready: %w", err)
		}
	case <-ctx.Done():
		return errors.New("interrupted before the registrar reported ready")
	}

	code, reason, err := d.registrar.Readyz()
	if err != nil {
		return err
	}
	metrics, err := d.registrar.Metrics()
	if err != nil {
		return err
	}
	status, err := d.registrar.Status()
	if err != nil {
		return err
	}
	say("the registrar reports (http://%s):", d.registrar.Config.HTTPEndpoint)
	fmt.Printf("    GET /readyz:  %d %s\n", code, reason)
	fmt.Printf("    GET /metrics (excerpt):\n")
	for _, line := range metrics.Lines("csi_node_driver_registrar_registered", "csi_node_driver_registrar_state") {
		fmt.Printf("        %s\n", line)
	}
	fmt.Printf("    GET /status:\n")
	for _, line := range strings.Split(strings.TrimSpace(status.Raw), "\n") {
		fmt.Printf("        %s\n", line)
	}
	return nil
}

func formatNodeIDs(ids map[string]string) string {
	var parts []string
	for _, driver := range slices.Sorted(maps.Keys(ids)) {
		parts = append(parts, fmt.Sprintf("%q:%q", driver, ids[driver]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// shutdown stops what was started, registrar first: kubelet then sees the
// socket go and deregisters the driver.
func (d *demo) shutdown(driver string) error {
	var errs []error
	if d.registrar != nil {
		say("stopping the registrar (SIGTERM)")
		code, err := d.registrar.Stop(15 * time.Second)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("stopping the registrar: %w", err))
		case code != 0:
			errs = append(errs, fmt.Errorf("the registrar exited with %d", code))
		default:
			say("registrar exited with 0")
		}
		if _, err := os.Lstat(d.registrar.SocketPath(driver)); !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("the registration socket %s is still there after the registrar stopped", d.registrar.SocketPath(driver)))
		}
		if d.kubelet != nil && d.kubelet.CountEvents(driver, report.Register, true) > 0 {
			if err := d.kubelet.WaitForNoDriver(15*time.Second, driver); err != nil {
				errs = append(errs, err)
			} else {
				say("kubelet deregistered %q: CSINode lists %v, Node annotation %s", driver, d.kubelet.State().Drivers, formatNodeIDs(d.kubelet.State().NodeIDs))
			}
		}
	}
	if d.driver != nil {
		if _, err := d.driver.Stop(15 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("stopping the mock driver: %w", err))
		} else {
			say("mock driver stopped")
		}
	}
	if d.kubelet != nil {
		if _, err := d.kubelet.Stop(15 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("stopping the kubelet: %w", err))
		} else {
			say("kubelet stopped")
		}
	}
	return errors.Join(errs...)
}

// printLogs shows every process's output, for a run that failed.
func (d *demo) printLogs() {
	for _, p := range []*harness.Process{d.kubeletProcess(), d.driver, d.registrarProcess()} {
		if p == nil {
			continue
		}
		fmt.Fprintf(os.Stderr, "---- output of %s (pid %d) ----\n%s\n", p.Name, p.Pid(), p.Output())
	}
	if d.kubelet != nil {
		fmt.Fprintf(os.Stderr, "---- kubelet reports ----\n%s", d.kubelet.Summary())
	}
}

func (d *demo) kubeletProcess() *harness.Process {
	if d.kubelet == nil {
		return nil
	}
	return d.kubelet.Process
}

func (d *demo) registrarProcess() *harness.Process {
	if d.registrar == nil {
		return nil
	}
	return d.registrar.Process
}
