// Package logging turns the logging flags that Kubernetes components share
// (-v, --vmodule, --logging-format, --log-flush-frequency and the split-stream
// options) into a configured klog, without k8s.io/component-base.
//
// Formats:
//   - text (default): klog's line format, written by klog's textlogger.
//   - json: one object per line, byte for byte what k8s.io/component-base's
//     JSON format writes for the same calls (test/logconformance runs both):
//     ts, logger (names from WithName, joined with dots), caller, msg, the
//     WithValues pairs, then on info lines v and the call's pairs, on error
//     lines the call's pairs and err. ts is a float number of milliseconds
//     since the Unix epoch. Values are encoded as zap encodes them there;
//     the one exception is a time.Time value, written as its own time where
//     component-base writes the time of the call (see jsonvalue.go).
//
// Everything goes to stderr unless the split-stream flag of the selected
// format is set: then info lines go to stdout, optionally through a buffer
// emptied by klog.Flush and at most --log-flush-frequency after a line went
// into it, and the rest to stderr. In
// text that is warning, error and fatal lines; in JSON, which has no
// severities, error lines only (klog passes warnings to a logger as info).
// Programs must call klog.Flush before they exit.
//
// klog's own flags (--logtostderr, --log_file, ...) were accepted by upstream
// v2.10 and older and rejected from v2.11 on. They are accepted again, each
// with one deprecation warning. With the text format and no split stream they
// are handed to klog, which then writes its own output as it did in v2.10:
// to files, or to the process's standard error (os.Stderr, not the writer
// given to Apply), with their headers and backtraces. With the JSON format or
// a split stream klog does not write output itself, so they are ignored and
// the warning says so.
package logging

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

const (
	formatText            = "text"
	formatJSON            = "json"
	defaultFlushFrequency = 5 * time.Second
)

// Options holds the logging flags.
type Options struct {
	verbosity      int
	vmodule        string
	format         string
	flushFrequency time.Duration
	text           streamOptions
	json           streamOptions
	legacy         []*legacyFlag
}

// streamOptions are the output options each format has under its own flags.
type streamOptions struct {
	splitStream    bool
	infoBufferSize byteSize
}

// NewOptions returns the options with Kubernetes' defaults: text format,
// verbosity 0, flushes every 5s, everything to stderr.
func NewOptions() *Options {
	return &Options{
		format:         formatText,
		flushFrequency: defaultFlushFrequency,
		legacy:         newLegacyFlags(),
	}
}

// AddFlags registers the flags on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.verbosity, "v", o.verbosity, "number for the log level verbosity")
	fs.StringVar(&o.vmodule, "vmodule", o.vmodule, "comma-separated list of pattern=N settings for file-filtered logging; a pattern is a source file name without .go, * and ? match any characters")
	fs.StringVar(&o.format, "logging-format", o.format, `log format: "text" or "json"`)
	fs.DurationVar(&o.flushFrequency, "log-flush-frequency", o.flushFrequency, "maximum time between log flushes")
	o.text.addFlags(fs, formatText, "warnings and errors")
	o.json.addFlags(fs, formatJSON, "errors")
	o.addLegacyFlags(fs)
}

func (s *streamOptions) addFlags(fs *flag.FlagSet, format, toStderr string) {
	fs.BoolVar(&s.splitStream, "log-"+format+"-split-stream", s.splitStream,
		"in "+format+" format, write info messages to stdout and "+toStderr+" to stderr; without it everything goes to stderr")
	fs.Var(&s.infoBufferSize, "log-"+format+"-info-buffer-size",
		"in "+format+" format with split streams, buffer up to this `size` of info messages between flushes, in bytes (65536) or as a quantity (64Ki, 1Mi, 500k), at most 2Gi; 0 writes them at once")
}

// Apply validates the flag values and configures klog's global logger,
// starts klog's periodic flush where klog writes files itself, and logs
// one deprecation warning for each of klog's own flags that was set on fs. The error says what to change.
// Apply changes process-wide state: call it once, before logging.
func (o *Options) Apply(fs *flag.FlagSet, stdout, stderr io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	legacy := o.setLegacyFlags(fs)
	honourLegacy := o.format == formatText && !o.text.splitStream && len(legacy) > 0

	before := klog.CaptureState()
	// klog reads the flush callback without a lock: keep the daemon stopped
	// while the logger is replaced.
	klog.StopFlushDaemon()
	if err := o.configureKlog(legacy, honourLegacy, stdout, stderr); err != nil {
		// Only klog can check the values of its own flags, by taking them:
		// undo what was taken before one failed.
		before.Restore()
		return err
	}
	if honourLegacy {
		// klog writes its files itself, through buffers only its daemon
		// flushes. Otherwise nothing needs it: stderr is written at once,
		// and a buffer of info lines flushes itself (bufferedWriter), so
		// an idle registrar is not woken every few seconds.
		klog.StartFlushDaemon(o.flushFrequency)
	}

	effect := "klog still honours it for now because the text format is used without a split stream"
	switch {
	case o.format == formatJSON:
		effect = "it has no effect with --logging-format=json"
	case o.text.splitStream:
		effect = "it has no effect with --log-text-split-stream"
	}
	for _, f := range legacy {
		klog.Warningf("flag --%s is deprecated and will be removed; %s", f.name, effect)
	}
	if selected := o.selected(); selected.infoBufferSize.bytes > 0 && !selected.splitStream {
		klog.Warningf("--log-%s-info-buffer-size has no effect without --log-%[1]s-split-stream: all messages go unbuffered to stderr", o.format)
	}
	return nil
}

// configureKlog sets klog's verbosity and either hands it the legacy flags,
// so that it writes its output itself, or gives it a logger.
func (o *Options) configureKlog(legacy []*legacyFlag, honourLegacy bool, stdout, stderr io.Writer) error {
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	if honourLegacy {
		for _, f := range legacy {
			if err := klogFlags.Set(f.name, f.value); err != nil {
				return fmt.Errorf("--%s=%q is not valid: %w", f.name, f.value, err)
			}
		}
		klog.ClearLogger()
	} else {
		o.setLogger(stdout, stderr)
	}
	// klog.V checks -v and --vmodule itself before a call reaches the logger.
	for _, setting := range [][2]string{{"v", fmt.Sprint(o.verbosity)}, {"vmodule", o.vmodule}} {
		if err := klogFlags.Set(setting[0], setting[1]); err != nil {
			return fmt.Errorf("internal error: klog rejected -%s=%q after validation: %w", setting[0], setting[1], err)
		}
	}
	return nil
}

func (o *Options) selected() *streamOptions {
	if o.format == formatJSON {
		return &o.json
	}
	return &o.text
}

// validate checks everything that can be checked without changing klog.
func (o *Options) validate() error {
	var errs []error
	switch o.format {
	case formatText, formatJSON:
		other, otherOptions := formatJSON, &o.json
		if o.format == formatJSON {
			other, otherOptions = formatText, &o.text
		}
		if otherOptions.splitStream {
			errs = append(errs, fmt.Errorf("--log-%s-split-stream only applies to --logging-format=%[1]s: remove it, or use --log-%s-split-stream with --logging-format=%[2]s", other, o.format))
		}
		if otherOptions.infoBufferSize.bytes != 0 {
			errs = append(errs, fmt.Errorf("--log-%s-info-buffer-size only applies to --logging-format=%[1]s: remove it, or use --log-%s-info-buffer-size with --logging-format=%[2]s", other, o.format))
		}
	default:
		errs = append(errs, fmt.Errorf(`--logging-format=%q is not supported: use "text" or "json"`, o.format))
	}
	if o.verbosity < 0 || o.verbosity > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("-v=%d is not valid: use a verbosity from 0 (least output) upwards, such as 2 or 5", o.verbosity))
	}
	if err := textlogger.NewConfig().VModule().Set(o.vmodule); err != nil {
		errs = append(errs, fmt.Errorf(`--vmodule=%q is not valid (%v): use a comma-separated list of pattern=N such as "node_register=4,main=5"`, o.vmodule, err))
	}
	if o.flushFrequency <= 0 {
		errs = append(errs, fmt.Errorf("--log-flush-frequency=%s is not valid: use a positive duration such as 5s", o.flushFrequency))
	}
	return errors.Join(errs...)
}

// setLogger gives klog a logger for the selected format writing to stdout and
// stderr, and lets klog.Flush empty the info buffer if there is one.
func (o *Options) setLogger(stdout, stderr io.Writer) {
	info, errs, flush := o.selected().outputs(stdout, stderr, o.flushFrequency)
	verbosity := func(out io.Writer) *textlogger.Config {
		config := textlogger.NewConfig(textlogger.Verbosity(o.verbosity), textlogger.Output(out))
		_ = config.VModule().Set(o.vmodule) // validated
		return config
	}
	options := []klog.LoggerOption{klog.ContextualLogger(true), klog.FlushLogger(flush)}
	if o.format == formatJSON {
		klog.SetLoggerWithOptions(newJSONLogger(verbosity(io.Discard), info, errs), options...)
		return
	}
	var out io.Writer = errs
	if info != errs {
		out = severityRouter{info: info, errors: errs}
	}
	logger := textlogger.NewLogger(verbosity(out))
	// klog's unstructured calls (Infof, ...) arrive already formatted.
	if writer, ok := logger.GetSink().(textlogger.KlogBufferWriter); ok {
		options = append(options, klog.WriteKlogBuffer(writer.WriteKlogBuffer))
	}
	klog.SetLoggerWithOptions(logger, options...)
}

// outputs returns the writers for info and for error lines, the same one
// unless the stream is split, and a function that flushes buffered info
// lines, nil if there is no buffer. Buffered lines wait at most every.
func (s *streamOptions) outputs(stdout, stderr io.Writer, every time.Duration) (info, errs io.Writer, flush func()) {
	errs = newLockedWriter(stderr)
	switch {
	case !s.splitStream:
		return errs, errs, nil
	case s.infoBufferSize.bytes > 0:
		buffered := newBufferedWriter(stdout, int(s.infoBufferSize.bytes), every)
		return buffered, errs, buffered.Flush
	default:
		return newLockedWriter(stdout), errs, nil
	}
}
