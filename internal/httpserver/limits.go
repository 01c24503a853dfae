package httpserver

import (
	"container/list"
	"net"
	"net/http"
	"sync"
)

// The endpoint listens on the pod network without authentication, so any
// pod of the cluster can open connections to it: these limits bound what
// they make the registrar hold in memory.
const (
	// MaxHeaderBytes bounds a request's head (net/http reads 4 KiB more
	// before it answers 431): kubelet's probes send about 100 bytes, a
	// scrape's bearer token a few KiB; one several times larger still fits.
	MaxHeaderBytes = 16 << 10
	// MaxConnections bounds the open connections, each with its goroutine,
	// its buffers and a head being read (docs/probes-and-metrics.md,
	// "Limits of the HTTP endpoint", has the figures). Legitimate clients need a few.
	MaxConnections = 256
)

// connLimiter is an http.Server's ConnState hook that keeps at most
// MaxConnections open: a new one past the limit closes the one whose state
// changed least recently, such as one that never sent a byte or never
// finished its head. Unlike a listener that stops accepting at a limit
// (golang.org/x/net/netutil's LimitListener), it never makes a new client
// wait, so kubelet's probe is answered while a flood holds connections.
type connLimiter struct {
	mu sync.Mutex
	// recent holds the open connections, the least recently changed
	// first; byConn finds a connection's element in it.
	recent list.List
	byConn map[net.Conn]*list.Element
}

// track follows a connection's state; net/http calls it.
func (l *connLimiter) track(conn net.Conn, state http.ConnState) {
	var evicted net.Conn
	l.mu.Lock()
	e, open := l.byConn[conn]
	switch {
	case state == http.StateNew:
		l.byConn[conn] = l.recent.PushBack(conn)
		if l.recent.Len() > MaxConnections {
			evicted = l.recent.Remove(l.recent.Front()).(net.Conn)
			delete(l.byConn, evicted)
		}
	case !open:
		// Closed as one too many; its own goroutine has not seen it yet.
	case state == http.StateActive || state == http.StateIdle:
		l.recent.MoveToBack(e)
	default: // closed or hijacked
		l.recent.Remove(e)
		delete(l.byConn, conn)
	}
	l.mu.Unlock()
	if evicted != nil {
		// Its goroutine's read fails, and it ends.
		_ = evicted.Close()
	}
}
