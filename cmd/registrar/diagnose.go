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
		Timeout:                 o.operationTimeout(),
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
	program, args, err := splitCmdline(raw)
	if err != nil {
		return nil, err
	}
	return parseFlags(program, args, io.Discard)
}

// splitCmdline reads a /proc/<pid>/cmdline: the program and its arguments,
// each ended by a NUL.
func splitCmdline(raw []byte) (program string, args []string, err error) {
	if len(raw) == 0 {
		return "", nil, fmt.Errorf("empty command line")
	}
	fields := bytes.Split(bytes.TrimSuffix(raw, []byte{0}), []byte{0})
	for _, a := range fields[1:] {
		args = append(args, string(a))
	}
	return string(fields[0]), args, nil
}
