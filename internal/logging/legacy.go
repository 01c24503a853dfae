package logging

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
)

// legacyFlag is one of klog's own flags, which manifests written for upstream
// v2.10 and older still pass. It only records the value; Apply decides
// whether klog gets to see it.
type legacyFlag struct {
	name, value, usage  string
	isBool, isMegabytes bool
}

func (f *legacyFlag) String() string { return f.value }

func (f *legacyFlag) Set(value string) error {
	if _, err := strconv.ParseBool(value); f.isBool && err != nil {
		return fmt.Errorf("%q is not a boolean: use true or false", value)
	}
	if _, err := strconv.ParseUint(value, 10, 64); f.isMegabytes && err != nil {
		return fmt.Errorf("%q is not a number of megabytes: use 0 or a positive integer", value)
	}
	f.value = value
	return nil
}

// IsBoolFlag lets the flag package accept --logtostderr without a value.
func (f *legacyFlag) IsBoolFlag() bool { return f.isBool }

// newLegacyFlags lists klog's flags with klog's meanings and its defaults,
// where they are not the zero value.
func newLegacyFlags() []*legacyFlag {
	return []*legacyFlag{
		{name: "logtostderr", isBool: true, value: "true", usage: "log to standard error instead of files"},
		{name: "alsologtostderr", isBool: true, usage: "log to standard error as well as files (with --logtostderr=false)"},
		{name: "log_dir", usage: "write log files into this `directory` (with --logtostderr=false)"},
		{name: "log_file", usage: "write logs to this `file` (with --logtostderr=false)"},
		{name: "log_file_max_size", isMegabytes: true, value: "1800", usage: "maximum size in `megabytes` of a log file before it is truncated, 0 for no limit (with --logtostderr=false)"},
		{name: "stderrthreshold", value: "ERROR", usage: "messages of this `severity` (INFO, WARNING, ERROR, FATAL) and above also go to standard error (with --logtostderr=false)"},
		{name: "skip_headers", isBool: true, usage: "leave out the header (severity, time, source location) of each line"},
		{name: "skip_log_headers", isBool: true, usage: "leave out the header at the start of log files (with --logtostderr=false)"},
		{name: "add_dir_header", isBool: true, usage: "add the directory of the source file to each line's header"},
		{name: "one_output", isBool: true, usage: "write each message only to the file of its own severity (with --logtostderr=false)"},
		{name: "log_backtrace_at", usage: "when logging reaches this source `file.go:N`, also write a stack trace"},
	}
}

// IsLegacyFlag tells whether f is one of klog's own flags that AddFlags
// registered, which are deprecated.
func (o *Options) IsLegacyFlag(f *flag.Flag) bool {
	legacy, ok := f.Value.(*legacyFlag)
	return ok && slices.Contains(o.legacy, legacy)
}
