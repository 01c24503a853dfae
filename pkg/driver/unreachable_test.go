package driver_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-registrar/node-driver-registrar/internal/unixgrpc"
	"github.com/csi-registrar/node-driver-registrar/pkg/driver"
	"github.com/csi-registrar/node-driver-registrar/test/afunix"
)

// Each error of connect(2) gets its own advice, whether it comes as the
// net package's error (one connection, as --diagnose makes) or only as the
// text a gRPC status keeps of it (Follow's calls).
func TestConnectAdvice(t *testing.T) {
	const path = "/csi/csi.sock"
	cases := []struct {
		errno syscall.Errno
		want  string
	}{
		{syscall.EACCES, "write permission"},
		{syscall.EPERM, "write permission"},
		{syscall.ECONNREFUSED, "nothing listens"},
		{syscall.ENOENT, "does not mount the driver's socket directory at " + filepath.Dir(path)},
		{syscall.ENOTDIR, "not a directory"},
		{syscall.EAGAIN, "listen queue is full"},
	}
	for _, tc := range cases {
		t.Run(tc.errno.Error(), func(t *testing.T) {
			// What net.Dialer returns, and what gRPC makes of its text.
			opErr := &net.OpError{Op: "dial", Net: "unix", Addr: &net.UnixAddr{Name: path, Net: "unix"}, Err: os.NewSyscallError("connect", tc.errno)}
			for _, err := range []error{
				&unixgrpc.ConnectError{Err: opErr},
				status.Errorf(codes.Unavailable, "connection error: desc = %q", "transport: Error while dialing: "+opErr.Error()),
			} {
				advice := driver.ConnectAdvice(err, path)
				if !strings.Contains(advice, tc.want) {
					t.Errorf("ConnectAdvice(%v) = %q, want %q in it", err, advice, tc.want)
				}
				if tc.errno != syscall.ECONNREFUSED && strings.Contains(advice, "nothing listens") {
					t.Errorf("ConnectAdvice(%v) = %q blames the driver", err, advice)
				}
				// The errno read from err is the one named.
				if got := driver.Unreachable(path, err); !strings.HasPrefix(got, "cannot connect to "+path+" ("+tc.errno.Error()+"): "+advice) {
					t.Errorf("Unreachable = %q", got)
				}
			}
		})
	}
	for _, err := range []error{
		nil,
		errors.New("something else"),
		status.Error(codes.DeadlineExceeded, "context deadline exceeded"),
		&unixgrpc.ConnectError{Err: &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EINVAL)}},
	} {
		if advice := driver.ConnectAdvice(err, path); advice != "" {
			t.Errorf("ConnectAdvice(%v) = %q, want none", err, advice)
		}
	}
	if got := driver.Unreachable(path, status.Error(codes.DeadlineExceeded, "context deadline exceeded")); got != "GetPluginInfo on /csi/csi.sock failed: DeadlineExceeded: context deadline exceeded" {
		t.Errorf("Unreachable of a timeout = %q", got)
	}
}

// Follow's own attempts, as the registrar reports them: a socket file that
// nothing listens on, and no file at all (both real as root too).
func TestUnreachableOfFollowsAttempts(t *testing.T) {
	afunix.Require(t)
	dir := socketDir(t)
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	for _, tc := range []struct {
		path, want string
	}{
		{stale, "(connection refused): nothing listens on the driver socket"},
		{filepath.Join(dir, "missing.sock"), "(no such file or directory): the driver's socket is not there"},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			first := make(chan error, 1)
			cfg := driver.Config{Address: driver.Address{Path: tc.path}, Timeout: time.Second, OnAttempt: func(_ time.Duration, err error) {
				select {
				case first <- err:
				default:
				}
				cancel()
			}}
			if err := driver.Follow(ctx, cfg, func(driver.Event) {}); err != nil {
				t.Fatal(err)
			}
			err := <-first
			if got := driver.Unreachable(tc.path, err); !strings.Contains(got, tc.want) {
				t.Errorf("Unreachable(%v) = %q, want %q in it", err, got, tc.want)
			}
		})
	}
}
