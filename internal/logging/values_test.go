package logging

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// verboseError prints more with %+v, as errors with stack traces do.
type verboseError struct{}

func (verboseError) Error() string { return "short" }

func (verboseError) Format(s fmt.State, _ rune) {
	if s.Flag('+') {
		fmt.Fprint(s, "short\nat main.go:1")
		return
	}
	fmt.Fprint(s, "short")
}

// errorGroup has the Errors method of go.uber.org/multierr's errors.
type errorGroup []error

func (errorGroup) Error() string     { return "several" }
func (g errorGroup) Errors() []error { return g }

type pointerStringer struct{ name string }

func (p *pointerStringer) String() string { return p.name }

// The values are encoded as zap encodes them in component-base's JSON format
// (test/logconformance compares the two on many more).
func TestJSONValues(t *testing.T) {
	duration := 1500 * time.Millisecond
	at := time.UnixMilli(1700000000123)
	tests := []struct {
		name  string
		pairs []any
		want  string // the pairs as written after "v":0
	}{
		{name: "duration", pairs: []any{"d", duration, "p", &duration, "list", []time.Duration{time.Second}}, want: `"d":"1.5s","p":"1.5s","list":["1s"]`},
		{name: "time", pairs: []any{"t", at, "list", []time.Time{at}}, want: `"t":1700000000123,"list":[1700000000123]`},
		{name: "special floats", pairs: []any{"nan", math.NaN(), "inf", math.Inf(1), "-inf", math.Inf(-1), "list", []float64{math.NaN()}}, want: `"nan":"NaN","inf":"+Inf","-inf":"-Inf","list":["NaN"]`},
		{name: "floats without exponent", pairs: []any{"f32", float32(0.1), "tiny", 1e-7, "huge", 1e21}, want: `"f32":0.1,"tiny":0.0000001,"huge":1000000000000000000000`},
		{name: "complex", pairs: []any{"c", complex(1, -2)}, want: `"c":"1-2i"`},
		{name: "integers", pairs: []any{"i", 1, "u8", uint8(2), "u64", uint64(math.MaxUint64)}, want: `"i":1,"u8":2,"u64":18446744073709551615`},
		{name: "bytes", pairs: []any{"b", []byte("hi")}, want: `"b":"aGk="`},
		{name: "nil slices", pairs: []any{"s", []string(nil), "m", map[string]int(nil)}, want: `"s":[],"m":null`},
		{name: "error", pairs: []any{"e", errors.New("boom")}, want: `"e":"boom"`},
		{name: "verbose error", pairs: []any{"e", verboseError{}}, want: `"e":"short","eVerbose":"short\nat main.go:1"`},
		{name: "error group", pairs: []any{"e", errorGroup{errors.New("a"), nil, verboseError{}}}, want: `"e":"several","eCauses":[{"error":"a"},{"error":"short","errorVerbose":"short\nat main.go:1"}]`},
		{name: "error list", pairs: []any{"e", []error{errors.New("a"), nil}}, want: `"e":[{"error":"a"}]`},
		{name: "line separators", pairs: []any{"s", "a\u2028b\u2029", "nested", []any{"a\u2028"}}, want: "\"s\":\"a\u2028b\u2029\",\"nested\":[\"a\\u2028\"]"},
		{name: "invalid UTF-8 and HTML", pairs: []any{"s", "\xff<&>"}, want: `"s":"\ufffd<&>"`},
		{name: "stringer", pairs: []any{"s", &pointerStringer{"x"}, "nil", (*pointerStringer)(nil)}, want: `"s":"x","nil":"<nil>"`},
		{name: "logr.Marshaler", pairs: []any{"pod", klog.KRef("ns", "p")}, want: `"pod":{"name":"p","namespace":"ns"}`},
		{name: "nested", pairs: []any{"n", map[string]any{"b": []any{"<&>", nil}, "a": struct{ D time.Duration }{time.Second}}}, want: `"n":{"a":{"D":1000000000},"b":["<&>",null]}`},
		{name: "not encodable", pairs: []any{"c", make(chan int)}, want: `"cError":"json: unsupported type: chan int"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr := apply(t, "--logging-format=json")
			klog.InfoS("values", tc.pairs...)
			line := stderr.String()
			if !strings.HasSuffix(line, `"v":0,`+tc.want+"}\n") {
				t.Errorf("got %s want it to end with %s}", line, tc.want)
			}
		})
	}
}

// A bad key ends the pairs and is reported on a line of its own, written
// first: by the call to WithValues for its pairs.
func TestJSONBadKeys(t *testing.T) {
	tests := []struct {
		name      string
		log       func()
		wantLines []string // after ts and caller
	}{{
		name: "key not a string",
		log:  func() { klog.InfoS("bad", "a", 1, 2, "b") },
		wantLines: []string{
			`"msg":"non-string key argument passed to logging, ignoring all later arguments","invalid key":2}`,
			`"msg":"bad","v":0,"a":1}`,
		},
	}, {
		name: "WithValues reports its own pairs at once",
		log: func() {
			klog.Background().WithValues("a", 1, "b").Error(nil, "odd", "c", 3)
		},
		wantLines: []string{
			`"msg":"odd number of arguments passed as key-value pairs for logging","ignored key":"b"}`,
			`"msg":"odd","a":1,"c":3}`,
		},
	}, {
		name: "the report has the logger's name and values",
		log: func() {
			klog.Background().WithName("n").WithValues("a", 1).Info("bad", 2, 3)
		},
		wantLines: []string{
			`"msg":"non-string key argument passed to logging, ignoring all later arguments","a":1,"invalid key":2}`,
			`"msg":"bad","a":1,"v":0}`,
		},
	}, {
		name: "missing value",
		log:  func() { klog.InfoS("odd", "a", 1, "b") },
		wantLines: []string{
			`"msg":"odd number of arguments passed as key-value pairs for logging","ignored key":"b"}`,
			`"msg":"odd","v":0,"a":1}`,
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr := apply(t, "--logging-format=json")
			tc.log()
			lines := stderr.lines()
			if len(lines) != len(tc.wantLines) {
				t.Fatalf("got %q, want %d lines", lines, len(tc.wantLines))
			}
			for i, line := range lines {
				if _, after, _ := strings.Cut(line, `.go:`); !strings.HasSuffix(after, ","+tc.wantLines[i]) {
					t.Errorf("line %d is %s, want it to end with %s", i, line, tc.wantLines[i])
				}
			}
		})
	}
}
