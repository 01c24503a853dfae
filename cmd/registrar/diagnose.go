package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/csi-registrar/node-driver-registrar/pkg/diagnose"
)

// runDiagnose prints the node set-up checklist and returns the exit code.
func runDiagnose(ctx context.Context, o *options, stdout, stderr io.Writer) int {
	if onlyDiagnoseSet(o) {
		// kubectl exec passes no flags: borrow the running registrar's.
		if running, err := runningRegistrarFlags(); err == nil {
			fmt.Fprintln(stdout, "Using the flags of the running registrar (PID 1).")
			o = running
		}
	}
	checks := diagnose.Run(ctx, diagnose.Config{
		CSIAddress:              o.csiAddress,
		KubeletRegistrationPath: o.kubeletRegistrationPath,
		RegistrationDir:         o.pluginRegistrationPath,
		Timeout:                 o.timeout,
	})
	if !diagnose.Print(stdout, checks) {
		return exitError
	}
	return exitOK
}

func onlyDiagnoseSet(o *options) bool {
	only := true
	o.flags.Visit(func(f *flag.Flag) {
		if f.Name != "diagnose" {
			only = false
		}
	})
	return only
}

// runningRegistrarFlags parses the command line of PID 1 when PID 1 runs
// this same executable, as it does in the registrar's container.
func runningRegistrarFlags() (*options, error) {
	self, err := os.Stat("/proc/self/exe")
	if err != nil {
		return nil, err
	}
	first, err := os.Stat("/proc/1/exe")
	if err != nil {
		return nil, err
	}
	if !os.SameFile(self, first) {
		return nil, fmt.Errorf("PID 1 runs another program")
	}
	raw, err := os.ReadFile("/proc/1/cmdline")
	if err != nil {
		return nil, err
	}
	args := bytes.Split(bytes.TrimSuffix(raw, []byte{0}), []byte{0})
	if len(args) == 0 {
		return nil, fmt.Errorf("empty command line")
	}
	var argv []string
	for _, a := range args[1:] {
		argv = append(argv, string(a))
	}
	return parseFlags(string(args[0]), argv, io.Discard)
}
