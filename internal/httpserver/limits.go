package httpserver

import (
	"container/list"
	"net"
	"net/http"
	"sync"
)

// Any pod can connect to the endpoint without authentication: these limits
// bound what it holds (docs/probes-and-metrics.md has the figures).
const (
	// MaxHeaderBytes leaves room for a scrape's bearer token several times over.
	MaxHeaderBytes = 16 << 10
	// MaxConnections: legitimate clients need a few.
	MaxConnections = 256
)

// connLimiter closes the least recently changed connection past
// MaxConnections. Unlike netutil's LimitListener it never makes a new client
// wait, so that kubelet's probe is answered during a flood.
type connLimiter struct {
	mu sync.Mutex
	// recent holds the open connections, the least recently changed first.
	recent list.List
	byConn map[net.Conn]*list.Element
}

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
		_ = evicted.Close()
	}
}
