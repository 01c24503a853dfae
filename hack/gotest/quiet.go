package main

import (
	"fmt"
	"io"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// quietAfter is how long go test may print nothing before gotest says it
// is still at work: from an empty build cache, go test compiles for minutes
// (kubelet's and the API server's code, under -race) before its first line.
const quietAfter = time.Minute

// quietWatch notes when go test last printed, on either stream, and says
// so when it has printed nothing for quietAfter.
type quietWatch struct {
	clock clock.WithTicker
	what  string // the go test arguments, to name the run

	mu    sync.Mutex
	out   io.Writer // where the notice goes: go test's stdout
	start time.Time
	last  time.Time // of go test's last output, or of the last notice
}

func newQuietWatch(c clock.WithTicker, what string, out io.Writer) *quietWatch {
	now := c.Now()
	return &quietWatch{clock: c, what: what, out: out, start: now, last: now}
}

// writer is w, noting each write as go test's output.
func (q *quietWatch) writer(w io.Writer) io.Writer { return watchedWriter{q: q, w: w} }

type watchedWriter struct {
	q *quietWatch
	w io.Writer
}

func (ww watchedWriter) Write(p []byte) (int, error) {
	ww.q.mu.Lock()
	defer ww.q.mu.Unlock()
	ww.q.last = ww.q.clock.Now()
	return ww.w.Write(p)
}

// check prints the notice if nothing was printed for quietAfter.
func (q *quietWatch) check() {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now()
	if now.Sub(q.last) < quietAfter {
		return
	}
	q.last = now
	fmt.Fprintf(q.out, "go test %s: still compiling or testing (%d min so far)\n", q.what, int(now.Sub(q.start)/time.Minute))
}

// watch checks six times every quietAfter until stop is closed, so that
// go test is quiet for at most 70 s before the notice.
func (q *quietWatch) watch(stop <-chan struct{}) {
	t := q.clock.NewTicker(quietAfter / 6)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C():
			q.check()
		}
	}
}
