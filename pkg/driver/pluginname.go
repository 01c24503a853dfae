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
	// OnAttempt, if set, is called after every GetPluginInfo attempt with
	// its duration and the RPC's error: nil when the driver answered (even
	// with an invalid name), otherwise a gRPC status error (Unavailable when
	// the socket cannot be reached, DeadlineExceeded after Timeout, Canceled
	// when ctx ended the attempt). Follow waits for it: keep it as cheap as
	// updating a metric.
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

// search asks the driver for its name until it answers with a valid one,
// and returns it with the socket as it was just before the attempt that
// succeeded (nil if it could not be read). The driver may be absent, slow
// (an attempt takes longer than Timeout) or not ready (Unavailable): the
// search then retries with a capped exponential backoff, and at once when
// the socket is created. A driver without the Identity service, or with an
// invalid name, is a fatal error. It logs at level 0 when it starts
// waiting, every 30 s while it still waits, and once per distinct
// unexpected error; each attempt at V(4).
func (f *follower) search(ctx context.Context) (string, os.FileInfo, error) {
	path := f.cfg.Address.Path
	delay := f.cfg.InitialBackoff
	var waitingSince, lastReminder time.Time
	reported := map[string]bool{}
	for attempt := 1; ; attempt++ {
		// Before the attempt: a socket replaced during the attempt must not
		// pass for the one that answered.
		socket, _ := os.Lstat(path)
		f.logger.V(4).Info("Calling GetPluginInfo", "path", path, "attempt", attempt)
		start := time.Now()
		name, err := getPluginInfo(ctx, path, f.cfg.Timeout)
		if f.cfg.OnAttempt != nil {
			f.cfg.OnAttempt(time.Since(start), err)
		}
		if err == nil {
			if err := ValidateName(name); err != nil {
				return "", nil, err
			}
			return name, socket, nil
		}
		if ctx.Err() != nil {
			return "", nil, ctx.Err()
		}

		switch code, message := status.Code(err), status.Convert(err).Message(); code {
		case codes.Unimplemented:
			return "", nil, fmt.Errorf("the endpoint at %s does not serve the CSI Identity service (GetPluginInfo: %w); check that --csi-address is the CSI driver's socket", path, err)
		case codes.Unavailable, codes.DeadlineExceeded:
			// Not there yet, not ready yet or too slow: the usual start-up.
			f.logger.V(4).Info("CSI driver not ready", "path", path, "attempt", attempt, "err", err)
		default:
			if key := code.String() + ": " + message; !reported[key] && len(reported) < maxReportedErrors {
				reported[key] = true
				f.logger.Info("CSI driver answered GetPluginInfo with an error; retrying",
					"path", path, "code", code.String(), "message", message)
			} else {
				f.logger.V(4).Info("CSI driver answered GetPluginInfo with an error", "path", path, "attempt", attempt, "err", err)
			}
		}

		now := time.Now()
		if attempt == 1 {
			waitingSince, lastReminder = now, now
			f.logger.Info("Waiting for the CSI driver", "path", path, "reason", err)
		} else if now.Sub(lastReminder) >= stillWaitingInterval {
			lastReminder = now
			f.logger.Info("Still waiting for the CSI driver", "path", path,
				"waited", now.Sub(waitingSince).Round(time.Second), "attempts", attempt, "reason", err)
		}

		change, err := f.watcher.next(ctx, now.Add(delay), socket)
		switch {
		case err != nil:
			return "", nil, err
		case change == socketRemoved:
			return "", nil, errSocketRemoved
		case change == socketCreated:
			f.logger.V(4).Info("CSI driver socket created", "path", path)
			delay = f.cfg.InitialBackoff
		default:
			delay = min(2*delay, f.cfg.MaxBackoff)
		}
	}
}

// getPluginInfo asks the driver for its name once, on a connection of its own.
func getPluginInfo(ctx context.Context, path string, timeout time.Duration) (string, error) {
	conn, err := unixgrpc.NewClient(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	return info.GetName(), err
}
