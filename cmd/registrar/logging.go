package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json, as upstream
	"k8s.io/klog/v2"
)

// oldKlogFlags are klog's own flags that upstream v2.10 and older accepted;
// sorted, as the flag package lists them.
var oldKlogFlags = []string{"add_dir_header", "alsologtostderr", "log_backtrace_at", "log_dir", "log_file",
	"log_file_max_size", "logtostderr", "one_output", "skip_headers", "skip_log_headers", "stderrthreshold"}

// alphaGateHint ends component-base's help of the alpha flags; the registrar
// turns LoggingAlphaOptions on itself, so the hint would mislead.
const alphaGateHint = " Enable the LoggingAlphaOptions feature gate to use this."

// loggingOptions are component-base's logging flags, set up as upstream's,
// and klog's old ones. Written here is what component-base does not do:
// accept klog's old flags, leave an idle registrar asleep (it runs klog's
// flush daemon with nothing to flush), and size a 2 GiB info buffer where
// int has 32 bits.
type loggingOptions struct {
	config *logsapi.LoggingConfiguration
	klog   []*klogFlag
}

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

// apply sets up klog's global logger. klog's own flags reach klog only with
// the text format and no split stream. It changes process-wide state: call
// it once, before logging.
func (l *loggingOptions) apply(stdout, stderr io.Writer) error {
	capInfoBuffers(l.config)
	logs.InitLogs()
	if err := logsapi.ValidateAndApplyWithOptions(l.config, &logsapi.LoggingOptions{ErrorStream: stderr, InfoStream: stdout}, loggingFeatureGate()); err != nil {
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
		for _, f := range given {
			// f.klog is bound to klog's own settings.
			if err := f.klog.Value.Set(f.value); err != nil {
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
		// The lines go out unbuffered: the flush daemon would only wake an
		// idle registrar.
		klog.StopFlushDaemon()
	}
	return nil
}

// validate changes nothing: upstream checks the logging flags first, so that
// even --version and the probe mode exit 1 on a value component-base refuses.
func (l *loggingOptions) validate() error {
	return invalidLogging(logsapi.Validate(l.config, loggingFeatureGate(), nil).ToAggregate())
}

// loggingFeatureGate turns LoggingAlphaOptions on: without --feature-gates
// the alpha flags would only fail.
func loggingFeatureGate() featuregate.FeatureGate {
	gate := featuregate.NewFeatureGate()
	// Neither fails: the gate is new, and the feature is logsapi's own.
	utilruntime.Must(logsapi.AddFeatureGates(gate))
	utilruntime.Must(gate.SetFromMap(map[string]bool{string(logsapi.LoggingAlphaOptions): true}))
	return gate
}

func invalidLogging(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("the logging flags are not valid: %w; --help gives the values each takes", err)
}

// buffersInfo: info lines are buffered, which klog's flush daemon empties.
func (l *loggingOptions) buffersInfo() bool {
	routing := l.config.Options.Text.OutputRoutingOptions
	if l.config.Format == logsapi.JSONLogFormat {
		routing = l.config.Options.JSON.OutputRoutingOptions
	}
	return routing.SplitStream && routing.InfoBufferSize.Value() > 0
}

// capInfoBuffers: component-base caps the size at 2 GiB, which wraps to a
// negative int on 32-bit platforms, where bufio then gives 4 KiB instead.
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

// Set checks the value on a value of klog's type that is not klog's.
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
