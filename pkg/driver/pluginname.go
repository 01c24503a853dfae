package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
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
	MaxBackoff     time.Duration
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

// PluginName waits for the CSI driver as long as it takes, until ctx is done,
// and returns its name once the name is valid (see ValidateName).
//
// The driver may be absent (no socket yet), slow (an attempt takes longer than
// cfg.Timeout) or not ready (it answers Unavailable): PluginName then retries
// with a capped exponential backoff, and tries at once when the socket is
// created. A driver that does not implement the Identity service, or answers
// with an invalid name, is a fatal error returned at once. Every attempt uses
// a new connection, closed before PluginName moves on or returns. Once ctx is
// done, PluginName returns an error wrapping ctx.Err().
//
// It logs at level 0 when it starts waiting, every 30 s while it still waits,
// once per distinct unexpected error, and when it finds the driver; each
// attempt is logged at V(4).
func PluginName(ctx context.Context, cfg Config) (string, error) {
	cfg = cfg.withDefaults()
	path := cfg.Address.Path
	if path == "" {
		return "", errors.New("no CSI driver address given")
	}
	logger := klog.FromContext(ctx)

	var (
		watcher         *socketWatcher // set once the driver is found missing
		delay           = cfg.InitialBackoff
		waitingSince    time.Time
		lastReminder    time.Time
		reportedErrors  = map[string]bool{}
		waitingErrorMsg = "waiting for the CSI driver at " + path
	)
	defer func() {
		if watcher != nil {
			watcher.Close()
		}
	}()
	for attempt := 1; ; attempt++ {
		logger.V(4).Info("Calling GetPluginInfo", "path", path, "attempt", attempt)
		name, err := getPluginInfo(ctx, cfg.Address, cfg.Timeout)
		if err == nil {
			if err := ValidateName(name); err != nil {
				return "", err
			}
			logger.Info("Found the CSI driver", "driverName", name, "path", path)
			return name, nil
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("%s: %w", waitingErrorMsg, ctx.Err())
		}

		switch code := status.Code(err); code {
		case codes.Unimplemented:
			return "", fmt.Errorf("the endpoint at %s does not serve the CSI Identity service (GetPluginInfo: %w); check that --csi-address is the CSI driver's socket", path, err)
		case codes.Unavailable, codes.DeadlineExceeded:
			// Not there yet, not ready yet or too slow: the usual start-up.
			logger.V(4).Info("CSI driver not ready", "path", path, "attempt", attempt, "err", err)
		default:
			key := code.String() + ": " + status.Convert(err).Message()
			if !reportedErrors[key] && len(reportedErrors) < maxReportedErrors {
				reportedErrors[key] = true
				logger.Info("CSI driver answered GetPluginInfo with an error; retrying", "path", path,
					"code", code.String(), "message", status.Convert(err).Message())
			} else {
				logger.V(4).Info("CSI driver answered GetPluginInfo with an error", "path", path, "attempt", attempt, "err", err)
			}
		}

		now := time.Now()
		if watcher == nil {
			// Watch only from the first failure: a driver already up then
			// costs no inotify instance, a per-user limit shared by
			// everything that runs as root on the node. Try again at once,
			// as the socket may have been created just before the watch.
			watcher = newSocketWatcher(logger, path)
			waitingSince, lastReminder = now, now
			logger.Info("Waiting for the CSI driver", "path", path, "reason", err)
			continue
		}
		if now.Sub(lastReminder) >= stillWaitingInterval {
			lastReminder = now
			logger.Info("Still waiting for the CSI driver", "path", path,
				"waited", now.Sub(waitingSince).Round(time.Second), "attempts", attempt, "reason", err)
		}

		woken, err := watcher.wait(ctx, delay)
		if err != nil {
			return "", fmt.Errorf("%s: %w", waitingErrorMsg, err)
		}
		if woken {
			logger.V(4).Info("CSI driver socket created", "path", path)
			delay = cfg.InitialBackoff
		} else {
			delay = min(2*delay, cfg.MaxBackoff)
		}
	}
}

// getPluginInfo asks the driver for its name once, on a connection of its own.
func getPluginInfo(ctx context.Context, address Address, timeout time.Duration) (string, error) {
	// The dialer connects to the path itself, as upstream's does: gRPC's
	// parsing of "unix:" targets would reject Windows paths
	// ("unix://C:\csi\csi.sock") and unescape '%' in paths. The passthrough
	// target only sets the :authority, which is "localhost" for Unix sockets
	// in gRPC too.
	conn, err := grpc.NewClient("passthrough:///localhost",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var dialer net.Dialer
			return dialer.DialContext(ctx, "unix", address.Path)
		}),
	)
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
