package logging

import (
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2/textlogger"
)

// newJSONLogger returns a logger that writes one JSON object per line, byte
// for byte as k8s.io/component-base's JSON format (zap through zapr) writes
// the same calls (test/logconformance compares them): ts, logger (the
// WithName names, if any), caller, msg, the WithValues pairs, then on info
// lines v and the call's pairs, on error lines the call's pairs and err.
// Info lines go to info and error lines to errs (the same writer when
// streams are not split). verbosity decides which V levels are written, per
// call site.
func newJSONLogger(verbosity *textlogger.Config, info, errs io.Writer) logr.Logger {
	return logr.New(&jsonSink{
		info: info,
		errs: errs,
		// jsonSink.Enabled is one more frame between the caller and
		// textlogger, which finds the caller by counting frames.
		gate: withCallDepth(textlogger.NewLogger(verbosity).GetSink(), 1),
	})
}

// jsonSink writes each call as one line. -v and --vmodule are decided per
// call site by a textlogger sink (klog exports its vmodule matching only
// there). klog.V() checks vmodule itself, but contextual calls
// (klog.FromContext(ctx).V(4).Info) reach the sink directly.
type jsonSink struct {
	info, errs io.Writer
	gate       logr.LogSink // textlogger: only Enabled is used
	name       string       // the WithName names, joined with dots
	// values holds the WithValues pairs, encoded when they were added, as
	// zap does: a value that changes later is logged as it was then.
	values    []byte
	callDepth int // frames between the caller and jsonSink's methods
}

var _ logr.CallDepthLogSink = &jsonSink{}

func (s *jsonSink) Init(info logr.RuntimeInfo) {
	s.callDepth += info.CallDepth
}

func (s *jsonSink) Enabled(level int) bool {
	return s.gate.Enabled(level)
}

func (s *jsonSink) Info(level int, msg string, keysAndValues ...any) {
	pc := s.caller()
	line := s.begin(pc, msg)
	line = appendKey(line, "v")
	line = strconv.AppendInt(line, int64(level), 10)
	line = s.appendPairs(line, pc, keysAndValues)
	s.end(s.info, line)
}

func (s *jsonSink) Error(err error, msg string, keysAndValues ...any) {
	pc := s.caller()
	line := s.appendPairs(s.begin(pc, msg), pc, keysAndValues)
	if err != nil {
		line = appendError(line, "err", err)
	}
	s.end(s.errs, line)
}

// caller returns the program counter of the call to logr's Info or Error.
func (s *jsonSink) caller() uintptr {
	var pc [1]uintptr
	// Skip runtime.Callers, caller, and Info or Error.
	runtime.Callers(3+s.callDepth, pc[:])
	return pc[0]
}

// appendPairs appends the call's key/value pairs to line. Like zapr, it
// stops at a key that is not a string or has no value, and reports it first
// on a line of its own to errs.
func (s *jsonSink) appendPairs(line []byte, pc uintptr, keysAndValues []any) []byte {
	line, problem, bad := appendPairs(line, keysAndValues)
	if problem != "" {
		s.report(pc, problem, bad)
	}
	return line
}

// The problems appendPairs reports, with zapr's messages and keys.
const (
	oddPairs     = "odd number of arguments passed as key-value pairs for logging"
	nonStringKey = "non-string key argument passed to logging, ignoring all later arguments"
)

// appendPairs appends the pairs up to the first key that is not a string or
// has no value. It returns zapr's message for that problem, or "", and the
// key.
func appendPairs(line []byte, pairs []any) (_ []byte, problem string, bad any) {
	for i := 0; i < len(pairs); i += 2 {
		if i == len(pairs)-1 {
			return line, oddPairs, pairs[i]
		}
		key, ok := pairs[i].(string)
		if !ok {
			return line, nonStringKey, pairs[i]
		}
		line = appendField(line, key, pairs[i+1])
	}
	return line, "", nil
}

// report writes a problem with the key/value pairs of a call as zapr does:
// a line of its own to errs, with the logger's name and values, and the
// offending key under "ignored key" or "invalid key".
func (s *jsonSink) report(pc uintptr, problem string, bad any) {
	key := "invalid key"
	if problem == oddPairs {
		key = "ignored key"
	}
	s.end(s.errs, appendField(s.begin(pc, problem), key, bad))
}

// begin starts a line: ts, logger, caller, msg and the WithValues pairs.
func (s *jsonSink) begin(pc uintptr, msg string) []byte {
	line := (*linePool.Get().(*[]byte))[:0]
	line = append(line, '{')
	line = appendKey(line, "ts")
	line = appendFloat(line, epochMillis(time.Now()), 64)
	if s.name != "" {
		line = appendKey(line, "logger")
		line = appendString(line, s.name)
	}
	if pc != 0 {
		frame, _ := runtime.CallersFrames([]uintptr{pc}).Next()
		line = appendKey(line, "caller")
		line = appendString(line, shortCaller(frame.File, frame.Line))
	}
	line = appendKey(line, "msg")
	line = appendString(line, msg)
	if len(s.values) > 0 {
		line = append(line, ',')
		line = append(line, s.values...)
	}
	return line
}

// end closes the line and writes it with one Write.
func (s *jsonSink) end(out io.Writer, line []byte) {
	line = append(line, '}', '\n')
	// Nothing better can be done with an error writing the log.
	_, _ = out.Write(line)
	if cap(line) <= maxPooledLine {
		linePool.Put(&line)
	}
}

// linePool keeps the buffers of lines written, up to maxPooledLine bytes.
var linePool = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledLine = 64 << 10

// shortCaller returns the source file's directory and name and the line, as
// in "registration/server.go:42", as zap's short caller encoder does.
func shortCaller(file string, line int) string {
	if slash := strings.LastIndexByte(file, '/'); slash >= 0 {
		if dirSlash := strings.LastIndexByte(file[:slash], '/'); dirSlash >= 0 {
			file = file[dirSlash+1:]
		}
	}
	return file + ":" + strconv.Itoa(line)
}

// epochMillis is how Kubernetes' JSON format writes times: a float number of
// milliseconds since the Unix epoch.
func epochMillis(t time.Time) float64 {
	return float64(t.UnixNano()) / float64(time.Millisecond)
}

// WithValues encodes the pairs at once, as zap does. A bad key is reported
// now, from the caller of WithValues, with the values the logger had so far;
// the pairs before it are kept.
func (s *jsonSink) WithValues(keysAndValues ...any) logr.LogSink {
	values := append([]byte(nil), s.values...)
	values, problem, bad := appendPairs(values, keysAndValues)
	if problem != "" {
		var pc [1]uintptr
		// Skip runtime.Callers and WithValues.
		runtime.Callers(2+s.callDepth, pc[:])
		s.report(pc[0], problem, bad)
	}
	clone := *s
	clone.values = values
	return &clone
}

// WithName joins names with dots, as zap does.
func (s *jsonSink) WithName(name string) logr.LogSink {
	clone := *s
	if s.name != "" {
		name = s.name + "." + name
	}
	clone.name = name
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
