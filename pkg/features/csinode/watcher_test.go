package csinode

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/internal/kubeapi"
	"github.com/csi-registrar/node-driver-registrar/test/poll"
	"github.com/csi-registrar/node-driver-registrar/test/removeall"
)

// These tests run the watcher against a local HTTPS server that answers
// for node n1 as the API server does, but fails or expires watches when
// told to; the backoff runs on a fake clock.

type localAPI struct {
	// requests receives "GET csinode", "GET node", "WATCH rv=<rv>" as
	// each request arrives.
	requests chan string

	mu sync.Mutex
	// getFails and watchFails are the numbers of the next GETs of the
	// CSINode, and of the next watches, answered 500.
	getFails, watchFails int
	// expire: the next watch ends with an ERROR event, 410 Gone.
	expire bool
	// endWatch ends the watch that is open, as its timeout would.
	endWatch chan struct{}
}

func startLocalAPI(t *testing.T) (*localAPI, *kubeapi.Client) {
	t.Helper()
	a := &localAPI{requests: make(chan string, 100), endWatch: make(chan struct{})}
	srv := httptest.NewTLSServer(http.HandlerFunc(a.serve))
	t.Cleanup(srv.Close)
	removeall.Require(t)
	dir := t.TempDir()
	cfg := kubeapi.Config{Host: srv.URL, TokenFile: filepath.Join(dir, "token"), CAFile: filepath.Join(dir, "ca.crt")}
	if err := os.WriteFile(cfg.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.TokenFile, []byte("token"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := kubeapi.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a, c
}

func (a *localAPI) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	getFail, watchFail, expire := a.getFails > 0, a.watchFails > 0, a.expire
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/api/v1/nodes/n1":
		a.mu.Unlock()
		a.requests <- "GET node"
		fmt.Fprint(w, `{"metadata":{"name":"n1","uid":"uid-1"}}`)
	case r.URL.Path == "/apis/storage.k8s.io/v1/csinodes/n1":
		if getFail {
			a.getFails--
		}
		a.mu.Unlock()
		a.requests <- "GET csinode"
		if getFail {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"kind":"Status","code":500,"message":"boom"}`)
			return
		}
		fmt.Fprint(w, `{"metadata":{"name":"n1","resourceVersion":"5","ownerReferences":[{"apiVersion":"v1","kind":"Node","uid":"uid-1"}]},"spec":{"drivers":[{"name":"d"}]}}`)
	default:
		if watchFail {
			a.watchFails--
		}
		a.expire = false
		a.mu.Unlock()
		a.requests <- "WATCH rv=" + r.URL.Query().Get("resourceVersion")
		if watchFail {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"kind":"Status","code":500,"message":"boom"}`)
			return
		}
		if expire {
			fmt.Fprintln(w, `{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version: 5 (9)"}}`)
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-a.endWatch:
		}
	}
}

func (a *localAPI) set(f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f()
}

// next waits for the next request, which must be want.
func (a *localAPI) next(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-a.requests:
		if got != want {
			t.Fatalf("request %q, want %q", got, want)
		}
	case <-time.After(time.Minute):
		t.Fatalf("no request in a minute, want %q", want)
	}
}

func runLocal(t *testing.T, c *kubeapi.Client, clk *testclock.FakeClock) (*Watcher, <-chan Finding) {
	t.Helper()
	findings := make(chan Finding, 100)
	w := New("n1", c, func(f Finding) { findings <- f })
	w.clock = clk
	// The most jitter: each wait is 80% of the backoff.
	w.jitter = func(d time.Duration) time.Duration { return d }
	w.SetDriver("d")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, findings
}

// A watch that expires (410 Gone) is followed at once, without waiting
// for the clock, by a GET of the CSINode and of the Node and a new watch.
func TestExpiredWatchReadsAgain(t *testing.T) {
	a, c := startLocalAPI(t)
	a.expire = true
	w, findings := runLocal(t, c, testclock.NewFakeClock(time.Now()))
	for _, want := range []string{"GET csinode", "GET node", "WATCH rv=5", "GET csinode", "GET node", "WATCH rv=5"} {
		a.next(t, want)
	}
	if f := <-findings; f != (Finding{Listed: true}) {
		t.Errorf("finding %+v", f)
	}
	st := w.Status()
	if st.WatchesExpired != 1 || st.WatchRestarts != 1 || st.LastError != "" {
		t.Errorf("status %+v", st)
	}
}

// Failures are retried after a backoff that doubles from 1 s to 5 min
// (here each wait with the most jitter, 20% off); before anything was
// read the failure is the finding, after a first finding it is not.
func TestFailuresBackOff(t *testing.T) {
	a, c := startLocalAPI(t)
	a.getFails = 10
	clk := testclock.NewFakeClock(time.Now())
	w, findings := runLocal(t, c, clk)
	a.next(t, "GET csinode")
	want := Finding{Reason: `cannot read CSINode n1 yet: get csinodes of CSINode "n1": 500 Internal Server Error: boom`}
	if f := <-findings; f != want {
		t.Errorf("finding %+v\n     want %+v", f, want)
	}
	for _, backoff := range []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300} {
		poll.StepThrough(t, clk, backoff*time.Second*4/5)
		a.next(t, "GET csinode")
	}
	a.next(t, "GET node")
	a.next(t, "WATCH rv=5")
	if f := <-findings; f != (Finding{Listed: true}) {
		t.Errorf("finding %+v", f)
	}

	// The watch ends, and the next fails: the finding stays, and, as the
	// watch had made progress, the backoff starts over.
	a.set(func() { a.watchFails = 1 })
	a.endWatch <- struct{}{}
	a.next(t, "WATCH rv=5")
	poll.Until(t, "the watch's failure recorded", func() bool { return w.Status().LastError != "" })
	poll.StepThrough(t, clk, time.Second*4/5)
	a.next(t, "GET csinode")
	a.next(t, "GET node")
	a.next(t, "WATCH rv=5")
	poll.Until(t, "the failure cleared", func() bool { return w.Status().LastError == "" })
	if len(findings) != 0 {
		t.Errorf("a failure after a finding was reported: %+v", <-findings)
	}
	if st := w.Status(); st.Finding == nil || *st.Finding != (Finding{Listed: true}) || st.Requests["watch"]["500"] != 1 || st.Requests["get"]["500"] != 10 || st.WatchRestarts != 2 {
		t.Errorf("status %+v", st)
	}
}
