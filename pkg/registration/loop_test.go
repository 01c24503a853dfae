package registration

import (
	"context"
	"slices"
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

// A look asked for while one runs waits for its outcome, once per purpose:
// a burst of events in the directory does not dial the same socket again
// and again.
func TestLooksRunOneAtATime(t *testing.T) {
	srv := newServer(t, shortTempDir(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := &loop{s: srv, ctx: ctx, logger: klog.Background(), m: newMachine(srv.cfg, time.Now())}
	l.m.name, l.m.path = testDriver, SocketPath(srv.cfg.Dir, testDriver)

	l.look(lookChange)
	l.look(lookChange)
	l.look(lookVacancy)
	if !slices.Equal(l.queued, []purpose{lookChange, lookVacancy}) {
		t.Errorf("looks waiting while one runs = %v, want one each of lookChange and lookVacancy", l.queued)
	}
	for _, want := range []purpose{lookChange, lookChange} {
		r := nextLook(t, srv)
		if r.purpose != want {
			t.Errorf("look for purpose %v, want %v", r.purpose, want)
		}
		if err := l.lookedAt(r); err != nil {
			t.Fatal(err)
		}
	}
	if r := nextLook(t, srv); r.purpose != lookVacancy || len(l.queued) != 0 {
		t.Errorf("last look for purpose %v with %v still waiting, want lookVacancy and none", r.purpose, l.queued)
	}
	l.looks.Wait()
}

func nextLook(t *testing.T, srv *Server) lookResult {
	t.Helper()
	select {
	case ev := <-srv.events:
		r, ok := ev.(lookResult)
		if !ok {
			t.Fatalf("event %+v, want a look's outcome", ev)
		}
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no look ran")
	}
	return lookResult{}
}
