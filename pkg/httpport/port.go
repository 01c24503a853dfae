// Package httpport keeps the listening port of the registrar's HTTP
// endpoint (--http-endpoint). Usually that is one listen at start. But the
// pods of a rolling update with hostNetwork share the node's network: the
// new registrar finds the port taken by the old one. Instead of failing,
// it waits for the port, and the old one releases it when it hands the
// registration socket over (cmd/registrar's sharePort), so that the probes of
// both pods are answered throughout, by the instance that owns the
// registration.
package httpport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

const (
	// retryInterval is how often a taken address is tried again: the
	// instance that holds it releases it without telling this one, and
	// the probes are not answered until this one listens. A bind that
	// fails costs a few microseconds.
	retryInterval = 10 * time.Millisecond
	// releaseInterval is how often it is tried once the holder said it
	// releases it (Expect), for releaseWindow: the probes of both pods go
	// unanswered between the release and the next try.
	releaseInterval = time.Millisecond
	releaseWindow   = time.Second
	// DefaultMaxWait bounds the wait for a taken address. The older
	// instance of a rolling update releases it as soon as this one has
	// found the driver; an address still taken after that long is held by
	// another program (two drivers on hostNetwork with the same port?),
	// and failing makes that visible.
	DefaultMaxWait = 2 * time.Minute
)

// Port listens on the HTTP endpoint's address for the server, and listens
// again when it was released and claimed back.
type Port struct {
	address string
	listen  func(ctx context.Context) (net.Listener, error)
	// netns identifies this process's network namespace: a port is only
	// released for an instance in the same one.
	netns string

	listeners chan net.Listener
	wake      chan struct{}
	// MaxWait bounds the wait for a taken address; DefaultMaxWait.
	MaxWait time.Duration

	mu       sync.Mutex
	current  net.Listener // nil while not listening
	waiting  bool         // the address is in use: tried again
	released bool         // released for a newer instance, until Claim
	// expected: until then the holder is about to release the address.
	expected time.Time
}

// New keeps address, listening with lc.
func New(address string, lc net.ListenConfig) *Port {
	netns, _ := os.Readlink("/proc/self/ns/net")
	return &Port{
		address:   address,
		listen:    func(ctx context.Context) (net.Listener, error) { return lc.Listen(ctx, "tcp", address) },
		netns:     netns,
		listeners: make(chan net.Listener),
		wake:      make(chan struct{}, 1),
		MaxWait:   DefaultMaxWait,
	}
}

// Listeners delivers each new listener to the server, which serves it
// until it is closed.
func (p *Port) Listeners() <-chan net.Listener { return p.listeners }

// Run listens until ctx is done. The first listen fails the start unless
// the address is in use: then Run waits for it, up to MaxWait, trying
// again every 10 ms and when told to (Retry), and logs that once. After
// Release it listens again only once claimed (Claim).
func (p *Port) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	first := true
	var waitingSince time.Time
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		if l, err := p.tryListen(ctx); err != nil {
			var inUse bool
			p.mu.Lock()
			inUse = errors.Is(err, syscall.EADDRINUSE)
			wasWaiting := p.waiting
			p.waiting = inUse
			p.mu.Unlock()
			switch {
			case !inUse && first:
				return fmt.Errorf("cannot listen on %q: %w", p.address, err)
			case !inUse:
				logger.Error(err, "Cannot listen on the HTTP endpoint's address again; trying again", "address", p.address, "interval", retryInterval)
			case !wasWaiting:
				waitingSince = time.Now()
				logger.Info("The HTTP endpoint's address is in use: waiting for it. With hostNetwork, the older registrar of a rolling update releases it once this one has found the driver", "address", p.address, "maxWait", p.MaxWait)
			case time.Since(waitingSince) > p.MaxWait:
				return fmt.Errorf("cannot listen on %q: it has been in use for %v, by a program that is not an older instance of this registrar (two drivers on hostNetwork with the same port?): %w", p.address, p.MaxWait, err)
			}
			retry.Reset(p.retryInterval())
		} else if l != nil {
			if !first {
				logger.Info("Listening on the HTTP endpoint's address again", "address", p.address)
			}
			select {
			case p.listeners <- l:
			case <-ctx.Done():
				_ = l.Close()
				return nil
			}
		}
		first = false
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake:
		case <-retry.C:
		}
	}
}

// retryInterval is how long Run waits before it tries a taken address
// again.
func (p *Port) retryInterval() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.expected) {
		return releaseInterval
	}
	return retryInterval
}

// Expect tells Run that the instance holding the address is about to
// release it: it tries every millisecond for a second.
func (p *Port) Expect() {
	p.mu.Lock()
	p.expected = time.Now().Add(releaseWindow)
	p.mu.Unlock()
	p.Retry()
}

// tryListen listens unless it already does or the port was released; it
// returns nil, nil then.
func (p *Port) tryListen(ctx context.Context) (net.Listener, error) {
	p.mu.Lock()
	idle := p.current == nil && !p.released
	p.mu.Unlock()
	if !idle {
		return nil, nil
	}
	l, err := p.listen(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.current, p.waiting = l, false
	p.mu.Unlock()
	return l, nil
}

// Wanted returns the address and network namespace this process waits
// for, while the address is in use; empty strings otherwise.
func (p *Port) Wanted() (address, netns string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.waiting || p.netns == "" {
		return "", ""
	}
	return p.address, p.netns
}

// Release stops listening, for a newer instance in the same network
// namespace that waits for the same address; requests in flight finish.
// It tells whether it released the port.
func (p *Port) Release(address, netns string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.current == nil || address != p.address || netns == "" || netns != p.netns {
		return false
	}
	_ = p.current.Close()
	p.current, p.released = nil, true
	return true
}

// Claim lets Run listen again after a Release: this instance owns the
// registration again.
func (p *Port) Claim() {
	p.mu.Lock()
	released := p.released
	p.released = false
	p.mu.Unlock()
	if released {
		p.Retry()
	}
}

// Retry makes Run try a taken address at once: its holder released it.
func (p *Port) Retry() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Lost tells Run that the server stopped serving l for another reason
// than a Release, so that it listens again.
func (p *Port) Lost(l net.Listener) {
	p.mu.Lock()
	lost := p.current == l
	if lost {
		p.current = nil
	}
	p.mu.Unlock()
	if lost {
		p.Retry()
	}
}
