package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
)

// Defaults for the Config fields left at zero.
const (
	DefaultTimeout        = time.Second
	DefaultInitialBackoff = 100 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
)

// stillWaitingInterval spaces the level 0 reminders while the driver is away.
const stillWaitingInterval = 30 * time.Second

// maxReportedErrors bounds the distinct unexpected errors logged at level 0,
// in case a driver puts something changing (a time, a counter) in its messages.
const maxReportedErrors = 16

// Config says how to reach the CSI driver.
type Config struct {
	// Address is the driver's socket.
	Address Address
	// Timeout bounds each GetPluginInfo attempt (--timeout). Zero or less
	// means DefaultTimeout.
	Timeout time.Duration
	// InitialBackoff is the wait after the first failed attempt; it doubles
	// after each further failure up to MaxBackoff, and starts again from
	// InitialBackoff when the socket is created. Zero or less means the
	// default.
	InitialBackoff time.Duration
	// MaxBackoff caps the wait between attempts. It also paces Follow's
	// looks at the socket when it cannot watch it. Zero or less means the
	// default.
	MaxBackoff time.Duration
	// OnAttempt, if set, is called after every GetPluginInfo attempt of
	// Follow, with the attempt's duration and the RPC's
	// error: nil when the driver answered (even with an invalid name),
	// otherwise a gRPC status error (Unavailable when the socket cannot be
	// reached, DeadlineExceeded after Timeout, Canceled when ctx ended the
	// attempt). It is called on the goroutine making the attempts, which
	// waits for it: keep it as cheap as updating a metric.
	OnAttempt func(duration time.Duration, err error)
}

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.InitialBackoff <= 0 {
		c.InitialBackoff = DefaultInitialBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	c.MaxBackoff = max(c.MaxBackoff, c.InitialBackoff)
	return c
}

// errSocketRemoved ends a search when the socket is removed: Follow then
// waits for a new socket without attempts.
var errSocketRemoved = errors.New("the CSI driver socket was removed")

// search is one search for the driver, however long it takes: the
// attempts, the backoff between them and their logging. The driver may be
// absent (no socket yet), slow (an attempt takes longer than cfg.Timeout)
// or not ready (it answers Unavailable): the search then retries with a
// capped exponential backoff, and tries at once when the socket is
// created. A driver that does not implement the Identity service, or
// answers with an invalid name, is a fatal error returned at once. Every
// attempt uses a new connection, closed before the search moves on. It
// logs at level 0 when it starts waiting, every 30 s while it still waits,
// and once per distinct unexpected error; each attempt at V(4).
type search struct {
	cfg     Config // with defaults
	logger  klog.Logger
	watcher *socketWatcher // started at the first failure if it is not yet
}

// run makes attempts until the driver answers with a valid name, and returns
// that name with the socket's file information as seen just before the
// attempt that succeeded (nil if it could not be read). It ends with
// errSocketRemoved when the socket is removed, and with ctx's error once
// ctx is done.
func (s search) run(ctx context.Context) (string, os.FileInfo, error) {
	path := s.cfg.Address.Path
	var (
		delay          = s.cfg.InitialBackoff
		waitingSince   time.Time
		lastReminder   time.Time
		reportedErrors = map[string]bool{}
		socket         os.FileInfo
	)
	for attempt := 1; ; attempt++ {
		// Before the attempt: a socket replaced during the attempt must not
		// pass for the one that answered.
		socket, _ = os.Lstat(path)
		name, err := s.attempt(ctx, attempt)
		if err == nil {
			if err := ValidateName(name); err != nil {
				return "", nil, err
			}
			return name, socket, nil
		}
		if ctx.Err() != nil {
			return "", nil, ctx.Err()
		}

		switch code := status.Code(err); code {
		case codes.Unimplemented:
			return "", nil, fmt.Errorf("the endpoint at %s does not serve the CSI Identity service (GetPluginInfo: %w); check that --csi-address is the CSI driver's socket", path, err)
		case codes.Unavailable, codes.DeadlineExceeded:
			// Not there yet, not ready yet or too slow: the usual start-up.
			s.logger.V(4).Info("CSI driver not ready", "path", path, "attempt", attempt, "err", err)
		default:
			key := code.String() + ": " + status.Convert(err).Message()
			if !reportedErrors[key] && len(reportedErrors) < maxReportedErrors {
				reportedErrors[key] = true
				s.logger.Info("CSI driver answered GetPluginInfo with an error; retrying", "path", path,
					"code", code.String(), "message", status.Convert(err).Message())
			} else {
				s.logger.V(4).Info("CSI driver answered GetPluginInfo with an error", "path", path, "attempt", attempt, "err", err)
			}
		}

		now := time.Now()
		if attempt == 1 {
			waitingSince, lastReminder = now, now
			s.logger.Info("Waiting for the CSI driver", "path", path, "reason", err)
			if s.watcher.start() {
				// Try again at once, as the socket may have been created
				// just before the watch.
				continue
			}
		} else if now.Sub(lastReminder) >= stillWaitingInterval {
			lastReminder = now
			s.logger.Info("Still waiting for the CSI driver", "path", path,
				"waited", now.Sub(waitingSince).Round(time.Second), "attempts", attempt, "reason", err)
		}

		change, err := s.wait(ctx, now.Add(delay))
		if err != nil {
			return "", nil, err
		}
		switch change {
		case socketCreated, socketUnknown:
			s.logger.V(4).Info("CSI driver socket may have been created", "path", path)
			delay = s.cfg.InitialBackoff
		default:
			delay = min(2*delay, s.cfg.MaxBackoff)
		}
	}
}

// wait waits until deadline for the socket to be created; a removal of the
// socket ends the search with errSocketRemoved.
func (s search) wait(ctx context.Context, deadline time.Time) (socketChange, error) {
	change, err := s.watcher.next(ctx, deadline)
	switch {
	case err != nil:
		return noChange, err
	case change == socketRemoved:
		return noChange, errSocketRemoved
	}
	return change, nil
}

// attempt asks the driver for its name once and tells cfg.OnAttempt.
func (s search) attempt(ctx context.Context, attempt int) (string, error) {
	s.logger.V(4).Info("Calling GetPluginInfo", "path", s.cfg.Address.Path, "attempt", attempt)
	start := time.Now()
	name, err := getPluginInfo(ctx, s.cfg.Address, s.cfg.Timeout)
	if s.cfg.OnAttempt != nil {
		s.cfg.OnAttempt(time.Since(start), err)
	}
	return name, err
}

// getPluginInfo asks the driver for its name once, on a connection of its own.
func getPluginInfo(ctx context.Context, address Address, timeout time.Duration) (string, error) {
	conn, err := unixgrpc.NewClient(address.Path)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return "", err
	}
	return info.GetName(), nil
}
