package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/csi-registrar/node-driver-registrar/pkg/features/diagnose"
)

// runDiagnose prints the node set-up checklist and returns the exit code.
func runDiagnose(ctx context.Context, o *options, stdout io.Writer) int {
	if o.flags.NFlag() == 1 {
		// --diagnose alone, as kubectl exec runs it: borrow the running
		// registrar's flags.
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
		KubeletRegistrationPath: o.registration.Endpoint,
		RegistrationDir:         o.registration.Dir,
		Timeout:                 o.operationTimeout(),
		Output:                  stdout,
	})
	if !diagnose.PrintSummary(stdout, checks) {
		return exitError
	}
	return exitOK
}

// runningRegistrarFlags parses the command line of the lowest other PID that
// runs this executable: not PID 1 when the pod shares its process namespace.
func runningRegistrarFlags(proc string) (*options, int, error) {
	self, err := os.Stat(filepath.Join(proc, "self", "exe"))
	if err != nil {
		return nil, 0, err
	}
	entries, err := os.ReadDir(proc)
	if err != nil {
		return nil, 0, err
	}
	found := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || (found != 0 && pid > found) {
			continue
		}
		if exe, err := os.Stat(filepath.Join(proc, e.Name(), "exe")); err == nil && os.SameFile(exe, self) {
			found = pid
		}
	}
	if found == 0 {
		return nil, 0, errors.New("no other process runs this executable: PID 1 runs another program")
	}
	raw, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(found), "cmdline"))
	if err != nil {
		return nil, 0, err
	}
	program, args, err := splitCmdline(raw)
	if err != nil {
		return nil, 0, err
	}
	o, err := parseFlags(program, args, io.Discard)
	return o, found, err
}

// splitCmdline reads /proc/<pid>/cmdline's NUL-ended fields.
func splitCmdline(raw []byte) (program string, args []string, err error) {
	if len(raw) == 0 {
		return "", nil, errors.New("empty command line")
	}
	fields := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
	return fields[0], fields[1:], nil
}
