package driver_test

import (
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/test/afunix"
	"github.com/csi-registrar/node-driver-registrar/test/poll"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/csi-registrar/node-driver-registrar/pkg/driver"
)

// A driver that dies leaves its socket file behind: the connection Follow
// holds to it tells, and the driver is reported unreachable. Its next start
// puts a new socket in place, and it is reachable again. The clock runs
// while Follow waits: the connection's end waits a while for the file
// system to report the socket's removal, which never comes.
func TestFollowNoticesADriverThatDies(t *testing.T) {
	path := filepath.Join(socketDir(t), "csi.sock")
	ctx, _ := logContext(t)
	d := newFakeDriver(t, answerName(testDriverName))
	d.serve(t, path)
	cfg := testConfig(path)
	runClock(t, cfg, driver.SettleTime)
	f := followAsync(t, ctx, cfg)
	f.expect(t, reachable(testDriverName))

	// Killed: its connections close, its socket file stays.
	d.server.Stop()
	f.expect(t, gone)

	newFakeDriver(t, answerName(testDriverName)).serveByRename(t, path)
	f.expect(t, reachable(testDriverName))
	if left := f.stop(t); len(left) != 0 {
		t.Errorf("more events: %+v", left)
	}
}

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// A driver that closes idle connections is still there: the connection
// held to it is made again, once the clock has run through the wait for
// the file system's word, and nothing is reported.
func TestFollowReconnectsToADriverThatClosesIdleConnections(t *testing.T) {
	afunix.Require(t)
	path := filepath.Join(socketDir(t), "csi.sock")
	ctx, _ := logContext(t)
	d := newFakeDriverWith(t, answerName(testDriverName), grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 20 * time.Millisecond}))
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	counting := &countingListener{Listener: l}
	d.start(t, counting)
	cfg := testConfig(path)
	runClock(t, cfg, driver.SettleTime)
	f := followAsync(t, ctx, cfg)
	f.expect(t, reachable(testDriverName))

	// The GetPluginInfo call's connection, the held one, and two made again.
	if !poll.Wait(testTimeout, func() bool { return counting.accepted.Load() >= 4 }) {
		t.Fatalf("%d connections after %v, want the held one made again", counting.accepted.Load(), testTimeout)
	}
	if left := f.stop(t); len(left) != 0 {
		t.Errorf("events while the driver was there: %+v", left)
	}
}
