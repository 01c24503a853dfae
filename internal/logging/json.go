package logging

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2/textlogger"
)

// newJSONLogger returns a logger that writes one JSON object per line, with
// the keys Kubernetes' JSON format has: ts, caller, msg, v (info) or err
// (error), then the key/value pairs. Info lines go to info and error lines to
// errs (the same writer when streams are not split). verbosity decides which
// V levels are written, per call site.
func newJSONLogger(verbosity *textlogger.Config, info, errs io.Writer) logr.Logger {
	return logr.New(&jsonSink{
		infoOut: info,
		errsOut: errs,
		info:    newJSONHandler(info, ""),
		errs:    newJSONHandler(errs, ""),
		// jsonSink.Enabled is one more frame between the caller and
		// textlogger, which finds the caller by counting frames.
		gate: withCallDepth(textlogger.NewLogger(verbosity).GetSink(), 1),
	})
}

// newJSONHandler returns slog's JSON handler with its built-in keys turned
// into Kubernetes' ones: time into ts, source into caller, and level, which
// Kubernetes does not write, into the logger name, which has to come between
// them.
func newJSONHandler(out io.Writer, name string) slog.Handler {
	return slog.NewJSONHandler(out, &slog.HandlerOptions{
		AddSource: true,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			// The values of key/value pairs never have the types of the
			// built-in attributes: appendValue converts times and levels.
			if len(groups) > 0 {
				return a
			}
			switch a.Value.Kind() {
			case slog.KindTime:
				if a.Key == slog.TimeKey {
					return slog.Float64("ts", epochMillis(a.Value.Time()))
				}
			case slog.KindAny:
				switch value := a.Value.Any().(type) {
				case slog.Level:
					if a.Key == slog.LevelKey && name == "" {
						return slog.Attr{}
					}
					if a.Key == slog.LevelKey {
						return slog.String("logger", name)
					}
				case *slog.Source:
					if a.Key == slog.SourceKey && value.File == "" {
						return slog.Attr{}
					}
					if a.Key == slog.SourceKey {
						return slog.String("caller", shortCaller(value))
					}
				}
			}
			return a
		},
	})
}

// epochMillis is how Kubernetes' JSON format writes times: a float number of
// milliseconds since the Unix epoch.
func epochMillis(t time.Time) float64 {
	return float64(t.UnixNano()) / float64(time.Millisecond)
}

// shortCaller returns the source file's directory and name and the line, as
// in "registration/server.go:42".
func shortCaller(source *slog.Source) string {
	file := source.File
	if slash := strings.LastIndexByte(file, '/'); slash >= 0 {
		if dirSlash := strings.LastIndexByte(file[:slash], '/'); dirSlash >= 0 {
			file = file[dirSlash+1:]
		}
	}
	return file + ":" + strconv.Itoa(source.Line)
}

// jsonSink writes each call as one slog record, in the key order Kubernetes
// uses: v or err come before the values of WithValues, which come before
// those of the call. -v and --vmodule are decided per call site by a
// textlogger sink (klog exports its vmodule matching only there). klog.V()
// checks vmodule itself, but contextual calls
// (klog.FromContext(ctx).V(4).Info) reach the sink directly.
type jsonSink struct {
	infoOut, errsOut io.Writer // kept to make handlers for WithName
	info, errs       slog.Handler
	gate             logr.LogSink // textlogger: only Enabled is used
	name             string
	values           []any
	callDepth        int // frames between the caller and jsonSink's methods
}

var _ logr.CallDepthLogSink = &jsonSink{}

func (s *jsonSink) Init(info logr.RuntimeInfo) {
	s.callDepth += info.CallDepth
}

func (s *jsonSink) Enabled(level int) bool {
	return s.gate.Enabled(level)
}

func (s *jsonSink) Info(level int, msg string, keysAndValues ...any) {
	s.write(s.info, msg, []any{"v", level}, keysAndValues)
}

func (s *jsonSink) Error(err error, msg string, keysAndValues ...any) {
	var errKV []any
	if err != nil {
		errKV = []any{"err", err}
	}
	s.write(s.errs, msg, errKV, keysAndValues)
}

// write logs first, then the WithValues pairs, then the call's pairs. Like
// zapr before it, it stops at a key that is not a string or has no value and
// says so on a separate line to errs, written first.
func (s *jsonSink) write(handler slog.Handler, msg string, first, keysAndValues []any) {
	var pc [1]uintptr
	// Skip runtime.Callers, write, and Info or Error.
	runtime.Callers(3+s.callDepth, pc[:])
	now := time.Now()

	record := slog.NewRecord(now, slog.LevelInfo, msg, pc[0])
	attrs, problem := appendPairs(s.withValues(first, keysAndValues), now, pc[0])
	if problem != nil {
		_ = s.errs.Handle(context.Background(), *problem)
	}
	record.AddAttrs(attrs...)
	// Nothing better can be done with an error writing the log.
	_ = handler.Handle(context.Background(), record)
}

// withValues returns first, then the WithValues pairs, then the call's pairs.
func (s *jsonSink) withValues(first, keysAndValues []any) []any {
	if len(first) == 0 && len(s.values) == 0 {
		return keysAndValues
	}
	all := make([]any, 0, len(first)+len(s.values)+len(keysAndValues))
	all = append(all, first...)
	all = append(all, s.values...)
	return append(all, keysAndValues...)
}

// appendPairs converts key/value pairs into attributes. If one key is not a
// string or has no value, it returns the pairs before it and a record that
// reports the problem.
func appendPairs(pairs []any, now time.Time, pc uintptr) ([]slog.Attr, *slog.Record) {
	attrs := make([]slog.Attr, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		if i == len(pairs)-1 {
			return attrs, problemRecord(now, pc, "odd number of arguments passed as key-value pairs for logging", "ignored key", pairs[i])
		}
		key, ok := pairs[i].(string)
		if !ok {
			return attrs, problemRecord(now, pc, "non-string key argument passed to logging, ignoring all later arguments", "invalid key", pairs[i])
		}
		attrs = appendValue(attrs, key, pairs[i+1])
	}
	return attrs, nil
}

func problemRecord(now time.Time, pc uintptr, msg, key string, value any) *slog.Record {
	record := slog.NewRecord(now, slog.LevelError, msg, pc)
	record.AddAttrs(appendValue(nil, key, value)...)
	return &record
}

// appendValue appends one key/value pair with the value encoded as zap
// encoded it: durations as strings ("1.5s"), times and floats as Kubernetes
// writes them, special floats as strings ("NaN", "+Inf"), errors as their
// message plus keyVerbose (%+v, when it says more) or keyCauses (for errors
// with an Errors method), and other values as encoding/json does, or
// keyError with the reason they could not be.
func appendValue(attrs []slog.Attr, key string, value any) []slog.Attr {
	switch v := value.(type) {
	case logr.Marshaler:
		key, value = marshalLog(key, v)
	case slog.LogValuer:
		value = slog.AnyValue(v).Resolve()
	}
	if v, ok := value.(slog.Value); ok {
		if v.Kind() == slog.KindGroup {
			return append(attrs, slog.Attr{Key: key, Value: v})
		}
		value = v.Any()
	}
	switch v := value.(type) {
	case nil:
		return append(attrs, slog.Any(key, nil))
	case string:
		return append(attrs, slog.String(key, v))
	case bool:
		return append(attrs, slog.Bool(key, v))
	case int:
		return append(attrs, slog.Int(key, v))
	case int64:
		return append(attrs, slog.Int64(key, v))
	case int8, int16, int32, uint, uint8, uint16, uint32, uint64, uintptr:
		return append(attrs, slog.Any(key, v))
	case float64, float32, complex128, complex64, time.Time, time.Duration:
		return append(attrs, slog.Any(key, scalar(v)))
	case *float64, *float32, *complex128, *complex64, *time.Time, *time.Duration:
		if pointer := reflect.ValueOf(v); !pointer.IsNil() {
			return append(attrs, slog.Any(key, scalar(pointer.Elem().Interface())))
		}
		return append(attrs, slog.Any(key, nil))
	case []float64, []float32, []complex128, []complex64, []time.Time, []time.Duration:
		slice := reflect.ValueOf(v)
		elements := make([]any, slice.Len())
		for i := range elements {
			elements[i] = scalar(slice.Index(i).Interface())
		}
		return append(attrs, slog.Any(key, elements))
	case []byte:
		return append(attrs, slog.String(key, base64.StdEncoding.EncodeToString(v)))
	case error:
		return appendError(attrs, key, v)
	case []error:
		return append(attrs, slog.Any(key, errorObjects(v)))
	case fmt.Stringer:
		return appendStringer(attrs, key, v)
	}
	// Like zap's typed slices, nil slices of predeclared types are empty.
	if t := reflect.TypeOf(value); t.Kind() == reflect.Slice && t.Name() == "" &&
		t.Elem().Name() != "" && t.Elem().PkgPath() == "" && reflect.ValueOf(value).IsNil() {
		return append(attrs, slog.Any(key, []any{}))
	}
	encoded, err := marshalJSON(value)
	if err != nil {
		return append(attrs, slog.String(key+"Error", err.Error()))
	}
	return append(attrs, slog.Any(key, encoded))
}

// scalar returns floats, complex numbers, times and durations in a form that
// slog's JSON encoding writes as zap did.
func scalar(value any) any {
	switch v := value.(type) {
	case float64:
		return float(v, 64)
	case float32:
		return float(float64(v), 32)
	case complex128:
		return complexString(v, 64)
	case complex64:
		return complexString(complex128(v), 32)
	case time.Time:
		return float(epochMillis(v), 64)
	case time.Duration:
		return v.String()
	}
	return value
}

// float is written without an exponent (which encoding/json uses for very
// small and large numbers), with the precision of its type.
func float(f float64, bits int) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return rawJSON(strconv.AppendFloat(nil, f, 'f', -1, bits))
}

func complexString(c complex128, bits int) string {
	text := strconv.FormatFloat(real(c), 'f', -1, bits)
	if imag(c) >= 0 {
		text += "+"
	}
	return text + strconv.FormatFloat(imag(c), 'f', -1, bits) + "i"
}

// rawJSON is already encoded JSON, which slog copies.
type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

// marshalJSON encodes as slog and zap do, without escaping HTML characters.
func marshalJSON(value any) (rawJSON, error) {
	var out bytes.Buffer
	encoder := json.NewEncoder(&out)
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(value); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

func marshalLog(key string, marshaler logr.Marshaler) (replacedKey string, replacement any) {
	defer func() {
		if r := recover(); r != nil {
			replacedKey, replacement = key+"Error", fmt.Sprintf("PANIC=%s", r)
		}
	}()
	return key, marshaler.MarshalLog()
}

func appendError(attrs []slog.Attr, key string, err error) (withError []slog.Attr) {
	withError = attrs
	defer recoverValue(&withError, key, err)
	message := err.Error()
	withError = append(withError, slog.String(key, message))
	switch e := err.(type) {
	case interface{ Errors() []error }:
		withError = append(withError, slog.Any(key+"Causes", errorObjects(e.Errors())))
	case fmt.Formatter:
		if verbose := fmt.Sprintf("%+v", e); verbose != message {
			withError = append(withError, slog.String(key+"Verbose", verbose))
		}
	}
	return withError
}

// errorObjects writes a list of errors as zap did: an object for each error
// that is not nil, with the keys appendError writes under "error".
func errorObjects(errs []error) []any {
	objects := make([]any, 0, len(errs))
	for _, err := range errs {
		if err == nil {
			continue
		}
		// encoding/json sorts the keys, which keeps "error" first.
		object := map[string]any{}
		for _, attr := range appendError(nil, "error", err) {
			object[attr.Key] = attr.Value.Any()
		}
		objects = append(objects, object)
	}
	return objects
}

func appendStringer(attrs []slog.Attr, key string, stringer fmt.Stringer) (withString []slog.Attr) {
	withString = attrs
	defer recoverValue(&withString, key, stringer)
	return append(withString, slog.String(key, stringer.String()))
}

// recoverValue writes "<nil>" for a nil pointer whose Error or String method
// panicked, and keyError with the panic for any other value.
func recoverValue(attrs *[]slog.Attr, key string, value any) {
	r := recover()
	if r == nil {
		return
	}
	if v := reflect.ValueOf(value); v.Kind() == reflect.Pointer && v.IsNil() {
		*attrs = append(*attrs, slog.String(key, "<nil>"))
		return
	}
	*attrs = append(*attrs, slog.String(key+"Error", fmt.Sprintf("PANIC=%v", r)))
}

func (s *jsonSink) WithValues(keysAndValues ...any) logr.LogSink {
	clone := *s
	clone.values = append(s.values[:len(s.values):len(s.values)], keysAndValues...)
	return &clone
}

// WithName joins names with dots, as zap did.
func (s *jsonSink) WithName(name string) logr.LogSink {
	clone := *s
	if s.name != "" {
		name = s.name + "." + name
	}
	clone.name = name
	clone.info = newJSONHandler(s.infoOut, name)
	clone.errs = newJSONHandler(s.errsOut, name)
	return &clone
}

func (s *jsonSink) WithCallDepth(depth int) logr.LogSink {
	clone := *s
	clone.callDepth += depth
	clone.gate = withCallDepth(s.gate, depth)
	return &clone
}

// withCallDepth is for textlogger's sink, which supports call depths.
func withCallDepth(sink logr.LogSink, depth int) logr.LogSink {
	return sink.(logr.CallDepthLogSink).WithCallDepth(depth)
}
