package registration

import (
	"context"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// A look made while another publication was current took another socket
// for ours: the machine is not told of it, and the path is looked at again.
func TestStaleLookIsMadeAgain(t *testing.T) {
	srv := newServer(t, shortTempDir(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := &loop{s: srv, ctx: ctx, logger: klog.Background(), m: newMachine(srv.cfg, time.Now())}
	l.m.name, l.m.path, l.m.gen = testDriver, SocketPath(srv.cfg.Dir, testDriver), 2
	l.m.state = WaitingForKubelet

	stale := lookResult{at: At{kind: atLive, Driver: testDriver}, purpose: lookChange, gen: 1, path: l.m.path}
	if err := l.lookedAt(stale); err != nil {
		t.Fatal(err)
	}
	if l.m.state != WaitingForKubelet {
		t.Errorf("state after a stale look = %s, want waiting-for-kubelet: the look was about another publication", l.m.state)
	}
	select {
	case ev := <-srv.events:
		r, ok := ev.(lookResult)
		if !ok || r.gen != 2 || r.purpose != lookChange || r.at.kind != atNothing {
			t.Errorf("the look made again = %+v, want one for publication 2 finding the empty path", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the path was not looked at again")
	}
	l.looks.Wait()
}
