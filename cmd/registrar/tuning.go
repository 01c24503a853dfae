package main

// The Go runtime's settings for a process that serves one request at a
// time and idles the rest: GOMAXPROCS.

import (
	"fmt"
	"os"
	"runtime"

	"go.uber.org/automaxprocs/maxprocs"
	"k8s.io/klog/v2"
)

// setMaxProcs applies --automaxprocs and returns GOMAXPROCS. The image sets
// GOMAXPROCS=1 (README.md, "Performance"); upstream's sets nothing, so
// --automaxprocs starts from the runtime's default, as it does there,
// instead of honouring GOMAXPROCS as automaxprocs otherwise would.
func setMaxProcs(logger klog.Logger, automaxprocs bool) int {
	if automaxprocs {
		if env, ok := os.LookupEnv("GOMAXPROCS"); ok {
			logger.Info("--automaxprocs overrides GOMAXPROCS from the environment", "GOMAXPROCS", env)
			_ = os.Unsetenv("GOMAXPROCS")
			runtime.SetDefaultGOMAXPROCS()
		}
		if _, err := maxprocs.Set(maxprocs.Logger(func(format string, args ...any) {
			logger.Info(fmt.Sprintf(format, args...))
		})); err != nil {
			logger.Error(err, "Cannot set GOMAXPROCS from the CPU quota")
		}
	}
	return runtime.GOMAXPROCS(0)
}
