package logging

import (
	"io"
	"path"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// jsonSink writes each call as one JSON line, byte for byte as
// component-base's JSON format (zap through zapr) writes it: info lines to
// info (klog's warnings too: JSON has no severities), error lines to errs.
type jsonSink struct {
	info, errs io.Writer
	name       string // the WithName names, joined with dots
	// values holds the WithValues pairs, encoded when they were added, as
	// zap does: a value that changes later is logged as it was then.
	values    []byte
	callDepth int // frames between the caller and jsonSink's methods
}

func (s *jsonSink) Init(info logr.RuntimeInfo) {
	s.callDepth += info.CallDepth
}

// Enabled applies -v and --vmodule, which klog holds, to contextual calls
// (klog.FromContext(ctx).V(4).Info), which do not go through klog.V.
func (s *jsonSink) Enabled(level int) bool {
	return klog.VDepth(1+s.callDepth, klog.Level(level)).Enabled()
}

func (s *jsonSink) Info(level int, msg string, keysAndValues ...any) {
	caller := s.caller()
	line := s.begin(caller, msg)
	line = strconv.AppendInt(appendKey(line, "v"), int64(level), 10)
	s.end(s.info, s.appendPairs(line, caller, keysAndValues))
}

func (s *jsonSink) Error(err error, msg string, keysAndValues ...any) {
	caller := s.caller()
	line := s.appendPairs(s.begin(caller, msg), caller, keysAndValues)
	if err != nil {
		line = appendAny(line, "err", err)
	}
	s.end(s.errs, line)
}

// caller returns where Info, Error or WithValues was called from as zap's
// short caller encoder writes it, as in "registration/server.go:42".
func (s *jsonSink) caller() string {
	// Skip caller and the jsonSink method; callDepth counts logr's frame.
	_, file, line, ok := runtime.Caller(2 + s.callDepth)
	if !ok {
		return ""
	}
	dir, name := path.Split(file)
	return path.Join(path.Base(dir), name) + ":" + strconv.Itoa(line)
}

// appendPairs appends the pairs up to the first key that is not a string or
// has no value, which it reports first on a line of its own, as zapr does.
func (s *jsonSink) appendPairs(line []byte, caller string, pairs []any) []byte {
	for i := 0; i < len(pairs); i += 2 {
		key, isString := pairs[i].(string)
		switch {
		case i == len(pairs)-1:
			s.report(caller, "odd number of arguments passed as key-value pairs for logging", "ignored key", pairs[i])
			return line
		case !isString:
			s.report(caller, "non-string key argument passed to logging, ignoring all later arguments", "invalid key", pairs[i])
			return line
		}
		line = appendField(line, key, pairs[i+1])
	}
	return line
}

// report writes a problem with a call's pairs.
func (s *jsonSink) report(caller, problem, label string, key any) {
	s.end(s.errs, appendField(s.begin(caller, problem), label, key))
}

// begin starts a line: ts, logger, caller, msg and the WithValues pairs.
func (s *jsonSink) begin(caller, msg string) []byte {
	line := append(make([]byte, 0, 256), '{')
	line = appendTime(appendKey(line, "ts"), time.Now())
	if s.name != "" {
		line = appendString(appendKey(line, "logger"), s.name)
	}
	if caller != "" {
		line = appendString(appendKey(line, "caller"), caller)
	}
	line = appendString(appendKey(line, "msg"), msg)
	if len(s.values) > 0 {
		line = append(append(line, ','), s.values...)
	}
	return line
}

// end closes the line and writes it with one Write. Nothing better can be
// done with an error writing the log.
func (s *jsonSink) end(out io.Writer, line []byte) {
	_, _ = out.Write(append(line, '}', '\n'))
}

// WithValues encodes the pairs at once, as zap does: a bad key is reported
// now, with the values the logger had so far.
func (s *jsonSink) WithValues(keysAndValues ...any) logr.LogSink {
	clone := *s
	clone.values = s.appendPairs(slices.Clone(s.values), s.caller(), keysAndValues)
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
	return &clone
}
