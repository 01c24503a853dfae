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
	// releaseInterval is how often it is tried once the holder asked what
	// this one waits for (Want), for releaseWindow: the probes of both
	// pods go unanswered between the release and the next try.
	releaseInterval = time.Millisecond
	releaseWindow   = time.Second
	// DefaultMaxWait bounds the wait for a taken address. The older
	// instance of a rolling update releases it as soon as this one has
	// found the driver; an address still taken after that long is held by
	// another program (two drivers on hostNetwork with the same port?),
	// and failing makes that visible.
	DefaultMaxWait = 2 * time.Minute
)

// Wanted is what an instance waits for, because another holds it: the
// address and the network namespace it wants it in. The JSON is what
// instances tell each other.
type Wanted struct {
	Address string `json:"httpAddress,omitempty"`
	NetNS   string `json:"netns,omitempty"`
}

// Port listens on the HTTP endpoint's address for the server, and listens
// again when it was released and claimed back.
type Port struct {
	// MaxWait bounds the wait for a taken address; DefaultMaxWait.
	MaxWait time.Duration
	// NetNS identifies this process's network namespace, as New reads it:
	// the port is only released for an instance in the same one.
	NetNS string

	address   string
	lc        net.ListenConfig
	listeners chan net.Listener
	wake      chan struct{}

	mu       sync.Mutex
	current  net.Listener // nil while not listening
	waiting  bool         // the address is in use: tried again
	released bool         // released for a newer instance, until Claim
	expected time.Time    // until then, the holder is about to release the address
}

// New keeps address, listening with lc.
func New(address string, lc net.ListenConfig) *Port {
	netns, _ := os.Readlink("/proc/self/ns/net")
	return &Port{
		MaxWait:   DefaultMaxWait,
		NetNS:     netns,
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
			inUse := errors.Is(err, syscall.EADDRINUSE)
			p.mu.Lock()
			wasWaiting := p.waiting
			p.current, p.waiting = l, inUse
			interval := retryInterval
			if time.Now().Before(p.expected) {
				interval = releaseInterval
			}
			p.mu.Unlock()
			switch {
			case err == nil:
				if !first {
					logger.Info("Listening on the HTTP endpoint's address again", "address", p.address)
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
				logger.Info("The HTTP endpoint's address is in use: waiting for it. With hostNetwork, the older registrar of a rolling update releases it once this one has found the driver", "address", p.address, "maxWait", p.MaxWait)
			case time.Since(waitingSince) > p.MaxWait:
				return fmt.Errorf("cannot listen on %q: it has been in use for %v, by a program that is not an older instance of this registrar (two drivers on hostNetwork with the same port?): %w", p.address, p.MaxWait, err)
			}
			if err != nil {
				retry.Reset(interval)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake:
		case <-retry.C:
		}
	}
}

// Want is asked by the instance that holds the address, as it steps
// aside: what this one waits for while the address is in use, nothing
// otherwise. Asked, Run expects the release and tries every millisecond
// for a second.
func (p *Port) Want() Wanted {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.waiting || p.NetNS == "" {
		return Wanted{}
	}
	p.expected = time.Now().Add(releaseWindow)
	p.poke()
	return Wanted{Address: p.address, NetNS: p.NetNS}
}

// Release stops listening, for a newer instance in the same network
// namespace that waits for the same address; requests in flight finish.
// It tells whether it released the port.
func (p *Port) Release(to Wanted) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.current == nil || to.Address != p.address || to.NetNS == "" || to.NetNS != p.NetNS {
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
	defer p.mu.Unlock()
	if p.released {
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
