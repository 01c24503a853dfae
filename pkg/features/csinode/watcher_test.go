package csinode

import (
	"context"
	"encoding/pem"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	testclock "k8s.io/utils/clock/testing"

	"github.com/csi-registrar/node-driver-registrar/internal/kubeapi"
	"github.com/csi-registrar/node-driver-registrar/test/poll"
	"github.com/csi-registrar/node-driver-registrar/test/removeall"
)

// These tests run the watcher against a local HTTPS server that answers
// for node n1 as the API server does, but fails or expires watches when
// told to; the retries run on a fake clock.

const (
	// csiNodeJSON is the CSINode, owned by the Node of the UID it is given.
	csiNodeJSON = `{"kind":"CSINode","apiVersion":"storage.k8s.io/v1","metadata":{"name":"n1","resourceVersion":"5","ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"n1","uid":%q}]},"spec":{"drivers":[{"name":"d","nodeID":"n1"}]}}`
	// initialEventsEnd ends a watch-list's initial events; a bookmark
	// follows, so that the watch received an event and is resumed from its
	// resourceVersion when it ends.
	initialEventsEnd = `{"type":"BOOKMARK","object":{"kind":"CSINode","apiVersion":"storage.k8s.io/v1","metadata":{"resourceVersion":"5","annotations":{"k8s.io/initial-events-end":"true"}}}}
{"type":"BOOKMARK","object":{"kind":"CSINode","apiVersion":"storage.k8s.io/v1","metadata":{"resourceVersion":"5"}}}`
	boom = `{"kind":"Status","apiVersion":"v1","status":"Failure","code":500,"message":"boom"}`
	// streamRefused is kube-apiserver's answer to a watch-list when its etcd
	// cannot request progress notifications.
	streamRefused = `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":500,"reason":"InternalError","message":"a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled"}}`
)

type localAPI struct {
	// requests receives "GET node", "LIST", "WATCH-LIST" (a watch with its
	// initial events) or "WATCH rv=<rv>" as each request arrives.
	requests chan string

	mu sync.Mutex
	// readFails is the number of the next reads of the CSINode (a
	// watch-list and the list that follows it) answered 500; nodeFails
	// the number of the next reads of the Node.
	readFails, nodeFails int
	// expire: the next watch ends with an ERROR event, 410 Gone.
	expire bool
	// owners are the UIDs of the Node owning the CSINode at its next
	// reads, the last one for all reads after; noStream: watch-lists are
	// refused.
	owners   []string
	noStream bool
	// garble: the next watch's (or watch-list's) stream ends with a line
	// that is not JSON.
	garble bool
	// refusing: the server is being closed; a request that reaches it
	// meanwhile, on a connection not closed yet, is dropped unanswered.
	refusing bool
	srv      *httptest.Server
	// closing ends the watches being served, so that a server closes while
	// the watcher still runs.
	closing chan struct{}
}

func startLocalAPI(t *testing.T) (*localAPI, *kubeapi.Client) {
	t.Helper()
	a := &localAPI{requests: make(chan string, 100), owners: []string{"uid-1"}, closing: make(chan struct{})}
	srv := httptest.NewTLSServer(http.HandlerFunc(a.serve))
	t.Cleanup(srv.Close)
	a.srv = srv
	removeall.Require(t)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := kubeapi.NewClient(&rest.Config{Host: srv.URL, BearerToken: "token", QPS: -1, TLSClientConfig: rest.TLSClientConfig{CAFile: ca}})
	if err != nil {
		t.Fatal(err)
	}
	return a, c
}

func (a *localAPI) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	request := "LIST"
	switch {
	case r.URL.Path == "/api/v1/nodes/n1":
		request = "GET node"
	case q.Get("sendInitialEvents") == "true":
		request = "WATCH-LIST"
	case q.Get("watch") == "true":
		request = "WATCH rv=" + q.Get("resourceVersion")
	}
	a.mu.Lock()
	if a.refusing {
		a.mu.Unlock()
		panic(http.ErrAbortHandler)
	}
	fail, expire, noStream, owner, garble := false, a.expire, a.noStream, a.owners[0], a.garble && (request == "WATCH-LIST" && !a.noStream || strings.HasPrefix(request, "WATCH rv="))
	a.garble = a.garble && !garble
	switch request {
	case "GET node":
		fail, a.nodeFails = a.nodeFails > 0, max(a.nodeFails-1, 0)
	case "LIST":
		fail, a.readFails = a.readFails > 0, max(a.readFails-1, 0)
	case "WATCH-LIST":
		// The list that follows fails too.
		fail = a.readFails > 0
		a.expire = a.expire && noStream
	default:
		a.expire = false
	}
	if request == "LIST" || request == "WATCH-LIST" && !noStream && !fail {
		a.owners = a.owners[min(1, len(a.owners)-1):]
	}
	a.mu.Unlock()
	a.requests <- request
	w.Header().Set("Content-Type", "application/json")
	switch {
	case fail:
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, boom)
		return
	case request == "GET node":
		fmt.Fprint(w, `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","uid":"uid-1"}}`)
		return
	case request == "LIST":
		fmt.Fprintf(w, `{"kind":"CSINodeList","apiVersion":"storage.k8s.io/v1","metadata":{"resourceVersion":"5"},"items":[%s]}`, fmt.Sprintf(csiNodeJSON, owner))
		return
	case request == "WATCH-LIST" && noStream:
		fmt.Fprintln(w, streamRefused)
		return
	case request == "WATCH-LIST":
		fmt.Fprintf(w, "{\"type\":\"ADDED\",\"object\":%s}\n%s\n", fmt.Sprintf(csiNodeJSON, owner), initialEventsEnd)
	}
	if garble {
		fmt.Fprintln(w, `{"type":"MODIFIED","object":]`)
		return
	}
	if expire {
		fmt.Fprintln(w, `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired","message":"too old resource version: 5 (9)"}}`)
		return
	}
	w.(http.Flusher).Flush()
	select {
	case <-r.Context().Done():
	case <-a.closing:
	}
}

// refuse closes the server's listener and connections: connections are
// refused until serveAgain.
func (a *localAPI) refuse() {
	a.set(func() { a.refusing = true })
	a.srv.Listener.Close()
	a.srv.CloseClientConnections()
}

// serveAgain serves on the same address again, with the same certificate.
func (a *localAPI) serveAgain(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", a.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(a.serve))
	srv.Listener.Close()
	srv.Listener = l
	a.set(func() { a.refusing = false })
	srv.StartTLS()
	// The watcher stops after this cleanup: its watches are ended here.
	t.Cleanup(func() {
		close(a.closing)
		srv.Close()
	})
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

// listedAfter expects the requests wants, with the Node's read anywhere
// among them, and then the finding that the driver is listed.
func (a *localAPI) listedAfter(t *testing.T, findings <-chan Finding, wants ...string) {
	t.Helper()
	for _, want := range wants {
		next := <-a.requests
		if next == "GET node" {
			next = <-a.requests
		}
		if next != want {
			t.Fatalf("request %q, want %q", next, want)
		}
	}
	if f := <-findings; f != (Finding{Listed: true}) {
		t.Errorf("finding %+v", f)
	}
}

func runLocal(t *testing.T, c *kubeapi.Client, clk *testclock.FakeClock) (*Watcher, <-chan Finding) {
	t.Helper()
	findings := make(chan Finding, 100)
	w := New("n1", c, clk, func(f Finding) { findings <- f })
	// The reflector waits on the real clock.
	w.backoff = wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.25, Cap: 40 * time.Millisecond, Steps: math.MaxInt32}
	w.SetDriver("d")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, findings
}

// runListed runs the watcher until its first finding: listed, after a
// watch-list and a read of the Node.
func runListed(t *testing.T, a *localAPI, c *kubeapi.Client, clk *testclock.FakeClock) (*Watcher, <-chan Finding) {
	t.Helper()
	w, findings := runLocal(t, c, clk)
	a.next(t, "WATCH-LIST")
	a.next(t, "GET node")
	if f := <-findings; f != (Finding{Listed: true}) {
		t.Errorf("finding %+v", f)
	}
	return w, findings
}

// A watch that expires (410 Gone) is counted, and followed by a new
// watch-list; the Node is not read again, as the CSINode's owner is the
// UID read last.
func TestExpiredWatchReadsAgain(t *testing.T) {
	a, c := startLocalAPI(t)
	a.expire = true
	w, findings := runLocal(t, c, testclock.NewFakeClock(time.Now()))
	for _, want := range []string{"WATCH-LIST", "GET node", "WATCH-LIST"} {
		a.next(t, want)
	}
	if f := <-findings; f != (Finding{Listed: true}) {
		t.Errorf("finding %+v", f)
	}
	poll.Until(t, "the watch-list after the 410 answered", func() bool { return w.Status().Requests["watch"]["200"] == 2 })
	if st := w.Status(); st.WatchesExpired != 1 || st.WatchRestarts != 1 || st.LastError != "" || st.Requests["get"]["200"] != 1 || len(findings) != 0 {
		t.Errorf("status %+v, %d more findings", st, len(findings))
	}
	if len(a.requests) != 0 {
		t.Errorf("request %q after the watch-list", <-a.requests)
	}
}

// A list again reads the Node when the CSINode's owner is not the UID read
// last, and reports the replaced owner.
func TestRelistWithAnotherOwnerReadsTheNode(t *testing.T) {
	a, c := startLocalAPI(t)
	a.expire, a.owners = true, []string{"uid-1", "uid-0"}
	w, findings := runLocal(t, c, testclock.NewFakeClock(time.Now()))
	for _, want := range []string{"WATCH-LIST", "GET node", "WATCH-LIST", "GET node"} {
		a.next(t, want)
	}
	if f := <-findings; f != (Finding{Listed: true}) {
		t.Errorf("finding %+v", f)
	}
	if f := <-findings; f.Listed || f.Missing || !strings.Contains(f.Reason, "owned by the Node of UID uid-0, not by the current Node n1 of UID uid-1") {
		t.Errorf("finding %+v", f)
	}
	if st := w.Status(); st.CSINodeOwnerUID != "uid-0" || st.NodeUID != "uid-1" || st.Requests["get"]["200"] != 2 {
		t.Errorf("status %+v", st)
	}
}

// An API server that refused to stream a list is not asked to again: the
// list after a 410 is a list alone.
func TestRefusedWatchListIsNotAskedAgain(t *testing.T) {
	a, c := startLocalAPI(t)
	a.noStream, a.expire = true, true
	w, findings := runLocal(t, c, testclock.NewFakeClock(time.Now()))
	a.listedAfter(t, findings, "WATCH-LIST", "LIST", "WATCH rv=5", "LIST", "WATCH rv=5")
	poll.Until(t, "the last watch answered", func() bool { return w.Status().Requests["watch"]["200"] == 3 })
	if st := w.Status(); st.WatchesExpired != 1 || st.WatchRestarts != 2 || st.LastError != "" || st.Requests["get"]["200"] != 1 {
		t.Errorf("status %+v", st)
	}
}

// A watch-list whose stream breaks (client-go's own ERROR event) is not
// taken for the API server's refusal: the next read is a watch-list again.
func TestBrokenWatchListIsAskedAgain(t *testing.T) {
	a, c := startLocalAPI(t)
	a.garble = true
	w, _ := runListed(t, a, c, testclock.NewFakeClock(time.Now()))
	a.next(t, "WATCH-LIST")
	poll.Until(t, "the watch-list answered", func() bool { return w.Status().Requests["watch"]["200"] == 2 })
	if st := w.Status(); st.LastError != "" || st.Requests["get"]["200"] != 1 || st.Requests["list"] != nil {
		t.Errorf("status %+v", st)
	}
}

// A watch whose stream breaks (client-go's own ERROR event, as when the
// reflector stops a watch while it reads) is no failure to read the CSINode.
func TestBrokenWatchIsNoFailure(t *testing.T) {
	a, c := startLocalAPI(t)
	a.noStream, a.garble = true, true
	w, findings := runLocal(t, c, testclock.NewFakeClock(time.Now()))
	a.listedAfter(t, findings, "WATCH-LIST", "LIST", "WATCH rv=5")
	// The reflector reads the CSINode again once it has seen the broken
	// stream, which the watcher saw first.
	select {
	case <-a.requests:
	case <-time.After(time.Minute):
		t.Fatal("no request after the broken watch in a minute")
	}
	if st := w.Status(); st.LastError != "" || st.Finding == nil || *st.Finding != (Finding{Listed: true}) {
		t.Errorf("status %+v", st)
	}
}

// When a watch that worked cannot reach the API server again, the first
// retry waits a random part of the backoff's cap on the watcher's clock, and
// lists: a restarted API server answers a watch from the old
// resourceVersion with 410 Gone.
func TestUnreachableServerIsReadAgainSpread(t *testing.T) {
	a, c := startLocalAPI(t)
	clk := testclock.NewFakeClock(time.Now())
	w, findings := runListed(t, a, c, clk)
	a.refuse()
	poll.Until(t, "the retry waits on the watcher's clock", clk.HasWaiters)
	// The watch fails with its connection refused, or with the connection
	// it was sent on closed under it.
	if st := w.Status(); st.Requests["watch"]["error"] != 1 || !strings.Contains(st.LastError, "watch csinodes") {
		t.Errorf("status %+v", st)
	}
	a.serveAgain(t)
	if len(a.requests) != 0 {
		t.Fatalf("request %q before the wait", <-a.requests)
	}
	clk.Step(w.backoff.Cap)
	a.next(t, "WATCH-LIST")
	poll.Until(t, "the CSINode read again", func() bool {
		st := w.Status()
		return st.Requests["watch"]["200"] == 2 && st.LastError == ""
	})
	if st := w.Status(); st.WatchesExpired != 0 || st.Requests["get"]["200"] != 1 || len(findings) != 0 {
		t.Errorf("status %+v, %d findings", st, len(findings))
	}
}

// Failed reads of the CSINode are retried (a watch-list, then a list);
// before anything was read the failure is the finding, reported once.
func TestFailuresAreRetried(t *testing.T) {
	a, c := startLocalAPI(t)
	a.readFails = 4
	w, findings := runLocal(t, c, testclock.NewFakeClock(time.Now()))
	for range 4 {
		a.next(t, "WATCH-LIST")
		a.next(t, "LIST")
	}
	a.next(t, "WATCH-LIST")
	a.next(t, "GET node")
	want := Finding{Reason: `cannot read CSINode n1 yet: list csinodes of CSINode "n1": 500 Internal Server Error: boom`}
	if f := <-findings; f != want {
		t.Errorf("finding %+v\n     want %+v", f, want)
	}
	if f := <-findings; f != (Finding{Listed: true}) {
		t.Errorf("finding %+v", f)
	}
	if st := w.Status(); st.LastError != "" || st.Requests["list"]["500"] != 4 || st.Requests["watch"]["500"] != 4 || st.Requests["watch"]["200"] != 1 || st.Requests["get"]["200"] != 1 {
		t.Errorf("status %+v", st)
	}
}

// Failed reads of the Node are retried after a backoff that doubles, on
// the watcher's clock; after a first finding the failure is no finding.
func TestNodeReadsBackOff(t *testing.T) {
	a, c := startLocalAPI(t)
	clk := testclock.NewFakeClock(time.Now())
	w, findings := runListed(t, a, c, clk)
	a.set(func() { a.nodeFails = 2 })
	// A CSINode made again: the Node is read again.
	w.mu.Lock()
	cs := w.cs
	w.mu.Unlock()
	w.changed(cs, true)
	a.next(t, "GET node")
	// stepThrough steps the clock through a wait the backoff draws in
	// [d, 1.25 d), checking that nothing is retried before d.
	stepThrough := func(d time.Duration) {
		t.Helper()
		poll.Until(t, "the watcher waits", clk.HasWaiters)
		clk.Step(d - time.Millisecond)
		if !clk.HasWaiters() {
			t.Fatalf("retried before %v", d)
		}
		clk.Step(d/4 + time.Millisecond)
	}
	stepThrough(w.backoff.Duration)
	a.next(t, "GET node")
	stepThrough(2 * w.backoff.Duration)
	a.next(t, "GET node")
	poll.Until(t, "the failure cleared", func() bool { st := w.Status(); return st.LastError == "" && st.Requests["get"]["200"] == 2 })
	if st := w.Status(); st.Requests["get"]["500"] != 2 || len(findings) != 0 {
		t.Errorf("status %+v, %d findings", st, len(findings))
	}
}
