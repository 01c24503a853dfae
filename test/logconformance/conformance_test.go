// Package logconformance proves that the registrar's JSON log lines are
// Kubernetes' own: it runs k8s.io/component-base's JSON logger and
// internal/logging on the same calls and compares what they write, byte for
// byte but for ts. It is a module of its own so that the product module never
// depends on component-base.
package logconformance

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // the json format
	"k8s.io/klog/v2"

	"github.com/csi-registrar/node-driver-registrar/internal/logging"
)

// configurations are the flags both loggers are set up with: the same
// command line for each. vmodule is left out: component-base refuses it
// with the JSON format.
var configurations = []struct {
	name string
	args []string
	// buffered: info lines wait for klog.Flush.
	buffered bool
	// everyCallWrites: the verbosity is high enough for every call of the
	// table to write something, so that no comparison is of nothing.
	everyCallWrites bool
}{
	{name: "json", args: []string{"--logging-format=json"}},
	{name: "json v=3", args: []string{"--logging-format=json", "--v=3"}, everyCallWrites: true},
	{name: "json split", args: []string{"--logging-format=json", "--log-json-split-stream"}},
	// The flush daemon must not write the buffer before the test looks.
	{name: "json split buffered v=3", args: []string{"--logging-format=json", "--log-json-split-stream", "--log-json-info-buffer-size=64Ki", "--log-flush-frequency=1h", "--v=3"}, buffered: true, everyCallWrites: true},
}

// TestConformance runs every call of the table under every configuration,
// once with component-base's logger and once with ours, and compares stdout
// and stderr line by line. Both loggers run the same function, so the call
// sites are the same lines of this file and caller is compared as it is:
// that proves that ours reports the caller zap reports, through klog's
// helpers and logr's. Only ts, the time of the call, is masked.
func TestConformance(t *testing.T) {
	for _, config := range configurations {
		t.Run(config.name, func(t *testing.T) {
			for _, tc := range calls {
				t.Run(tc.name, func(t *testing.T) {
					want := capture(t, applyComponentBase, config.args, config.buffered, tc.log)
					got := capture(t, applyRegistrar, config.args, config.buffered, tc.log)
					if config.everyCallWrites && len(want.stdout)+len(want.stderr) == 0 {
						t.Fatal("component-base wrote nothing")
					}
					for _, stream := range []struct {
						name      string
						want, got []string
					}{
						{"stdout before klog.Flush", want.stdoutBeforeFlush, got.stdoutBeforeFlush},
						{"stdout", want.stdout, got.stdout},
						{"stderr", want.stderr, got.stderr},
					} {
						compare(t, stream.name, mask(stream.want, tc.timeKeys), mask(stream.got, tc.timeKeys))
					}
				})
			}
		})
	}
}

// compare reports each line that differs, with both versions.
func compare(t *testing.T, stream string, wantLines, gotLines []string) {
	t.Helper()
	for i := range max(len(wantLines), len(gotLines)) {
		var w, g string
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if w != g {
			t.Errorf("%s line %d differs\ncomponent-base: %s\nregistrar:      %s", stream, i+1, w, g)
		}
	}
}

var tsValue = regexp.MustCompile(`^\{"ts":[0-9.]+,`)

// mask replaces ts, and the values of timeKeys: component-base writes a
// time.Time value as the time of the call (its time encoder ignores the
// value), the registrar writes the value itself. TestTimeValues checks ours.
func mask(lines []string, timeKeys []string) []string {
	masked := make([]string, len(lines))
	for i, line := range lines {
		line = tsValue.ReplaceAllString(line, `{"ts":"TS",`)
		for _, key := range timeKeys {
			value := regexp.MustCompile(`"` + regexp.QuoteMeta(key) + `":(\[[0-9.,]*\]|[0-9.]+)`)
			line = value.ReplaceAllString(line, `"`+key+`":"TIME"`)
		}
		masked[i] = line
	}
	return masked
}

type output struct {
	stdoutBeforeFlush, stdout, stderr []string
}

// setUp configures klog's global logger from a command line, and returns
// what undoes what klog.CaptureState does not.
type setUp func(t *testing.T, args []string, stdout, stderr *lineRecorder) (undo func())

// capture sets klog up with apply, runs log and returns what was written.
func capture(t *testing.T, apply setUp, args []string, buffered bool, log func()) output {
	t.Helper()
	state := klog.CaptureState()
	defer state.Restore()
	var stdout, stderr lineRecorder
	defer apply(t, args, &stdout, &stderr)()
	log()
	var out output
	if buffered {
		out.stdoutBeforeFlush = stdout.lines()
	}
	klog.Flush()
	out.stdout, out.stderr = stdout.lines(), stderr.lines()
	return out
}

func applyRegistrar(t *testing.T, args []string, stdout, stderr *lineRecorder) (undo func()) {
	t.Helper()
	options := logging.NewOptions()
	fs := flag.NewFlagSet("registrar", flag.ContinueOnError)
	options.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := options.Apply(fs, stdout, stderr); err != nil {
		t.Fatal(err)
	}
	return func() {}
}

// applyComponentBase sets klog up as a Kubernetes component does, with the
// LoggingAlphaOptions feature gate that the split stream needs.
func applyComponentBase(t *testing.T, args []string, stdout, stderr *lineRecorder) (undo func()) {
	t.Helper()
	gate := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(gate); err != nil {
		t.Fatal(err)
	}
	if err := gate.Set(string(logsapi.LoggingAlphaOptions) + "=true"); err != nil {
		t.Fatal(err)
	}
	config := logsapi.NewLoggingConfiguration()
	fs := pflag.NewFlagSet("component-base", pflag.ContinueOnError)
	logsapi.AddFlags(config, fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := logsapi.ValidateAndApplyWithOptions(config, &logsapi.LoggingOptions{ErrorStream: stderr, InfoStream: stdout}, gate); err != nil {
		t.Fatal(err)
	}
	return func() {
		// component-base refuses a second configuration unless reset.
		if err := logsapi.ResetForTest(gate); err != nil {
			t.Error(err)
		}
	}
}

// lineRecorder keeps what a logger writes to one stream, as lines. zap's
// buffered writer may write from a goroutine of its own.
type lineRecorder struct {
	mu      sync.Mutex
	written []string
}

func (r *lineRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for line := range strings.SplitAfterSeq(string(p), "\n") {
		if line != "" {
			r.written = append(r.written, line)
		}
	}
	return len(p), nil
}

func (r *lineRecorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.written)
}

// TestTimeValues checks what the conformance table masks: a time.Time value
// is written as its own milliseconds since the epoch, in ts's format.
func TestTimeValues(t *testing.T) {
	state := klog.CaptureState()
	defer state.Restore()
	var stdout, stderr lineRecorder
	defer applyRegistrar(t, []string{"--logging-format=json"}, &stdout, &stderr)()
	at := time.UnixMilli(1700000000123).Add(456 * time.Microsecond)
	klog.InfoS("times", "t", at, "p", &at, "list", []time.Time{at, at})
	want := `"t":1700000000123.456,"p":1700000000123.456,"list":[1700000000123.456,1700000000123.456]}` + "\n"
	if got := strings.Join(stderr.lines(), ""); !strings.HasSuffix(got, want) {
		t.Errorf("got %s want it to end with %s", got, want)
	}
}

// Values of many kinds, each with its own way through zap's encoder.
type (
	valueStringer   struct{ name string }
	pointerStringer struct{ name string }
	panicStringer   struct{}
	counterStringer struct{ n int }
	objectMarshaler struct{ name string }
	panicMarshaler  struct{}
	verboseError    struct{}
	errorGroup      []error
	panicError      struct{}
	pointerError    struct{ msg string }
	badJSON         struct{}
	state           string
	object          struct{ name, namespace string }
	logValuer       struct{ value slog.Value }
)

func (s valueStringer) String() string       { return "value " + s.name }
func (p *pointerStringer) String() string    { return p.name }
func (panicStringer) String() string         { panic("no string") }
func (c *counterStringer) String() string    { return fmt.Sprint(c.n) }
func (m objectMarshaler) MarshalLog() any    { return map[string]string{"kind": "object", "name": m.name} }
func (panicMarshaler) MarshalLog() any       { panic("no value") }
func (verboseError) Error() string           { return "short" }
func (errorGroup) Error() string             { return "several" }
func (g errorGroup) Errors() []error         { return g }
func (panicError) Error() string             { panic("no message") }
func (e *pointerError) Error() string        { return e.msg }
func (badJSON) MarshalJSON() ([]byte, error) { return nil, errors.New("cannot") }
func (o object) GetName() string             { return o.name }
func (o object) GetNamespace() string        { return o.namespace }
func (l logValuer) LogValue() slog.Value     { return l.value }

// Format prints more with %+v, as errors with stack traces do.
func (verboseError) Format(s fmt.State, _ rune) {
	if s.Flag('+') {
		fmt.Fprint(s, "short\nat main.go:1")
		return
	}
	fmt.Fprint(s, "short")
}

type tagged struct {
	Name     string        `json:"name"`
	Count    int           `json:"count,omitempty"`
	Wait     time.Duration `json:"wait"`
	At       time.Time     `json:"at"`
	Inner    *tagged       `json:"inner,omitempty"`
	internal string
}

var (
	errBoom    = errors.New("boom")
	errWrapped = fmt.Errorf("registering %q: %w", "d", errBoom)
	errJoined  = errors.Join(errBoom, errors.New("second"))
	duration   = 1500 * time.Millisecond
	number     = 42
	text       = "pointed"
	yes        = true
	at         = time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
)

// calls is the table both loggers run. Each function is one call site, or a
// few in a row; timeKeys are keys whose values are time.Time (see mask).
var calls = []struct {
	name     string
	log      func()
	timeKeys []string
}{
	// Messages.
	{name: "InfoS", log: func() { klog.InfoS("Pod status updated", "pod", "x", "status", "ready") }},
	{name: "message quotes and escapes", log: func() { klog.InfoS("say \"hi\" \\ back\tslash\nnext\rline \x01\x1f\x7f") }},
	{name: "message unicode", log: func() { klog.InfoS("Grüße, 日本, ✓ 😀") }},
	{name: "message line separators", log: func() { klog.InfoS("a\u2028b\u2029c", "v", "x\u2028y") }},
	{name: "message invalid UTF-8", log: func() { klog.InfoS("bad \xff\xfe byte", "v", "\xc3") }},
	{name: "message HTML", log: func() { klog.InfoS("<a href=\"x\">&amp;</a>", "html", "<&>") }},
	{name: "message empty", log: func() { klog.InfoS("") }},
	{name: "keys to escape", log: func() { klog.InfoS("keys", "quo\"te", 1, "new\nline", 2, "ü\u2028", 3, "", 4) }},

	// Key types.
	{name: "strings", log: func() {
		klog.InfoS("strings", "empty", "", "s", "x", "list", []string{"a", "\u2028"}, "nil", []string(nil), "p", &text, "nilp", (*string)(nil))
	}},
	{name: "signed integers", log: func() {
		klog.InfoS("ints", "int", -1, "i8", int8(math.MinInt8), "i16", int16(-2), "i32", int32(3), "i64", int64(math.MaxInt64), "p", &number, "nilp", (*int)(nil), "list", []int{1, 2}, "nil", []int(nil), "i64s", []int64{-5})
	}},
	{name: "unsigned integers", log: func() {
		klog.InfoS("uints", "uint", uint(1), "u8", uint8(2), "u16", uint16(3), "u32", uint32(4), "u64", uint64(math.MaxUint64), "uintptr", uintptr(5), "list", []uint{6}, "u16s", []uint16{7})
	}},
	{name: "floats", log: func() {
		klog.InfoS("floats", "f64", 1.5, "f32", float32(0.1), "tiny", 1e-7, "huge", 1e21, "negzero", math.Copysign(0, -1), "max", math.MaxFloat64, "p", new(2.25), "nilp", (*float64)(nil), "list", []float64{0.5, 3}, "f32s", []float32{0.2})
	}},
	{name: "special floats", log: func() {
		klog.InfoS("special", "nan", math.NaN(), "inf", math.Inf(1), "-inf", math.Inf(-1), "list", []float64{math.NaN(), math.Inf(-1)})
	}},
	{name: "complex", log: func() {
		klog.InfoS("complex", "c", complex(1, -2), "c64", complex64(complex(0.1, 0.5)), "list", []complex128{complex(0, 1)})
	}},
	{name: "bools", log: func() {
		klog.InfoS("bools", "t", true, "f", false, "p", &yes, "nilp", (*bool)(nil), "list", []bool{true, false})
	}},
	{name: "durations", log: func() {
		klog.InfoS("durations", "d", duration, "zero", time.Duration(0), "p", &duration, "nilp", (*time.Duration)(nil), "list", []time.Duration{time.Second, time.Microsecond})
	}},
	{name: "times", log: func() { klog.InfoS("times", "t", at, "p", &at, "list", []time.Time{at}) }, timeKeys: []string{"t", "p", "list"}},
	{name: "nil time pointer", log: func() { klog.InfoS("times", "nilp", (*time.Time)(nil)) }},
	{name: "byte slices", log: func() { klog.InfoS("bytes", "b", []byte("hi\x00\xff"), "empty", []byte{}, "nil", []byte(nil)) }},
	{name: "nil", log: func() {
		klog.InfoS("nil", "untyped", nil, "map", map[string]int(nil), "any", []any(nil), "ptr", (*tagged)(nil))
	}},
	{name: "structs", log: func() {
		klog.InfoS("structs", "tagged", tagged{Name: "<x>", Wait: time.Second, At: at, Inner: &tagged{Name: "\u2028"}, internal: "hidden"}, "anonymous", struct {
			A int
			b string
		}{1, "b"}, "empty", struct{}{})
	}},
	{name: "maps and slices", log: func() {
		klog.InfoS("collections", "map", map[string]any{"b": []any{"<&>", nil, 1.5}, "a": map[int]string{2: "two", 1: "one"}}, "any", []any{1, "a", nil, true}, "named", state("ready\u2028"), "states", []state{"a"})
	}},
	{name: "not encodable", log: func() { klog.InfoS("bad", "chan", make(chan int), "func", func() {}, "json", badJSON{}, "after", 1) }},

	// Stringers and marshalers.
	{name: "stringers", log: func() {
		klog.InfoS("stringers", "value", valueStringer{"v"}, "pointer", &pointerStringer{"p\u2028"}, "nil", (*pointerStringer)(nil), "panic", panicStringer{}, "after", 1)
	}},
	{name: "logr.Marshaler", log: func() {
		klog.InfoS("marshalers", "pod", klog.KRef("ns", "p"), "obj", klog.KObj(object{"n", "ns"}), "cluster", klog.KRef("", "c"), "map", objectMarshaler{"m"}, "panic", panicMarshaler{}, "after", 1)
	}},
	{name: "slog.LogValuer", log: func() {
		klog.InfoS("valuers", "string", logValuer{slog.StringValue("s")}, "int", logValuer{slog.IntValue(-3)}, "duration", logValuer{slog.DurationValue(time.Second)},
			"group", logValuer{slog.GroupValue(slog.String("a", "b"), slog.Int("n", 1), slog.Group("inner", slog.Bool("ok", true)))},
			"empty group", logValuer{slog.GroupValue()}, "any", logValuer{slog.AnyValue([]int{1})}, "nested", logValuer{slog.AnyValue(logValuer{slog.Float64Value(0.5)})})
	}},

	// Errors as values.
	{name: "error values", log: func() {
		klog.InfoS("errors", "plain", errBoom, "wrapped", errWrapped, "joined", errJoined, "verbose", verboseError{}, "group", errorGroup{errBoom, nil, verboseError{}},
			"list", []error{errBoom, nil, errWrapped}, "nil", error(nil))
	}},
	{name: "error values that panic", log: func() {
		klog.InfoS("panics", "panic", panicError{}, "nilptr", (*pointerError)(nil), "after", 1)
	}},

	// Error lines.
	{name: "ErrorS", log: func() { klog.ErrorS(errBoom, "Registration failed", "pod", "x") }},
	{name: "ErrorS without error", log: func() { klog.ErrorS(nil, "Registration failed", "pod", "x") }},
	{name: "ErrorS wrapped", log: func() { klog.ErrorS(errWrapped, "Registration failed") }},
	{name: "ErrorS joined", log: func() { klog.ErrorS(errJoined, "Registration failed", "n", 2) }},
	{name: "ErrorS verbose", log: func() { klog.ErrorS(verboseError{}, "Registration failed", "n", 2) }},
	{name: "ErrorS group", log: func() { klog.ErrorS(errorGroup{errBoom, verboseError{}}, "Registration failed") }},
	{name: "ErrorS panicking error", log: func() { klog.ErrorS(panicError{}, "Registration failed", "n", 2) }},
	{name: "ErrorS nil pointer error", log: func() { klog.ErrorS((*pointerError)(nil), "Registration failed", "n", 2) }},
	{name: "ErrorS key named err", log: func() { klog.ErrorS(errBoom, "twice", "err", "mine") }},
	{name: "contextual Error", log: func() { klog.Background().Error(errBoom, "Lost", "address", "a") }},
	{name: "V(2).ErrorS", log: func() { klog.V(2).ErrorS(errBoom, "verbose error", "n", 2) }},
	{name: "contextual V(4).Error", log: func() { klog.Background().V(4).Error(errBoom, "verbose error", "n", 4) }},

	// klog's unstructured calls.
	{name: "Infof", log: func() { klog.Infof("formatted %d %q", 1, "x\u2028") }},
	{name: "Info and Infoln", log: func() { klog.Info("a", 1); klog.Infoln("b", 2) }},
	{name: "Warning", log: func() { klog.Warningf("careful %s", "now") }},
	{name: "Errorf", log: func() { klog.Errorf("formatted %s", "error") }},
	{name: "V(2).Infof", log: func() { klog.V(2).Infof("verbose %d", 2) }},

	// Verbosity, by klog's V and by logr's.
	{name: "V(1..4).InfoS", log: func() {
		klog.V(1).InfoS("V1", "n", 1)
		klog.V(2).InfoS("V2", "n", 2)
		klog.V(3).InfoS("V3", "n", 3)
		klog.V(4).InfoS("V4", "n", 4)
	}},
	{name: "contextual V(0..5).Info", log: func() {
		logger := klog.Background()
		logger.Info("V0")
		logger.V(1).Info("V1")
		logger.V(3).Info("V3")
		logger.V(1).V(2).Info("V1+2")
		logger.V(4).Info("V4")
		logger.V(5).Info("V5")
	}},

	// WithValues and WithName.
	{name: "WithValues Info", log: func() {
		klog.LoggerWithValues(klog.Background(), "driver", "d").V(2).Info("Connected", "address", "a")
	}},
	{name: "WithValues Error", log: func() {
		klog.LoggerWithValues(klog.Background(), "driver", "d").Error(errBoom, "Lost", "address", "a")
	}},
	{name: "WithValues nested", log: func() {
		logger := klog.Background().WithValues("a", 1)
		logger = logger.WithValues("b", []string{"x"}, "a", 2)
		logger.Info("nested", "c", 3)
		logger.WithValues("d", errBoom).Error(verboseError{}, "nested error", "e", 5)
	}},
	{name: "WithValues evaluated once", log: func() {
		counter := &counterStringer{n: 1}
		logger := klog.Background().WithValues("counter", counter)
		counter.n = 2
		logger.Info("counted", "now", counter)
	}},
	{name: "WithName", log: func() { klog.LoggerWithName(klog.Background(), "registrar").Info("Named", "n", 1) }},
	{name: "WithName nested", log: func() {
		logger := klog.Background().WithName("a").WithName("b\"c")
		logger.Info("named")
		logger.WithValues("k", "v").WithName("d").Error(errBoom, "named error")
	}},
	{name: "FromContext", log: func() {
		ctx := klog.NewContext(context.Background(), klog.Background().WithName("ctx").WithValues("id", 7))
		klog.FromContext(ctx).V(1).Info("from context", "n", 1)
		klog.FromContext(ctx).Error(nil, "from context")
	}},

	// Key/value lists that are not pairs.
	{name: "odd number", log: func() { klog.InfoS("odd", "a", 1, "b") }},
	{name: "non-string key", log: func() { klog.InfoS("bad key", "a", 1, 2, "b", "c", 3) }},
	{name: "odd number in Error", log: func() { klog.ErrorS(errBoom, "odd", "a") }},
	{name: "odd number below the verbosity", log: func() { klog.Background().V(3).Info("odd", "a") }},
	{name: "odd number in WithValues", log: func() {
		klog.Background().WithValues("a", 1, "b").Error(nil, "odd", "c", 3)
	}},
	{name: "non-string key in WithValues", log: func() {
		klog.Background().WithName("n").WithValues("a", 1).WithValues(errBoom, 2).Info("bad key", "c", 3)
	}},
	{name: "odd number with values and name", log: func() {
		klog.Background().WithName("n").WithValues("a", 1).Info("odd", "b")
	}},
}
