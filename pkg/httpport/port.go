// Package httpport keeps the listening port of the registrar's HTTP
// endpoint (--http-endpoint). Usually that is one listen at start. But the
// pods of a rolling update with hostNetwork share the node's network: the
// new registrar finds the port taken by the old one. Instead of failing, it
// waits for the port, trying the bind again; the old one stops listening
// once it has stepped aside for the new one (cmd/registrar's
// releaseOnStepAside), so that the instance that owns the registration
// answers the probes of both pods.
//
// The old one stops listening only where the new one waits on the same
// network: while it waits, an instance holds an abstract Unix socket named
// after the address (Linux), and abstract names exist per network
// namespace. On a pod network the old instance keeps answering its own
// probes until it exits.
package httpport

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/internal/sockerr"
)

const (
	// retryInterval is how often a taken address is tried again: the
	// instance that holds it releases it without telling this one, and
	// the probes are not answered until this one listens. A bind that
	// fails costs a few microseconds.
	retryInterval = 10 * time.Millisecond
	// releaseInterval is how often it is tried for releaseWindow once this
	// instance owns the registration (Claim): the older one releases the
	// address right after, and the probes of both pods go unanswered until
	// this one listens.
	releaseInterval = time.Millisecond
	releaseWindow   = time.Second
	// DefaultMaxWait bounds the wait for a taken address. The older
	// instance of a rolling update releases it as soon as this one has
	// taken the registration over; an address still taken after that long
	// is held by another program (two drivers on hostNetwork with the same
	// port?), and failing makes that visible.
	DefaultMaxWait = 2 * time.Minute
)

// Port listens on the HTTP endpoint's address for the server, and listens
// again when it was released and claimed back.
type Port struct {
	// MaxWait bounds the wait for a taken address; DefaultMaxWait.
	MaxWait time.Duration

	address   string
	lc        net.ListenConfig
	listeners chan net.Listener
	wake      chan struct{}

	mu       sync.Mutex
	current  net.Listener // nil while not listening
	waiting  bool         // the address is in use: tried again
	marker   net.Listener // held while waiting: waiterName
	released bool         // released for a newer instance, until Claim
	expected time.Time    // until then, the holder is about to release the address
}

// New keeps address, listening with lc.
func New(address string, lc net.ListenConfig) *Port {
	return &Port{
		MaxWait:   DefaultMaxWait,
		address:   address,
		lc:        lc,
		listeners: make(chan net.Listener),
		wake:      make(chan struct{}, 1),
	}
}

// Listeners delivers each new listener to the server, which serves it
// until it is closed.
func (p *Port) Listeners() <-chan net.Listener { return p.listeners }

// Run listens until ctx is done. The first listen fails the start unless
// the address is in use: then Run waits for it, up to MaxWait, trying
// again every 10 ms, and logs that once. After Release it listens again
// only once claimed (Claim), after Lost at once.
func (p *Port) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var waitingSince time.Time
	retry := time.NewTimer(0)
	defer retry.Stop()
	for first := true; ; first = false {
		p.mu.Lock()
		idle := p.current == nil && !p.released
		p.mu.Unlock()
		if idle {
			l, err := p.lc.Listen(ctx, "tcp", p.address)
			inUse := sockerr.AddrInUse(err)
			p.mu.Lock()
			wasWaiting := p.waiting
			p.current, p.waiting = l, inUse
			p.markWaiting(inUse)
			interval := retryInterval
			if time.Now().Before(p.expected) {
				interval = releaseInterval
			}
			p.mu.Unlock()
			switch {
			case err == nil:
				if !first {
					logger.Info("Listening on the HTTP endpoint's address", "address", p.address)
				}
				select {
				case p.listeners <- l:
				case <-ctx.Done():
					_ = l.Close()
					return nil
				}
			case !inUse && first:
				return fmt.Errorf("cannot listen on %q: %w", p.address, err)
			case !inUse:
				logger.Error(err, "Cannot listen on the HTTP endpoint's address again; trying again", "address", p.address, "interval", retryInterval)
			case !wasWaiting:
				waitingSince = time.Now()
				logger.Info("The HTTP endpoint's address is in use: waiting for it. With hostNetwork, the older registrar of a rolling update releases it once this one has taken the registration over", "address", p.address, "maxWait", p.MaxWait)
			case time.Since(waitingSince) > p.MaxWait:
				return fmt.Errorf("cannot listen on %q: it has been in use for %v, by a program that is not an older instance of this registrar (two drivers on hostNetwork with the same port?): %w", p.address, p.MaxWait, err)
			}
			if err != nil {
				retry.Reset(interval)
			}
		}
		select {
		case <-ctx.Done():
			p.mu.Lock()
			p.markWaiting(false)
			p.mu.Unlock()
			return nil
		case <-p.wake:
		case <-retry.C:
		}
	}
}

// waiterName is the abstract Unix socket an instance holds while it waits
// for address.
func waiterName(address string) string {
	return "@csi-node-driver-registrar/waits-for/" + address
}

// markWaiting holds waiterName while waiting, and lets it go otherwise.
// Called with mu held. An error (another waiter holds the name) leaves the
// marking to that one.
func (p *Port) markWaiting(waiting bool) {
	switch {
	case waiting && p.marker == nil && runtime.GOOS == "linux":
		p.marker, _ = net.Listen("unix", waiterName(p.address))
	case !waiting && p.marker != nil:
		_ = p.marker.Close()
		p.marker = nil
	}
}

// waiterOnThisNetwork tells whether another instance in this network
// namespace waits for address.
func waiterOnThisNetwork(address string) bool {
	if runtime.GOOS != "linux" {
		return false
	}
	c, err := net.DialTimeout("unix", waiterName(address), time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// Release stops listening when another instance waits for the address on
// this network; requests in flight finish. It tells whether it released
// the port.
func (p *Port) Release() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.current == nil || !waiterOnThisNetwork(p.address) {
		return false
	}
	_ = p.current.Close()
	p.current, p.released = nil, true
	return true
}

// Claim tells Run that this instance owns the registration (again): it
// listens again after a Release, and while the address is in use, the
// instance that held the registration is about to release it: Run tries
// every millisecond for a second.
func (p *Port) Claim() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting {
		p.expected = time.Now().Add(releaseWindow)
	}
	if p.released || p.waiting {
		p.released = false
		p.poke()
	}
}

// Lost tells Run that the server stopped serving l for another reason
// than a Release, so that it listens again.
func (p *Port) Lost(l net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.current == l {
		p.current = nil
		p.poke()
	}
}

// poke makes Run try the address at once.
func (p *Port) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}
