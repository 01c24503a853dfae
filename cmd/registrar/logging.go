package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json, as upstream
	"k8s.io/klog/v2"
)

// oldKlogFlags are klog's own flags that upstream v2.10 and older accepted,
// and that manifests written for them still pass; sorted, as the flag
// package lists them.
var oldKlogFlags = []string{"add_dir_header", "alsologtostderr", "log_backtrace_at", "log_dir", "log_file",
	"log_file_max_size", "logtostderr", "one_output", "skip_headers", "skip_log_headers", "stderrthreshold"}

// alphaGateHint is what component-base's help of the split-stream and
// info-buffer flags ends with. The registrar has no --feature-gates: it
// turns LoggingAlphaOptions on, so the hint would mislead.
const alphaGateHint = " Enable the LoggingAlphaOptions feature gate to use this."

// loggingOptions are the logging flags: component-base's, set up as
// upstream sets them up, and klog's old ones, deprecated. What is written
// here is what component-base does not do: accept klog's old flags (it
// registers only -v and --vmodule of klog's), leave an idle registrar
// asleep (it runs klog's flush daemon even with nothing to flush), and size
// an info buffer of 2 GiB where int has 32 bits (capInfoBuffers).
type loggingOptions struct {
	config *logsapi.LoggingConfiguration
	klog   []*klogFlag
}

// addLoggingFlags registers the logging flags on fs.
func addLoggingFlags(fs *flag.FlagSet) *loggingOptions {
	l := &loggingOptions{config: logsapi.NewLoggingConfiguration()}
	logsapi.AddGoFlags(l.config, fs)
	fs.VisitAll(func(f *flag.Flag) { f.Usage = strings.TrimSuffix(f.Usage, alphaGateHint) })
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	for _, name := range oldKlogFlags {
		f := &klogFlag{klog: klogFlags.Lookup(name)}
		l.klog = append(l.klog, f)
		fs.Var(f, name, "DEPRECATED, will be removed: klog's own flag, which upstream v2.10 and older accepted; only honoured with --logging-format=text without --log-text-split-stream")
	}
	return l
}

// isOldKlogFlag tells whether f is one of klog's own flags, deprecated.
func isOldKlogFlag(f *flag.Flag) bool {
	_, ok := f.Value.(*klogFlag)
	return ok
}

// apply validates the logging flags and sets up klog's global logger,
// writing to stdout and stderr. With the text format and no split stream,
// klog's own flags given are handed to klog, which then writes itself (to
// files or os.Stderr); otherwise they have no effect. Either way each gets a
// deprecation warning. apply changes process-wide state: call it once,
// before logging.
func (l *loggingOptions) apply(stdout, stderr io.Writer) error {
	gate, err := loggingFeatureGate()
	if err != nil {
		return err
	}
	capInfoBuffers(l.config)
	logs.InitLogs()
	if err := logsapi.ValidateAndApplyWithOptions(l.config, &logsapi.LoggingOptions{ErrorStream: stderr, InfoStream: stdout}, gate); err != nil {
		return invalidLogging(err)
	}

	var given []*klogFlag
	for _, f := range l.klog {
		if f.given {
			given = append(given, f)
		}
	}
	effect := "klog still honours it for now because the text format is used without a split stream"
	klogWritesItself := false
	switch {
	case l.config.Format != logsapi.DefaultLogFormat:
		effect = "it has no effect with --logging-format=" + l.config.Format
	case l.config.Options.Text.SplitStream:
		effect = "it has no effect with --log-text-split-stream"
	case len(given) > 0:
		klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(klogFlags)
		for _, f := range given {
			if err := klogFlags.Set(f.klog.Name, f.value); err != nil {
				return fmt.Errorf("--%s=%q: %w", f.klog.Name, f.value, err) // checked when parsed
			}
		}
		klog.ClearLogger()
		klogWritesItself = true
	}
	for _, f := range given {
		klog.Warningf("flag --%s is deprecated and will be removed; %s", f.klog.Name, effect)
	}
	if !klogWritesItself && !l.buffersInfo() {
		// component-base starts klog's flush daemon, which would wake an
		// idle registrar every --log-flush-frequency for nothing: the
		// lines go out unbuffered.
		klog.StopFlushDaemon()
	}
	return nil
}

// validate checks the logging flags as apply does, and changes nothing:
// upstream checks them before anything else, so that even --version and the
// probe mode exit 1 on a value component-base refuses.
func (l *loggingOptions) validate() error {
	gate, err := loggingFeatureGate()
	if err != nil {
		return err
	}
	return invalidLogging(logsapi.Validate(l.config, gate, nil).ToAggregate())
}

// loggingFeatureGate is component-base's logging gate with
// LoggingAlphaOptions on: the split streams and info buffers are alpha
// options, and without a --feature-gates flag they would be flags that only
// fail.
func loggingFeatureGate() (featuregate.FeatureGate, error) {
	gate := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(gate); err != nil {
		return nil, err
	}
	if err := gate.SetFromMap(map[string]bool{string(logsapi.LoggingAlphaOptions): true}); err != nil {
		return nil, err
	}
	return gate, nil
}

// invalidLogging says what component-base refused and where to look; nil
// stays nil.
func invalidLogging(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("the logging flags are not valid: %w; --help gives the values each takes", err)
}

// buffersInfo tells whether the format in use holds info lines in a buffer,
// which klog's flush daemon empties.
func (l *loggingOptions) buffersInfo() bool {
	routing := l.config.Options.Text.OutputRoutingOptions
	if l.config.Format == logsapi.JSONLogFormat {
		routing = l.config.Options.JSON.OutputRoutingOptions
	}
	return routing.SplitStream && routing.InfoBufferSize.Value() > 0
}

// capInfoBuffers lowers an info buffer larger than an int (above 2 GiB - 1
// on linux/arm) to the largest int: component-base caps the size at 2 GiB,
// which wraps to a negative size where int has 32 bits, and bufio then gives
// a 4 KiB buffer instead.
func capInfoBuffers(c *logsapi.LoggingConfiguration) {
	for _, size := range []*resource.QuantityValue{&c.Options.Text.InfoBufferSize, &c.Options.JSON.InfoBufferSize} {
		if bytes := size.Value(); int64(int(bytes)) != bytes {
			size.Quantity = *resource.NewQuantity(math.MaxInt, resource.BinarySI)
		}
	}
}

// klogFlag is one of klog's own flags. It holds the value given until apply
// decides whether klog gets it, since klog's flags change klog at once.
type klogFlag struct {
	klog  *flag.Flag
	value string
	given bool
}

func (f *klogFlag) String() string {
	switch {
	case f.given:
		return f.value
	case f.klog != nil: // nil in the flag package's zero value
		return f.klog.DefValue
	}
	return ""
}

// Set checks the value as klog would, on a value of klog's type that is not
// klog's.
func (f *klogFlag) Set(value string) error {
	check := reflect.New(reflect.TypeOf(f.klog.Value).Elem()).Interface().(flag.Value)
	if err := check.Set(value); err != nil {
		return err
	}
	f.value, f.given = value, true
	return nil
}

// IsBoolFlag lets --logtostderr go without a value, as klog's own does.
func (f *klogFlag) IsBoolFlag() bool {
	b, ok := f.klog.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
