package main

import (
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// figure is one measured value with its target.
type figure struct {
	name   string
	stat   string // which statistic value is: "median", "worst", "p99", ...
	value  float64
	unit   string
	atMost bool // the target is an upper bound, otherwise a lower bound
	target float64
	detail string
	// reference marks a line printed without a target: measured on
	// something else than the registrar, or for information. note says
	// which; the default is for the reference server.
	reference bool
	note      string
}

func (f figure) String() string {
	op, verdict := ">=", "ok"
	if f.atMost {
		op = "<="
	}
	switch {
	case f.atMost && f.value > f.target:
		verdict = "OVER TARGET"
	case !f.atMost && f.value < f.target:
		verdict = "UNDER TARGET"
	}
	value := fmt.Sprintf("%s %s %s", f.stat, trim(f.value), f.unit)
	if f.reference {
		note := f.note
		if note == "" {
			note = "(no target: what the machine allows)"
		}
		return fmt.Sprintf("%-56s %-20s %-37s %s", f.name, value, note, f.detail)
	}
	target := fmt.Sprintf("target %s %s %s", op, strconv.FormatFloat(f.target, 'g', -1, 64), f.unit)
	return fmt.Sprintf("%-56s %-20s %-24s %-12s %s", f.name, value, target, verdict, f.detail)
}

// ratio puts one of this registrar's figures next to upstream's, measured
// in the same run, with the budget for their ratio.
type ratio struct {
	name           string
	ours, upstream float64
	unit           string
	// budget is the most the ratio may be; budgetNote, when set, says it
	// in words.
	budget     float64
	budgetNote string
}

func (r ratio) String() string {
	q, shown := r.ours/r.upstream, ""
	switch {
	case r.upstream != 0:
		// Three decimals, so that a ratio just over its budget does
		// not print as equal to it.
		shown = fmt.Sprintf("%.3f", q)
	case r.ours == 0:
		q, shown = 1, "1 (both 0)"
	default:
		shown = "more (upstream's is 0)"
	}
	verdict := "ok"
	if !(q <= r.budget) {
		verdict = "OVER"
	}
	budget := fmt.Sprintf("%.2f%s", r.budget, r.budgetNote)
	return fmt.Sprintf("%s: %s %s vs upstream %s %s = %s, budget <= %s: %s",
		r.name, trim(r.ours), r.unit, trim(r.upstream), r.unit, shown, budget, verdict)
}

// upstreamFigure is f measured on upstream's registrar: a line without a
// target, for the ratio that follows it.
func upstreamFigure(f figure) figure {
	f.name = "upstream: " + f.name
	f.reference, f.note = true, "(upstream's binary, for the ratio)"
	return f
}

// printReference prints a line without a target.
func printReference(name string, sample durations, note string) {
	fmt.Printf("%-56s %-20s %-37s %s\n", name, "median "+trim(ms(sample.median()))+" ms", note, sample.spread())
}

// trim prints a value with three significant decimals at most.
func trim(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// durations summarises a sample of durations.
type durations []time.Duration

func (d durations) sorted() durations {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

// quantile is the nearest-rank quantile q (0 < q <= 1) of the sample.
func (d durations) quantile(q float64) time.Duration {
	s := d.sorted()
	i := int(float64(len(s))*q+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func (d durations) median() time.Duration { return d.quantile(0.5) }
func (d durations) max() time.Duration    { return slices.Max(d) }
func (d durations) min() time.Duration    { return slices.Min(d) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// spread describes a sample of durations in milliseconds.
func (d durations) spread() string {
	return fmt.Sprintf("(min %s, median %s, p90 %s, max %s ms; %d runs)",
		trim(ms(d.min())), trim(ms(d.median())), trim(ms(d.quantile(0.9))), trim(ms(d.max())), len(d))
}

// megabytes converts bytes to MB (10^6 bytes).
func megabytes(bytes int64) float64 { return float64(bytes) / 1e6 }

// medianInt64 is the median of a sample of integers.
func medianInt64(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// binarySize reports the size of the binary and whether its symbol table
// was stripped.
func binarySize(path string) (figure, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return figure{}, err
	}
	stripped := "stripped"
	if f, err := elf.Open(path); err == nil {
		if f.Section(".symtab") != nil {
			stripped = "NOT stripped"
		}
		_ = f.Close()
	}
	return figure{
		name: "binary size", stat: "size", value: megabytes(fi.Size()), unit: "MB",
		atMost: true, target: 13.5,
		detail: fmt.Sprintf("(%d bytes, %s, %s)", fi.Size(), stripped, path),
	}, nil
}

// printBuild says how the measured binary was built (its Go version and the
// flags that change its size) and the environment it runs with.
func printBuild(label, path string, env []string) error {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the build information of %s: %w", path, err)
	}
	var settings []string
	for _, s := range info.Settings {
		switch s.Key {
		case "-tags", "-trimpath", "-ldflags", "CGO_ENABLED", "GOARCH", "GOAMD64":
			settings = append(settings, s.Key+"="+s.Value)
		}
	}
	environment := "nothing added to the environment"
	if len(env) > 0 {
		environment = "environment " + strings.Join(env, " ")
	}
	fmt.Printf("%s: %s, %s, %s; %s\n", label, path, info.GoVersion, strings.Join(settings, " "), environment)
	return nil
}

// machineCPU is the CPU time of the whole machine from /proc/stat, in
// clock ticks.
type machineCPU struct {
	busy, total int64
}

func readMachineCPU() machineCPU {
	raw, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(raw), "\n")
	var m machineCPU
	for i, field := range strings.Fields(line) {
		n, err := strconv.ParseInt(field, 10, 64)
		if i == 0 || err != nil {
			continue
		}
		m.total += n
		// idle and iowait are the 4th and 5th numbers.
		if i != 4 && i != 5 {
			m.busy += n
		}
	}
	return m
}

// printMachine tells how busy the machine is, since the figures depend on
// it: the load average, and after the run how busy the CPUs were during it,
// this benchmark included.
func printMachine(when string, since *machineCPU) machineCPU {
	load, _ := os.ReadFile("/proc/loadavg")
	fields := strings.Fields(string(load))
	now := readMachineCPU()
	line := fmt.Sprintf("machine %s: %d CPUs, load average %s", when, runtime.NumCPU(), strings.Join(fields[:min(3, len(fields))], " "))
	if since != nil && now.total > since.total {
		line += fmt.Sprintf(", CPUs %.0f%% busy during the run (all processes)", 100*float64(now.busy-since.busy)/float64(now.total-since.total))
	}
	fmt.Println(line)
	return now
}
