package httpport

import (
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/test/poll"
)

// run starts p.Run and returns its result channel; the run ends with the
// test.
func run(t *testing.T, p *Port) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	result, finished := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(finished)
		result <- p.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	return result
}

func next(t *testing.T, p *Port) net.Listener {
	t.Helper()
	select {
	case l := <-p.Listeners():
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no listener")
		return nil
	}
}

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Nobody waits for the address on this network (a pod network, where the
// newer pod has its own): the instance that steps aside keeps listening.
func TestKeepsTheAddressWhenNobodyWaits(t *testing.T) {
	p := New(freeAddress(t), net.ListenConfig{}, clock.RealClock{})
	run(t, p)
	l := next(t, p)
	if p.Release() {
		t.Fatal("released an address nobody waits for")
	}
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("the listener no longer accepts: %v", err)
	}
	c.Close()
}

// Two instances on one network, as the pods of a rolling update with
// hostNetwork: the newer waits for the address, the older releases it,
// and claims it back once the newer is gone.
func TestReleaseToAnInstanceThatWaits(t *testing.T) {
	if runtime.GOOS != "linux" {
		// As markWaiting: only Linux has the abstract Unix sockets that
		// mark an instance waiting; elsewhere nothing is ever released.
		t.Skip("needs Linux's abstract Unix sockets, which mark the instance that waits for the address")
	}
	addr := freeAddress(t)
	older, newer := New(addr, net.ListenConfig{}, clock.RealClock{}), New(addr, net.ListenConfig{}, clock.RealClock{})
	run(t, older)
	held := next(t, older)

	run(t, newer)
	poll.Until(t, "the newer instance waits for the address", func() bool {
		newer.mu.Lock()
		defer newer.mu.Unlock()
		return newer.waiting
	})
	if !older.Release() {
		t.Fatal("Release did not release the listener")
	}
	if _, err := held.Accept(); err == nil {
		t.Fatal("the released listener still accepts")
	}
	taken := next(t, newer)
	if older.Release() {
		t.Error("a second Release released a listener")
	}
	newer.mu.Lock()
	marked := newer.marker != nil
	newer.mu.Unlock()
	if marked {
		t.Error("the newer instance still says it waits once listening")
	}

	// The newer one goes; the older one, claimed back, listens again.
	older.Claim()
	taken.Close()
	next(t, older).Close()
}

func TestGivesUpOnAnAddressHeldByAnotherProgram(t *testing.T) {
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	fake := testingclock.NewFakeClock(time.Now())
	p := New(other.Addr().String(), net.ListenConfig{}, fake)
	ended := run(t, p)
	// Each time Run waits, the clock moves past the wait's end: a step that
	// lands before Run started waiting (its first timer is armed before its
	// first attempt) only moves the start of the wait.
	poll.Until(t, "Run gives up on the address", func() bool {
		select {
		case err = <-ended:
			return true
		default:
		}
		if fake.HasWaiters() {
			fake.Step(maxWait + time.Second)
		}
		return false
	})
	if err == nil || !strings.Contains(err.Error(), other.Addr().String()) || !strings.Contains(err.Error(), "in use") {
		t.Errorf("Run() = %v, want an error naming the address in use", err)
	}
}

func TestFailsAtOnceOnAnUnusableAddress(t *testing.T) {
	p := New("203.0.113.1:9808", net.ListenConfig{}, clock.RealClock{})
	select {
	case err := <-run(t, p):
		if err == nil || !strings.Contains(err.Error(), `cannot listen on "203.0.113.1:9808"`) {
			t.Errorf("Run() = %v, want an error naming the address", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not fail")
	}
}

// A listener the server stopped serving for another reason than a
// Release is listened on again.
func TestListensAgainWhenAListenerIsLost(t *testing.T) {
	p := New(freeAddress(t), net.ListenConfig{}, clock.RealClock{})
	run(t, p)
	l := next(t, p)
	l.Close()
	p.Lost(l)
	next(t, p).Close()
}
