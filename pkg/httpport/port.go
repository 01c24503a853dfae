// Package httpport keeps the HTTP endpoint's port. The hostNetwork pods of
// a rolling update share it: the new registrar waits for the port, and the
// old one releases it once it stepped aside, but only if the new one waits
// on the same network, which an abstract Unix socket named after the
// address tells (abstract names exist per network namespace).
package httpport

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-registrar/node-driver-registrar/internal/sockerr"
)

const (
	// retryInterval: the holder releases the address without telling, and
	// a failed bind costs microseconds.
	retryInterval = 10 * time.Millisecond
	// releaseInterval applies for releaseWindow after Claim, when the older
	// instance is about to release the address.
	releaseInterval = time.Millisecond
	releaseWindow   = time.Second
	// maxWait: an address taken that long is another program's, and
	// failing makes that visible.
	maxWait = 2 * time.Minute
)

// Port listens on the HTTP endpoint's address, again after a release.
type Port struct {
	clock     clock.WithTicker
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

// New keeps address, listening with lc; clk times its retries.
func New(address string, lc net.ListenConfig, clk clock.WithTicker) *Port {
	return &Port{
		clock:     clk,
		address:   address,
		lc:        lc,
		listeners: make(chan net.Listener),
		wake:      make(chan struct{}, 1),
	}
}

// Listeners delivers each new listener to the server.
func (p *Port) Listeners() <-chan net.Listener { return p.listeners }

// Run listens until ctx is done, waiting up to two minutes for an address
// in use. After Release it listens again only once claimed, after Lost at once.
func (p *Port) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var waitingSince time.Time
	retry := p.clock.NewTimer(0)
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
			if p.clock.Now().Before(p.expected) {
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
				waitingSince = p.clock.Now()
				logger.Info("The HTTP endpoint's address is in use: waiting for it. With hostNetwork, the older registrar of a rolling update releases it once this one has taken the registration over", "address", p.address, "maxWait", maxWait)
			case p.clock.Since(waitingSince) > maxWait:
				return fmt.Errorf("cannot listen on %q: it has been in use for %v, by a program that is not an older instance of this registrar (two drivers on hostNetwork with the same port?): %w", p.address, maxWait, err)
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
		case <-retry.C():
		}
	}
}

func waiterName(address string) string {
	return "@csi-node-driver-registrar/waits-for/" + address
}

// markWaiting is called with mu held; another waiter may hold the name.
func (p *Port) markWaiting(waiting bool) {
	switch {
	case waiting && p.marker == nil && runtime.GOOS == "linux":
		p.marker, _ = net.Listen("unix", waiterName(p.address))
	case !waiting && p.marker != nil:
		_ = p.marker.Close()
		p.marker = nil
	}
}

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

// Release stops listening if another instance waits on this network;
// requests in flight finish.
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

// Claim tells Run that this instance owns the registration: the previous
// owner is about to release the address.
func (p *Port) Claim() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting {
		p.expected = p.clock.Now().Add(releaseWindow)
	}
	if p.released || p.waiting {
		p.released = false
		p.poke()
	}
}

// Lost tells Run that the server stopped serving l, to listen again.
func (p *Port) Lost(l net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.current == l {
		p.current = nil
		p.poke()
	}
}

func (p *Port) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}
