// Package logging configures klog from the logging flags that Kubernetes
// components share, without k8s.io/component-base, whose logging was
// measured at 3 MB of binary; docs/flags.md describes them. Text is klog's
// format; JSON is component-base's, byte for byte but for time.Time values
// (test/logconformance compares them). Programs must call klog.Flush before
// they exit.
//
// klog's own flags (--logtostderr, --log_file, ...), which upstream v2.10
// and older accepted, are accepted with a deprecation warning each. klog
// honours them only with the text format and no split stream, and then
// writes itself, to files or os.Stderr rather than Apply's writers.
package logging

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

const formatText, formatJSON = "text", "json"

// Options holds the logging flags.
type Options struct {
	verbosity      int
	vmodule        string
	format         string
	flushFrequency time.Duration
	text, json     streamOptions
	legacy         []*legacyFlag
}

// streamOptions are the output options each format has under its own flags.
type streamOptions struct {
	format         string
	splitStream    bool
	infoBufferSize byteSize
}

// NewOptions returns the options with Kubernetes' defaults: text format,
// verbosity 0, flushes every 5s, everything to stderr.
func NewOptions() *Options {
	return &Options{
		format:         formatText,
		flushFrequency: 5 * time.Second,
		text:           streamOptions{format: formatText},
		json:           streamOptions{format: formatJSON},
		legacy:         newLegacyFlags(),
	}
}

// AddFlags registers the flags on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.verbosity, "v", o.verbosity, "number for the log level verbosity")
	fs.StringVar(&o.vmodule, "vmodule", o.vmodule, "comma-separated list of pattern=N settings for file-filtered logging; a pattern is a source file name without .go, * and ? match any characters")
	fs.StringVar(&o.format, "logging-format", o.format, `log format: "text" or "json"`)
	fs.DurationVar(&o.flushFrequency, "log-flush-frequency", o.flushFrequency, "maximum time between log flushes")
	o.text.addFlags(fs, "warnings and errors")
	o.json.addFlags(fs, "errors")
	for _, f := range o.legacy {
		fs.Var(f, f.name, "DEPRECATED, will be removed; only honoured with --logging-format=text without --log-text-split-stream: "+f.usage)
	}
}

func (s *streamOptions) addFlags(fs *flag.FlagSet, toStderr string) {
	fs.BoolVar(&s.splitStream, "log-"+s.format+"-split-stream", s.splitStream,
		"in "+s.format+" format, write info messages to stdout and "+toStderr+" to stderr; without it everything goes to stderr")
	fs.Var(&s.infoBufferSize, "log-"+s.format+"-info-buffer-size",
		"in "+s.format+" format with split streams, buffer up to this `size` of info messages between flushes, in bytes (65536) or as a quantity (64Ki, 1Mi, 500k), at most 2Gi; 0 writes them at once")
}

// streams returns the selected format's stream options, and the other's.
func (o *Options) streams() (selected, other *streamOptions) {
	if o.format == formatJSON {
		return &o.json, &o.text
	}
	return &o.text, &o.json
}

// Apply validates the flag values, configures klog's global logger and logs
// a deprecation warning for each of klog's own flags set on fs. The error
// says what to change. Apply changes process-wide state: call it once,
// before logging.
func (o *Options) Apply(fs *flag.FlagSet, stdout, stderr io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	var legacy []*legacyFlag // in lexical order, as fs visits them
	fs.Visit(func(given *flag.Flag) {
		if o.IsLegacyFlag(given) {
			legacy = append(legacy, given.Value.(*legacyFlag))
		}
	})
	honoured, effect := legacy, "klog still honours it for now because the text format is used without a split stream"
	if o.format == formatJSON {
		honoured, effect = nil, "it has no effect with --logging-format=json"
	} else if o.text.splitStream {
		honoured, effect = nil, "it has no effect with --log-text-split-stream"
	}

	before := klog.CaptureState()
	// klog reads the flush callback without a lock: keep the daemon stopped
	// while the logger is replaced.
	klog.StopFlushDaemon()
	// klog.V checks -v and --vmodule itself: they are klog's flags too.
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	settings := []*legacyFlag{{name: "v", value: strconv.Itoa(o.verbosity)}, {name: "vmodule", value: o.vmodule}}
	for _, f := range append(settings, honoured...) {
		if err := klogFlags.Set(f.name, f.value); err != nil {
			// Only klog can check the values of its own flags, by taking
			// them: undo what was taken before one failed.
			before.Restore()
			return fmt.Errorf("--%s=%q is not valid: %w", f.name, f.value, err)
		}
	}
	if len(honoured) > 0 {
		// klog writes to files through buffers only its daemon flushes.
		// Otherwise nothing needs the daemon: stderr is written at once, and
		// an info buffer flushes itself, so an idle registrar sleeps.
		klog.ClearLogger()
		klog.StartFlushDaemon(o.flushFrequency)
	} else {
		o.setLogger(stdout, stderr)
	}
	for _, f := range legacy {
		klog.Warningf("flag --%s is deprecated and will be removed; %s", f.name, effect)
	}
	if selected, _ := o.streams(); selected.infoBufferSize.bytes > 0 && !selected.splitStream {
		klog.Warningf("--log-%s-info-buffer-size has no effect without --log-%[1]s-split-stream: all messages go unbuffered to stderr", o.format)
	}
	return nil
}

// validate checks everything that can be checked without changing klog.
func (o *Options) validate() error {
	var errs []error
	switch _, other := o.streams(); o.format {
	case formatText, formatJSON:
		if other.splitStream {
			errs = append(errs, fmt.Errorf("--log-%s-split-stream only applies to --logging-format=%[1]s: remove it, or use --log-%s-split-stream with --logging-format=%[2]s", other.format, o.format))
		}
		if other.infoBufferSize.bytes != 0 {
			errs = append(errs, fmt.Errorf("--log-%s-info-buffer-size only applies to --logging-format=%[1]s: remove it, or use --log-%s-info-buffer-size with --logging-format=%[2]s", other.format, o.format))
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

// setLogger gives klog a logger of the selected format, and lets klog.Flush
// empty the info buffer if there is one.
func (o *Options) setLogger(stdout, stderr io.Writer) {
	options := []klog.LoggerOption{klog.ContextualLogger(true)}
	errs := &lineWriter{out: stderr}
	info := errs
	if selected, _ := o.streams(); selected.splitStream {
		info = &lineWriter{out: stdout, every: o.flushFrequency}
		if size := selected.infoBufferSize.bytes; size > 0 {
			info.buf = bufio.NewWriterSize(stdout, int(size))
			options = append(options, klog.FlushLogger(info.Flush))
		}
	}
	if o.format == formatJSON {
		klog.SetLoggerWithOptions(logr.New(&jsonSink{info: info, errs: errs}), options...)
		return
	}
	out := severityRouter{info: info, errors: errs}
	config := textlogger.NewConfig(textlogger.Verbosity(o.verbosity), textlogger.Output(out))
	_ = config.VModule().Set(o.vmodule) // validated
	logger := textlogger.NewLogger(config)
	// klog's unstructured calls (Infof, ...) arrive already formatted.
	writer := logger.GetSink().(textlogger.KlogBufferWriter)
	klog.SetLoggerWithOptions(logger, append(options, klog.WriteKlogBuffer(writer.WriteKlogBuffer))...)
}
