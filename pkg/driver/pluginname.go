package driver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/registration/sockfile"
)

// stillWaitingInterval spaces the level 0 reminders while the driver is away.
const stillWaitingInterval = 30 * time.Second

// maxReportedErrors bounds the distinct unexpected errors logged at level 0,
// in case a driver puts something changing (a time, a counter) in its messages.
const maxReportedErrors = 16

// A socket that refuses connections may be bound and not yet listening, which
// no file system event tells: for listenWait it is asked every listenPoll;
// after that it is taken for one left by a dead driver.
const (
	listenWait = 100 * time.Millisecond
	listenPoll = 2 * time.Millisecond
)

// errSocketRemoved ends a search when the socket is removed: Follow then
// waits for a new socket without attempts.
var errSocketRemoved = errors.New("the CSI driver socket was removed")

// answer holds the socket as it was just before the attempt that succeeded,
// and the connection the answer came on, which Follow then holds.
type answer struct {
	name   string
	socket sockfile.ID
	conn   *grpc.ClientConn
}

// searchBackoff is where each search's backoff starts, again once a socket
// is created.
var searchBackoff = wait.Backoff{Duration: initialBackoff, Factor: 2, Cap: maxBackoff, Steps: math.MaxInt32}

// search asks the driver for its name until it answers.
func (f *follower) search(ctx context.Context) (answer, error) {
	path := f.cfg.Address.Path
	backoff := searchBackoff
	var waitingSince, lastReminder time.Time
	reported := map[string]bool{}
	var refusing sockfile.ID    // the socket that refused the last attempt
	var refusingSince time.Time // its first refusal
	for attempt := 1; ; attempt++ {
		// Before the attempt: a socket replaced during the attempt must not
		// pass for the one that answered.
		socket := lstatSocket(path)
		f.logger.V(4).Info("Calling GetPluginInfo", "path", path, "attempt", attempt)
		start := f.cfg.Clock.Now()
		name, conn, connectFailed, err := getPluginInfo(ctx, path, f.cfg.Timeout)
		if f.cfg.OnAttempt != nil {
			f.cfg.OnAttempt(f.cfg.Clock.Since(start), err)
		}
		if err == nil {
			if err := ValidateName(name); err != nil {
				_ = conn.Close()
				return answer{}, err
			}
			return answer{name, socket, conn}, nil
		}
		if ctx.Err() != nil {
			return answer{}, ctx.Err()
		}

		switch code, message := status.Code(err), status.Convert(err).Message(); code {
		case codes.Unimplemented:
			return answer{}, fmt.Errorf("the endpoint at %s does not serve the CSI Identity service (GetPluginInfo: %w); check that it is the CSI driver's socket", path, err)
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

		now := f.cfg.Clock.Now()
		if attempt == 1 {
			waitingSince, lastReminder = now, now
			f.logger.Info("Waiting for the CSI driver", "path", path, "reason", err)
		} else if now.Sub(lastReminder) >= stillWaitingInterval {
			lastReminder = now
			f.logger.Info("Still waiting for the CSI driver", "path", path,
				"waited", now.Sub(waitingSince).Round(time.Second), "attempts", attempt, "reason", err)
		}

		delay := backoff.Duration // the next step's, not taken yet
		wait := delay
		if connectFailed && socket != (sockfile.ID{}) {
			if refusing != socket {
				refusing, refusingSince = socket, now
			}
			if now.Sub(refusingSince) < listenWait {
				wait = min(delay, listenPoll)
			}
		}
		change, err := f.watcher.next(ctx, now.Add(wait), socket)
		switch {
		case err != nil:
			return answer{}, err
		case change == socketRemoved:
			return answer{}, errSocketRemoved
		case change == socketCreated:
			f.logger.V(4).Info("CSI driver socket created", "path", path)
			backoff = searchBackoff
		case wait == delay:
			backoff.Step()
		}
	}
}

// getPluginInfo returns the connection the driver answered on, to be held;
// connectFailed: refused on a socket file that is there (Unavailable).
func getPluginInfo(ctx context.Context, path string, timeout time.Duration) (name string, conn *grpc.ClientConn, connectFailed bool, err error) {
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err = unixgrpc.Once(callCtx, path, unixgrpc.NoIdleTimeout)
	if err != nil {
		if callCtx.Err() != nil {
			return "", nil, false, status.FromContextError(callCtx.Err()).Err()
		}
		return "", nil, true, status.Error(codes.Unavailable, err.Error())
	}
	info, err := csi.NewIdentityClient(conn).GetPluginInfo(callCtx, &csi.GetPluginInfoRequest{})
	if err != nil {
		_ = conn.Close()
		return "", nil, false, err
	}
	return info.GetName(), conn, false, nil
}
