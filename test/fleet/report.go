package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// extrapolateTo is the cluster size of issue 45's goals.
const extrapolateTo = 5000

// phase is one measured stretch of the run.
type phase struct {
	name   string
	d      delta
	events []event
	steady time.Duration
	// apiSeconds is the span of kube-apiserver's own figures: from its
	// restart in (c), else the phase's.
	apiSeconds float64
}

// clientCount is how many answered requests of who the clients made, by
// operation.
func (p *phase) clientCount(who role, resource string) int {
	n := 0
	for _, e := range p.events {
		if e.who == who && e.answered && (resource == "" || strings.HasSuffix(e.op, " "+resource)) {
			n++
		}
	}
	return n
}

type report struct {
	n                     int
	phases                []phase
	rest, rolling, outage *phase
	outageStart           time.Time // kube-apiserver started again
	outageReady           time.Time // and ready
	outageEnd             time.Time
	outageWatches         time.Duration // from ready to every watch back
	outagePeak            float64       // the registrars' requests/s, highest over leaseRenew
	outagePeak1s          float64
	outageLeasePeak       float64
	// the watchers' own counts over (c): watches started again, and
	// ended by 410 Gone
	outageRestarts, outageExpired uint64
	goals                         []goal
}

type goal struct {
	id       string // for -soft
	name     string
	measured string
	limit    string
	met      bool
	// hard goals fail the run; the others are reported.
	hard bool
	note string
}

// registrarOps are the registrar's single-object calls, whose p99 the
// SLO bounds at 1 s.
var registrarOps = []key{{"GET", "nodes"}, {"PATCH", "nodes"}, {"PATCH", "nodes/status"}}

func mb(bytes float64) string { return fmt.Sprintf("%.0f MB", bytes/1e6) }

func (r *report) evaluate(o options) {
	r.goals = nil
	if r.rest != nil {
		reg, lease := r.rest.clientCount(registrarRole, ""), r.rest.clientCount(kubeletRole, "leases")
		ratio := float64(reg) / float64(max(lease, 1))
		note := ""
		if o.rest < 10*time.Minute {
			note = "the rest is shorter than the reflector's longest watch (10 min): not every watch renewal falls in it"
		}
		r.goals = append(r.goals, goal{
			id: "rest", name: "at rest, the registrars' requests against the Leases'", hard: true, note: note,
			measured: fmt.Sprintf("%.2f %% (%d against %d)", 100*ratio, reg, lease), limit: "≤ 3 %", met: ratio <= 0.03,
		})
	}
	if r.outage != nil && !r.outageReady.IsZero() {
		r.goals = append(r.goals, goal{
			id: "outage-watches", name: "after the outage, every CSINode watch back", hard: true,
			measured: fmt.Sprintf("%.1f s after kube-apiserver was ready", r.outageWatches.Seconds()),
			limit:    "≤ 60 s", met: r.outageWatches <= time.Minute,
		})
		leaseRate := 0.0
		if r.rest != nil {
			leaseRate = float64(r.rest.clientCount(kubeletRole, "leases")) / r.rest.d.seconds
		}
		r.goals = append(r.goals, goal{
			id: "outage-peak", name: "after the outage, the registrars' peak request rate (any 10 s)", hard: true,
			measured: fmt.Sprintf("%.1f/s (highest second: %.0f/s; the Leases' own peak then: %.1f/s)", r.outagePeak, r.outagePeak1s, r.outageLeasePeak),
			limit:    fmt.Sprintf("≤ the Leases' rate at rest, %.1f/s", leaseRate), met: r.outagePeak <= leaseRate,
		})
	}
	if r.rolling != nil {
		worst, which := 0.0, ""
		for _, k := range registrarOps {
			if q := quantile(0.99, r.rolling.d.buckets[k]); q > worst {
				worst, which = q, k.String()
			}
		}
		r.goals = append(r.goals, goal{
			id: "rolling-p99", name: "in the rolling update, p99 latency of the registrars' single-object calls", hard: true,
			measured: fmt.Sprintf("%.0f ms (%s)", worst*1000, which), limit: "≤ 1 s (Kubernetes' SLO)", met: worst <= 1,
		})
	}
	base := r.phase("baseline: Leases only")
	if r.rest != nil && base != nil {
		perNode := (r.rest.d.to.apiRSS - base.d.to.apiRSS) / float64(r.n)
		r.goals = append(r.goals, goal{
			id: "memory", name: fmt.Sprintf("at rest, extrapolated to %d nodes: kube-apiserver's memory for the registrars", extrapolateTo),
			measured: fmt.Sprintf("%s (%.1f kB a node: RSS at the rest's end less the baseline's, over N)", mb(perNode*extrapolateTo), perNode/1e3),
			limit:    "≤ 100 MB", met: perNode*extrapolateTo <= 100e6,
			note: "a difference of two RSS readings: at small N the heap's growth and collection are of the same size as the signal",
		})
		perNodeCPU := (r.rest.d.apiCPU/r.rest.apiSeconds - base.d.apiCPU/base.apiSeconds) / float64(r.n)
		r.goals = append(r.goals, goal{
			id: "cpu", name: fmt.Sprintf("at rest, extrapolated to %d nodes: kube-apiserver's CPU for the registrars", extrapolateTo),
			measured: fmt.Sprintf("%.3f cores (%.2f millicores a node: the rest's CPU rate less the baseline's, over N)", perNodeCPU*extrapolateTo, perNodeCPU*1000),
			limit:    "≤ 0.05 cores", met: perNodeCPU*extrapolateTo <= 0.05,
			note: "a difference of two CPU rates on a shared machine",
		})
	}
}

// softened makes the goals named by -soft reported ones.
func (r *report) soften(soft []string) {
	for i := range r.goals {
		if slices.Contains(soft, r.goals[i].id) {
			r.goals[i].hard = false
		}
	}
}

func (r *report) phase(name string) *phase {
	for i := range r.phases {
		if r.phases[i].name == name {
			return &r.phases[i]
		}
	}
	return nil
}

func (r *report) hardGoalsMet() bool {
	for _, g := range r.goals {
		if g.hard && !g.met {
			return false
		}
	}
	return true
}

func (r *report) print(w io.Writer, o options) {
	r.evaluate(o)
	r.soften(o.soft)
	fmt.Fprintf(w, "\n## make fleet: N = %d\n\n", r.n)
	fmt.Fprintln(w, "| phase | load (1, 5, 15 min) at its end | s | registrars' requests | Lease renewals | kube-apiserver CPU | etcd CPU | the simulated nodes' CPU | kube-apiserver RSS, heap, goroutines | etcd RSS | CSINode watches | steady after |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, p := range r.phases {
		d := p.d
		steady := "-"
		if p.steady > 0 {
			steady = fmt.Sprintf("%.1f s", p.steady.Seconds())
		}
		restart := ""
		if d.apiserverRestart {
			restart = " (since its restart)"
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %d | %d | %.3f cores%s | %.3f cores | %.3f cores | %s, %s, %.0f | %s | %.0f | %s |\n",
			p.name, d.to.load, d.seconds, p.clientCount(registrarRole, ""), p.clientCount(kubeletRole, "leases"),
			d.apiCPU/p.apiSeconds, restart, d.etcdCPU/d.seconds, d.selfCPU/d.seconds, mb(d.to.apiRSS), mb(d.to.apiHeap), d.to.apiGoroutines, mb(d.to.etcdRSS), d.to.watches["csinodes"], steady)
	}

	fmt.Fprintln(w, "\nThe registrars' requests a node, as their clients counted them (answered ones):")
	fmt.Fprintln(w)
	ops := map[string]bool{}
	for _, p := range r.phases {
		for _, e := range p.events {
			if e.who == registrarRole {
				ops[e.op] = true
			}
		}
	}
	header, rule := "| request |", "|---|"
	for _, p := range r.phases {
		header += " " + p.name + " |"
		rule += "--:|"
	}
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, rule)
	for _, op := range slices.Sorted(maps.Keys(ops)) {
		row := "| " + op + " |"
		for _, p := range r.phases {
			n := 0
			for _, e := range p.events {
				if e.who == registrarRole && e.answered && e.op == op {
					n++
				}
			}
			row += fmt.Sprintf(" %.2f |", float64(n)/float64(r.n))
		}
		fmt.Fprintln(w, row)
	}

	fmt.Fprintln(w, "\nkube-apiserver's apiserver_request_total and apiserver_request_duration_seconds for nodes, csinodes and leases: requests per second, p99 latency in ms")
	fmt.Fprintln(w)
	var keys []key
	seen := map[key]bool{}
	for _, p := range r.phases {
		for k := range p.d.requests {
			base, _, _ := strings.Cut(k.resource, "/")
			if !seen[k] && (base == "nodes" || base == "csinodes" || base == "leases") {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	slices.SortFunc(keys, func(a, b key) int { return strings.Compare(a.resource+" "+a.verb, b.resource+" "+b.verb) })
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, rule)
	for _, k := range keys {
		row := "| " + k.String() + " |"
		for _, p := range r.phases {
			n := p.d.requests[k]
			if n == 0 {
				row += " |"
				continue
			}
			cell := fmt.Sprintf(" %.2f", n/p.apiSeconds)
			if q := quantile(0.99, p.d.buckets[k]); !math.IsNaN(q) && k.verb != "WATCH" {
				cell += fmt.Sprintf(" (%.0f)", q*1000)
			}
			row += cell + " |"
		}
		fmt.Fprintln(w, row)
	}
	if r.outage != nil && !r.outageReady.IsZero() {
		answers := map[string]int{}
		for _, e := range r.outage.events {
			if e.who == registrarRole && e.answered {
				answers[fmt.Sprintf("%s %d", e.op, e.code)]++
			}
		}
		var list []string
		for _, a := range slices.Sorted(maps.Keys(answers)) {
			list = append(list, fmt.Sprintf("%s: %d", a, answers[a]))
		}
		fmt.Fprintf(w, "\n(c): the registrars' answered requests by status: %s; their watchers counted %d watches started again, %d ended by 410 Gone.",
			strings.Join(list, ", "), r.outageRestarts, r.outageExpired)
		fmt.Fprintf(w, "\n(c): kube-apiserver ready %.1f s after its start; every CSINode watch back %.1f s after that.\n",
			r.outageReady.Sub(r.outageStart).Seconds(), r.outageWatches.Seconds())
	}

	fmt.Fprintln(w, "\n| goal (issue 45) | measured | limit | met |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, g := range r.goals {
		met := "yes"
		switch {
		case !g.met && g.hard:
			met = "**NO** (hard: fails the run)"
		case !g.met:
			met = "no (reported)"
		}
		name := g.name + " [" + g.id + "]"
		if g.note != "" {
			name += " (" + g.note + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", name, g.measured, g.limit, met)
	}
	for _, g := range r.goals {
		if g.hard && !g.met {
			fmt.Fprintf(w, "\nFAILED GOAL: %s: %s, limit %s\n", g.name, g.measured, g.limit)
		}
	}
}
