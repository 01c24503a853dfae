package registration

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// handshakeTimeout bounds how long a client of the registration socket may
// take to start speaking HTTP/2 (gRPC's own default is 120 s). kubelet and
// other instances of the registrar send their preface as soon as they are
// connected; a client that has not done so within this time is not one of
// them, and while it waits gRPC's Stop and GracefulStop wait for it too.
const handshakeTimeout = 2 * time.Second

// trackedListener remembers the connections it accepted, so that a stop
// does not wait for clients that never speak: gRPC's Stop and GracefulStop
// both wait until every accepted connection has finished its handshake.
type trackedListener struct {
	net.Listener

	mu       sync.Mutex
	conns    map[*trackedConn]struct{}
	stopping bool
}

func trackConns(l net.Listener) *trackedListener {
	return &trackedListener{Listener: l, conns: map[*trackedConn]struct{}{}}
}

// Accept hands gRPC the next connection. Once the server is stopping, a
// new connection is closed at once: it cannot have an RPC in flight.
func (l *trackedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, owner: l}
		l.mu.Lock()
		stopping := l.stopping
		if !stopping {
			l.conns[tc] = struct{}{}
		}
		l.mu.Unlock()
		if !stopping {
			return tc, nil
		}
		_ = c.Close()
	}
}

// closeSilent starts a stop: it closes the connections whose client has
// not sent a byte (they have no RPC in flight) and every connection
// accepted from now on. The others finish their calls.
func (l *trackedListener) closeSilent() {
	l.close(func(c *trackedConn) bool { return !c.spoke.Load() })
}

// closeAll ends a stop that took too long: every connection is closed,
// so that gRPC's Stop does not wait for a handshake.
func (l *trackedListener) closeAll() {
	l.close(func(*trackedConn) bool { return true })
}

func (l *trackedListener) close(which func(*trackedConn) bool) {
	var victims []*trackedConn
	l.mu.Lock()
	l.stopping = true
	for c := range l.conns {
		if which(c) {
			victims = append(victims, c)
		}
	}
	l.mu.Unlock()
	for _, c := range victims {
		_ = c.Close()
	}
}

// trackedConn is an accepted connection that knows whether its client has
// sent anything.
type trackedConn struct {
	net.Conn
	owner *trackedListener
	spoke atomic.Bool
	once  sync.Once
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.spoke.Load() {
		c.spoke.Store(true)
	}
	return n, err
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.owner.mu.Lock()
		delete(c.owner.conns, c)
		c.owner.mu.Unlock()
	})
	return c.Conn.Close()
}
