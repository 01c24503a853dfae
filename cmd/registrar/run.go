package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/automaxprocs/maxprocs"
	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/pkg/driver"
	"github.com/csi-registrar/node-driver-registrar/pkg/healthz"
	"github.com/csi-registrar/node-driver-registrar/pkg/httpport"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration"
)

// Exit codes, as upstream's: 2 when the flag package cannot parse the command
// line, 1 for a value that cannot be used or any other fatal error.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// httpShutdownTimeout bounds how long open probe requests may delay exit.
const httpShutdownTimeout = 2 * time.Second

// run is the whole process: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args[0], args[1:], stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		// The flag package has already printed the problem and the usage.
		return exitUsage
	}
	// Upstream's order: the logging flags, --version, then the probe mode.
	if err := o.logging.validate(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", args[0], err)
		return exitError
	}
	if o.showVersion {
		fmt.Fprintln(stdout, args[0], version)
		return exitOK
	}
	if o.mode == probeMode {
		return runProbeMode(o, args[0], stderr)
	}
	if o.diagnose {
		return runDiagnose(ctx, o, stdout)
	}
	if err := o.logging.apply(stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", args[0], err)
		return exitError
	}
	defer klog.Flush()
	logger := klog.Background()
	ctx = klog.NewContext(ctx, logger)

	termination := &terminationMessage{path: o.terminationMessagePath}
	if err := o.validate(); err != nil {
		logger.Error(err, "Invalid command line")
		termination.write(logger, err.Error())
		return exitError
	}
	procs := setMaxProcs(logger, o.automaxprocs)
	logger.Info("Starting", "version", version, "csiAddress", o.csiAddress, "kubeletRegistrationPath", o.registration.Endpoint, "pluginRegistrationPath", o.registration.Dir, "gomaxprocs", procs)
	// klog's warning severity, as component-base's flag warnings: logr has
	// no such level, and an info line would hide among the state changes.
	for _, warning := range o.warnings() {
		klog.Warning(warning)
	}
	err = register(ctx, o, termination)
	switch {
	case errors.As(err, new(*registration.RejectedError)):
		// The termination message was written when kubelet rejected it.
		return exitError
	case errors.As(err, new(*failedTooLong)):
		logger.Info("Stopped while the registration fails", "reason", err.Error())
		return exitError
	case err != nil:
		logger.Error(err, "Registrar failed")
		termination.write(logger, err.Error())
		return exitError
	}
	logger.Info("Stopped")
	return exitOK
}

// runProbeMode is upstream's exec probe mode. Its message goes to stderr,
// which kubelet shows in the probe's event, not to the termination message.
func runProbeMode(o *options, program string, stderr io.Writer) int {
	if o.registration.Endpoint == "" {
		fmt.Fprintf(stderr, "%s: --mode=%s needs --kubelet-registration-path, as upstream's probe does: give the probe the registrar's own --kubelet-registration-path, or replace the exec probe with an HTTP probe on /healthz (--http-endpoint)\n", program, probeMode)
		return exitError
	}
	return exitOK
}

// register runs the driver follower, the registration, the probes and the
// features under one context: the first error or signal stops them all.
func register(ctx context.Context, o *options, termination *terminationMessage) error {
	address, err := driver.ParseAddress(o.csiAddress)
	if err != nil {
		return fmt.Errorf("--csi-address: %w", err)
	}
	logger := klog.FromContext(ctx)
	// Created before the possibly long wait for the driver, so that a
	// wrong directory fails at once and the probes report on it.
	srv, err := registration.New(o.registration)
	if err != nil {
		return flagError(err)
	}
	srv.Observe(reportTermination(logger, termination))
	// The registration as it was before it stopped, for stoppedFailing.
	var lastRunning atomic.Pointer[registration.Status]
	srv.Observe(func(now registration.Status, _ []registration.Transition) {
		if now.State != registration.Stopped {
			lastRunning.Store(&now)
		}
	})
	failureLimit := registration.FailureLimit{After: o.unhealthyAfter}

	// A port that cannot be listened on fails the start, and the
	// registration removes on the way out whatever it published meanwhile.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	var reports []healthz.Feature
	stopGate, err := startNodeGate(ctx, o, srv, &reports)
	if err != nil {
		return err
	}
	defer stopGate()
	if err := startEvents(gctx, o, srv, failureLimit); err != nil {
		return err
	}
	if err := startCSINode(gctx, o, srv, g, &reports); err != nil {
		return err
	}
	prober := startDriverHealth(gctx, o, address, g, &reports)
	var probes *healthz.Server
	if addr := o.httpAddress(); addr != "" {
		// No TCP keep-alive: the HTTP server closes idle connections itself
		// (docs/performance.md).
		port := httpport.New(addr, net.ListenConfig{KeepAlive: -1}, clock.RealClock{})
		srv.Observe(releaseOnStepAside(logger, port))
		probes = healthz.New(srv, healthz.Options{EnablePprof: o.enablePprof, Version: version, FailureLimit: failureLimit, Features: reports})
		g.Go(func() error { return withFlag("--http-endpoint", port.Run(withFlagLogged(gctx, "--http-endpoint"))) })
		g.Go(func() error { return probes.Serve(gctx, port.Listeners(), port.Lost, httpShutdownTimeout) })
	}
	driverConfig := driver.Config{Address: address, Timeout: o.operationTimeout(), OnAttempt: func(d time.Duration, err error) {
		if err != nil {
			// The registration's reason while it waits for the driver.
			srv.DriverUnreachable(driver.Unreachable(address.Path, err))
		}
		if probes != nil {
			probes.ObservePluginInfo(d, err)
		}
	}}
	g.Go(func() error { return flagError(srv.Run(gctx)) })
	g.Go(func() error {
		return withFlag("--csi-address", driver.Follow(gctx, driverConfig, func(e driver.Event) {
			if e.Reachable {
				srv.DriverFound(e.Name)
			} else {
				srv.DriverGone()
			}
			if prober != nil {
				prober.DriverChanged(e)
			}
		}))
	})
	if err := g.Wait(); err != nil {
		return err
	}
	return stoppedFailing(lastRunning.Load(), failureLimit, termination, logger)
}

// failedTooLong: the registrar was stopped, most likely by a liveness probe,
// after failing for longer than --unhealthy-after.
type failedTooLong struct{ reason string }

func (e *failedTooLong) Error() string { return e.reason }

// stoppedFailing tells whether st, the last status before the stop, had
// failed for too long. kubelet's rejection and silence are in the termination
// message already; the driver's last error is written now.
func stoppedFailing(st *registration.Status, limit registration.FailureLimit, termination *terminationMessage, logger klog.Logger) error {
	if st == nil {
		return nil
	}
	f, tooLong := limit.Exceeded(*st)
	if !tooLong {
		return nil
	}
	if st.State == registration.WaitingForDriver {
		termination.write(logger, f.Reason)
	}
	return &failedTooLong{reason: fmt.Sprintf("the registration had failed for %v: %s", f.Lasted.Round(time.Second), f.Reason)}
}

// terminationMessage leaves the reason of a fatal error or of a rejection
// where kubectl describe pod shows it.
type terminationMessage struct {
	path    string
	missing sync.Once
}

// write replaces the message. kubelet creates the file: without it the
// registrar is not under kubelet, which is said once.
func (t *terminationMessage) write(logger klog.Logger, message string) {
	if t.path == "" {
		return
	}
	f, err := os.OpenFile(t.path, os.O_WRONLY|os.O_TRUNC, 0)
	if err == nil {
		_, err = io.WriteString(f, message)
		err = errors.Join(err, f.Close())
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		t.missing.Do(func() {
			logger.V(2).Info("No termination message file: not running under kubelet; reasons are only logged", "path", t.path)
		})
	case err != nil:
		klog.Warningf("cannot write the termination message to %s: %v", t.path, err)
	}
}

// setMaxProcs applies --automaxprocs and returns GOMAXPROCS. Upstream's image
// sets no GOMAXPROCS, so --automaxprocs ignores the image's GOMAXPROCS=1.
func setMaxProcs(logger klog.Logger, automaxprocs bool) int {
	if automaxprocs {
		if env, ok := os.LookupEnv("GOMAXPROCS"); ok {
			logger.Info("--automaxprocs overrides GOMAXPROCS from the environment", "GOMAXPROCS", env)
			_ = os.Unsetenv("GOMAXPROCS")
			runtime.SetDefaultGOMAXPROCS()
		}
		if _, err := maxprocs.Set(maxprocs.Logger(func(format string, args ...any) {
			logger.Info(fmt.Sprintf(format, args...))
		})); err != nil {
			logger.Error(err, "Cannot set GOMAXPROCS from the CPU quota")
		}
	}
	return runtime.GOMAXPROCS(0)
}
