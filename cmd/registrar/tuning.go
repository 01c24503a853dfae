package main

import (
	"fmt"
	"os"
	"runtime"

	"go.uber.org/automaxprocs/maxprocs"
	"k8s.io/klog/v2"
)

// setMaxProcs applies --automaxprocs and returns GOMAXPROCS. Upstream's image
// sets no GOMAXPROCS, so --automaxprocs ignores the image's GOMAXPROCS=1.
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
