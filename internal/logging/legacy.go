package logging

import (
	"flag"
	"fmt"
	"strconv"
)

type legacyKind int

const (
	legacyString legacyKind = iota
	legacyBool
	legacyUint
)

// legacyFlag is one of klog's own flags, which manifests written for upstream
// v2.10 and older still pass. It only records the value; Apply decides
// whether klog gets to see it.
type legacyFlag struct {
	name  string
	kind  legacyKind
	value string
	usage string
}

func (f *legacyFlag) String() string { return f.value }

func (f *legacyFlag) Set(value string) error {
	switch f.kind {
	case legacyBool:
		if _, err := strconv.ParseBool(value); err != nil {
			return fmt.Errorf("%q is not a boolean: use true or false", value)
		}
	case legacyUint:
		if _, err := strconv.ParseUint(value, 10, 64); err != nil {
			return fmt.Errorf("%q is not a number of megabytes: use 0 or a positive integer", value)
		}
	}
	f.value = value
	return nil
}

// IsBoolFlag lets the flag package accept --logtostderr without a value.
func (f *legacyFlag) IsBoolFlag() bool { return f.kind == legacyBool }

// newLegacyFlags lists klog's flags with klog's meanings and its defaults,
// where they are not the zero value.
func newLegacyFlags() []*legacyFlag {
	return []*legacyFlag{
		{name: "logtostderr", kind: legacyBool, value: "true", usage: "log to standard error instead of files"},
		{name: "alsologtostderr", kind: legacyBool, usage: "log to standard error as well as files (with --logtostderr=false)"},
		{name: "log_dir", kind: legacyString, usage: "write log files into this `directory` (with --logtostderr=false)"},
		{name: "log_file", kind: legacyString, usage: "write logs to this `file` (with --logtostderr=false)"},
		{name: "log_file_max_size", kind: legacyUint, value: "1800", usage: "maximum size in `megabytes` of a log file before it is truncated, 0 for no limit (with --logtostderr=false)"},
		{name: "stderrthreshold", kind: legacyString, value: "ERROR", usage: "messages of this `severity` (INFO, WARNING, ERROR, FATAL) and above also go to standard error (with --logtostderr=false)"},
		{name: "skip_headers", kind: legacyBool, usage: "leave out the header (severity, time, source location) of each line"},
		{name: "skip_log_headers", kind: legacyBool, usage: "leave out the header at the start of log files (with --logtostderr=false)"},
		{name: "add_dir_header", kind: legacyBool, usage: "add the directory of the source file to each line's header"},
		{name: "one_output", kind: legacyBool, usage: "write each message only to the file of its own severity (with --logtostderr=false)"},
		{name: "log_backtrace_at", kind: legacyString, usage: "when logging reaches this source `file.go:N`, also write a stack trace"},
	}
}

// IsLegacyFlag tells whether f is one of klog's own flags that AddFlags
// registered: deprecated, kept only for manifests written for upstream v2.10
// and older.
func (o *Options) IsLegacyFlag(f *flag.Flag) bool {
	for _, legacy := range o.legacy {
		if f.Value == flag.Value(legacy) {
			return true
		}
	}
	return false
}
