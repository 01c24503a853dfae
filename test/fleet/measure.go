package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/csi-registrar/node-driver-registrar/test/apiserver"
)

// role is who made a request: the simulated kubelets or the registrars.
type role uint8

const (
	kubeletRole role = iota
	registrarRole
)

// event is one request as its client saw it.
type event struct {
	at   time.Duration // since the recorder's start
	who  role
	op   string // "PUT leases", as the API server's metrics name verb and resource
	took time.Duration
	// answered: the API server answered (any status); not a refused dial.
	answered bool
	code     int
}

// recorder keeps every request of the simulated nodes, so that a phase's
// figures and a scenario's peak rate are counted at the clients, exactly.
type recorder struct {
	start  time.Time
	mu     sync.Mutex
	events []event
}

func newRecorder() *recorder { return &recorder{start: time.Now()} }

func (r *recorder) wrap(who role, next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		began := time.Now()
		resp, err := next.RoundTrip(req)
		e := event{at: began.Sub(r.start), who: who, op: operation(req), took: time.Since(began), answered: err == nil}
		if resp != nil {
			e.code = resp.StatusCode
		}
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
		return resp, err
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// operation names a request as apiserver_request_total does: the verb
// (GET, LIST, WATCH, POST, PUT, PATCH, DELETE) and the resource, with its
// subresource after a slash.
func operation(req *http.Request) string {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) > 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) > 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return req.Method + " " + req.URL.Path
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	resource := parts[0]
	if len(parts) > 2 {
		resource += "/" + parts[2]
	}
	verb := req.Method
	switch {
	case verb == http.MethodGet && len(parts) == 1 && req.URL.Query().Get("watch") == "true":
		verb = "WATCH"
	case verb == http.MethodGet && len(parts) == 1:
		verb = "LIST"
	}
	return verb + " " + resource
}

// window is the events of [from, to).
func (r *recorder) window(from, to time.Time) []event {
	lo, hi := from.Sub(r.start), to.Sub(r.start)
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event
	for _, e := range r.events {
		if e.at >= lo && e.at < hi {
			out = append(out, e)
		}
	}
	return out
}

// peakRate is the highest rate of who's answered requests over any span of
// width in [from, to), stepped by a second.
func (r *recorder) peakRate(who role, from, to time.Time, width time.Duration) float64 {
	events := r.window(from, to)
	peak := 0.0
	for lo := from; !lo.Add(width).After(to); lo = lo.Add(time.Second) {
		lo0, hi0 := lo.Sub(r.start), lo.Add(width).Sub(r.start)
		n := 0
		for _, e := range events {
			if e.who == who && e.answered && e.at >= lo0 && e.at < hi0 {
				n++
			}
		}
		peak = max(peak, float64(n)/width.Seconds())
	}
	return peak
}

// key is a verb and a resource ("PATCH", "nodes/status").
type key struct{ verb, resource string }

func (k key) String() string { return k.verb + " " + k.resource }

type bucket struct{ le, count float64 }

// snapshot is what kube-apiserver's /metrics and /proc say at one moment.
type snapshot struct {
	at       time.Time
	load     string // /proc/loadavg's 1-, 5- and 15-minute averages
	requests map[key]float64
	buckets  map[key][]bucket
	// watches open, by resource (apiserver_longrunning_requests).
	watches         map[string]float64
	apiPID, etcdPID int
	apiCPU, etcdCPU float64 // seconds
	apiRSS, etcdRSS float64 // bytes
	apiHeap         float64 // go_memstats_heap_inuse_bytes
	// selfCPU: this program's, the simulated nodes', which share the
	// machine's cores with the servers.
	selfCPU          float64
	apiGoroutines    float64
	scrapeErr        error
	apiserverStopped bool
}

func take(s *apiserver.Server) snapshot {
	snap := snapshot{at: time.Now(), load: loadAverage(), requests: map[key]float64{}, buckets: map[key][]bucket{}, watches: map[string]float64{}}
	snap.etcdPID, snap.apiPID = s.PIDs()
	snap.etcdCPU, snap.etcdRSS = procStat(snap.etcdPID)
	snap.selfCPU, _ = procStat(os.Getpid())
	if snap.apiPID == 0 {
		snap.apiserverStopped = true
		return snap
	}
	snap.apiCPU, snap.apiRSS = procStat(snap.apiPID)
	code, body := s.Call(http.MethodGet, "/metrics", "", nil)
	if code != http.StatusOK {
		snap.scrapeErr = fmt.Errorf("GET /metrics: %d %.200s", code, body)
		return snap
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		snap.scrapeErr = fmt.Errorf("parsing /metrics: %w", err)
		return snap
	}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		snap.requests[metricKey(m)] += m.GetCounter().GetValue()
	}
	for _, m := range families["apiserver_request_duration_seconds"].GetMetric() {
		k := metricKey(m)
		bs := snap.buckets[k]
		for i, b := range m.GetHistogram().GetBucket() {
			if i >= len(bs) {
				bs = append(bs, bucket{le: b.GetUpperBound()})
			}
			bs[i].count += float64(b.GetCumulativeCount())
		}
		snap.buckets[k] = bs
	}
	for _, m := range families["apiserver_longrunning_requests"].GetMetric() {
		if l := labels(m); l["verb"] == "WATCH" {
			snap.watches[l["resource"]] += m.GetGauge().GetValue()
		}
	}
	for _, m := range families["go_memstats_heap_inuse_bytes"].GetMetric() {
		snap.apiHeap = m.GetGauge().GetValue()
	}
	for _, m := range families["go_goroutines"].GetMetric() {
		snap.apiGoroutines = m.GetGauge().GetValue()
	}
	return snap
}

func labels(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

func metricKey(m *dto.Metric) key {
	l := labels(m)
	resource := l["resource"]
	if l["subresource"] != "" {
		resource += "/" + l["subresource"]
	}
	return key{l["verb"], resource}
}

// procStat is a process's CPU seconds (user and system) and resident set.
func procStat(pid int) (cpu, rss float64) {
	if pid == 0 {
		return 0, 0
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// The fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th, rss (pages) the 22nd.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 22 {
		return 0, 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	pages, _ := strconv.ParseFloat(fields[21], 64)
	// USER_HZ is 100 on every Linux ABI Go runs on.
	return (utime + stime) / 100, pages * float64(os.Getpagesize())
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

// delta is what happened between two snapshots. A kube-apiserver started
// again in between counts from zero.
type delta struct {
	from, to         snapshot
	seconds          float64
	requests         map[key]float64
	buckets          map[key][]bucket
	apiCPU, etcdCPU  float64
	selfCPU          float64
	apiserverRestart bool
}

func between(from, to snapshot) delta {
	d := delta{from: from, to: to, seconds: to.at.Sub(from.at).Seconds(), requests: map[key]float64{}, buckets: map[key][]bucket{}}
	d.apiserverRestart = from.apiPID != to.apiPID
	base := from
	if d.apiserverRestart {
		base = snapshot{requests: map[key]float64{}, buckets: map[key][]bucket{}}
	}
	for k, v := range to.requests {
		if v -= base.requests[k]; v > 0 {
			d.requests[k] = v
		}
	}
	for k, bs := range to.buckets {
		was := base.buckets[k]
		out := make([]bucket, len(bs))
		for i, b := range bs {
			out[i] = b
			if i < len(was) {
				out[i].count -= was[i].count
			}
		}
		d.buckets[k] = out
	}
	d.apiCPU = to.apiCPU - base.apiCPU
	d.etcdCPU = to.etcdCPU - from.etcdCPU
	d.selfCPU = to.selfCPU - from.selfCPU
	return d
}

// quantile interpolates within the histogram's buckets, as PromQL's
// histogram_quantile does; NaN without observations.
func quantile(q float64, bs []bucket) float64 {
	if len(bs) == 0 {
		return math.NaN()
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	total := bs[len(bs)-1].count
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	lowerLe, lowerCount := 0.0, 0.0
	for _, b := range bs {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				return lowerLe
			}
			if b.count == lowerCount {
				return b.le
			}
			return lowerLe + (b.le-lowerLe)*(rank-lowerCount)/(b.count-lowerCount)
		}
		lowerLe, lowerCount = b.le, b.count
	}
	return lowerLe
}

// connections tracks one simulated process's connections, so that its end
// closes them, as a process's exit does.
type connections struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (c *connections) dial(ctx context.Context, network, address string) (net.Conn, error) {
	conn, err := (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.conns = append(c.conns, conn)
	c.mu.Unlock()
	return conn, nil
}

func (c *connections) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}
