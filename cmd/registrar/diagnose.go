package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/csi-registrar/node-driver-registrar/pkg/diagnose"
)

// runDiagnose prints the node set-up checklist and returns the exit code.
func runDiagnose(ctx context.Context, o *options, stdout, stderr io.Writer) int {
	if onlyDiagnoseSet(o) {
		// kubectl exec passes no flags: borrow the running registrar's.
		running, pid, err := runningRegistrarFlags("/proc")
		if err != nil {
			fmt.Fprintf(stdout, "Could not read the running registrar's flags (%v): checking with the defaults.\n"+
				"Pass the registrar's flags after --diagnose, e.g. --diagnose --csi-address=/csi/csi.sock --kubelet-registration-path=/var/lib/kubelet/plugins/<driver>/csi.sock --plugin-registration-path=/registration\n", err)
		} else {
			fmt.Fprintf(stdout, "Using the flags of the running registrar (PID %d).\n", pid)
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

// runningRegistrarFlags parses the command line of the running registrar:
// the process that runs this same executable, PID 1 in the registrar's
// container, or another PID when the pod shares its process namespace
// (PID 1 is then the pause container's).
func runningRegistrarFlags(proc string) (*options, int, error) {
	self, err := os.Stat(filepath.Join(proc, "self", "exe"))
	if err != nil {
		return nil, 0, err
	}
	pid, err := findRegistrar(proc, self)
	if err != nil {
		return nil, 0, err
	}
	raw, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil, 0, err
	}
	program, args, err := splitCmdline(raw)
	if err != nil {
		return nil, 0, err
	}
	o, err := parseFlags(program, args, io.Discard)
	return o, pid, err
}

// findRegistrar returns PID 1 when it runs the executable self, or else the
// lowest other PID that does, this process excepted.
func findRegistrar(proc string, self os.FileInfo) (int, error) {
	runsSelf := func(pid int) bool {
		fi, err := os.Stat(filepath.Join(proc, strconv.Itoa(pid), "exe"))
		return err == nil && os.SameFile(fi, self)
	}
	if runsSelf(1) {
		return 1, nil
	}
	entries, err := os.ReadDir(proc)
	if err != nil {
		return 0, err
	}
	own := os.Getpid()
	found := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == own || (found != 0 && pid > found) {
			continue
		}
		if runsSelf(pid) {
			found = pid
		}
	}
	if found == 0 {
		return 0, errors.New("no other process runs this executable: PID 1 runs another program")
	}
	return found, nil
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
