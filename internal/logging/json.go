package logging

import (
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2/textlogger"
)

// newJSONLogger returns a logger that writes one JSON object per line, with
// the keys Kubernetes' JSON format has: ts, caller, msg, v (info) or err
// (error), then the key/value pairs. Info lines go to info and error lines to
// errs (the same writer when streams are not split). verbosity decides which
// V levels are written, per call site.
func newJSONLogger(verbosity *textlogger.Config, info, errs zapcore.WriteSyncer) logr.Logger {
	encoder := zapcore.NewJSONEncoder(zapcore.EncoderConfig{
		TimeKey:        "ts",
		EncodeTime:     epochMillis,
		NameKey:        "logger",
		CallerKey:      "caller",
		EncodeCaller:   zapcore.ShortCallerEncoder,
		MessageKey:     "msg",
		EncodeDuration: zapcore.StringDurationEncoder,
		LineEnding:     zapcore.DefaultLineEnding,
	})
	// Verbosity is decided by jsonSink.Enabled, so zap lets every level through.
	var core zapcore.Core
	if info == errs {
		core = zapcore.NewCore(encoder, errs, zap.LevelEnablerFunc(func(zapcore.Level) bool { return true }))
	} else {
		core = zapcore.NewTee(
			zapcore.NewCore(encoder, info, zap.LevelEnablerFunc(func(l zapcore.Level) bool { return l < zapcore.ErrorLevel })),
			zapcore.NewCore(encoder, errs, zap.LevelEnablerFunc(func(l zapcore.Level) bool { return l >= zapcore.ErrorLevel })),
		)
	}
	zapLogger := zap.New(core, zap.AddCaller(), zap.ErrorOutput(errs))
	encoded := zapr.NewLoggerWithOptions(zapLogger, zapr.LogInfoLevel("v"), zapr.ErrorKey("err"))
	// jsonSink's own methods are one more frame between the caller and the
	// sinks below, which find the caller by counting frames.
	return logr.New(&jsonSink{
		encoder: withCallDepth(encoded.GetSink(), 1),
		gate:    withCallDepth(textlogger.NewLogger(verbosity).GetSink(), 1),
	})
}

// epochMillis writes the time as Kubernetes' JSON format does: a float number
// of milliseconds since the Unix epoch.
func epochMillis(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
	enc.AppendFloat64(float64(t.UnixNano()) / float64(time.Millisecond))
}

// jsonSink puts two things right that zapr alone would get wrong:
//   - -v and --vmodule: zap only knows levels, not source files, so the
//     decision for each call site is left to a textlogger sink (klog exports
//     its vmodule matching only there). klog.V() checks vmodule itself, but
//     contextual calls (klog.FromContext(ctx).V(4).Info) reach the sink
//     directly.
//   - key order: zap writes the values of WithValues before those of the
//     call, so they would come before v and err. jsonSink keeps them and
//     passes them along with each call instead.
type jsonSink struct {
	encoder logr.LogSink // zapr: formats and writes
	gate    logr.LogSink // textlogger: only Enabled is used
	values  []any
}

var _ logr.CallDepthLogSink = &jsonSink{}

// Init does nothing: the call depth logr reports was given to both sinks
// when they were created.
func (s *jsonSink) Init(logr.RuntimeInfo) {}

func (s *jsonSink) Enabled(level int) bool {
	return s.gate.Enabled(level)
}

func (s *jsonSink) Info(level int, msg string, keysAndValues ...any) {
	s.encoder.Info(level, msg, s.withValues(nil, keysAndValues)...)
}

func (s *jsonSink) Error(err error, msg string, keysAndValues ...any) {
	var errKV []any
	if err != nil {
		errKV = []any{"err", err}
	}
	s.encoder.Error(nil, msg, s.withValues(errKV, keysAndValues)...)
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

func (s *jsonSink) WithValues(keysAndValues ...any) logr.LogSink {
	clone := *s
	clone.values = append(s.values[:len(s.values):len(s.values)], keysAndValues...)
	return &clone
}

func (s *jsonSink) WithName(name string) logr.LogSink {
	clone := *s
	clone.encoder = s.encoder.WithName(name)
	return &clone
}

func (s *jsonSink) WithCallDepth(depth int) logr.LogSink {
	clone := *s
	clone.encoder = withCallDepth(s.encoder, depth)
	clone.gate = withCallDepth(s.gate, depth)
	return &clone
}

// withCallDepth is for the sinks of zapr and textlogger, which both support
// call depths.
func withCallDepth(sink logr.LogSink, depth int) logr.LogSink {
	return sink.(logr.CallDepthLogSink).WithCallDepth(depth)
}
