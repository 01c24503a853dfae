package logging

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

func TestVerbosity(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		maxLevel int // the highest V level that must be written
	}{
		{name: "default", maxLevel: 0},
		{name: "-v", args: []string{"-v=2"}, maxLevel: 2},
		{name: "--v", args: []string{"--v=2"}, maxLevel: 2},
		{name: "vmodule for this file", args: []string{"--vmodule=verbosity_test=3"}, maxLevel: 3},
		{name: "vmodule glob", args: []string{"--vmodule=verbo*=3"}, maxLevel: 3},
		{name: "vmodule above -v", args: []string{"-v=1", "--vmodule=verbosity_test=4"}, maxLevel: 4},
		{name: "vmodule for another file", args: []string{"--vmodule=registration=3"}, maxLevel: 0},
	}
	for _, format := range []string{"text", "json"} {
		for _, tc := range tests {
			t.Run(format+"/"+tc.name, func(t *testing.T) {
				_, stderr := apply(t, append(tc.args, "--logging-format="+format)...)
				for level := 0; level <= 5; level++ {
					klog.V(klog.Level(level)).InfoS(fmt.Sprintf("klog V%d", level))
					klog.Background().V(level).Info(fmt.Sprintf("contextual V%d", level))
				}

				output := stderr.String()
				for level := 0; level <= 5; level++ {
					for _, msg := range []string{fmt.Sprintf(`"klog V%d"`, level), fmt.Sprintf(`"contextual V%d"`, level)} {
						if written := strings.Contains(output, msg); written != (level <= tc.maxLevel) {
							t.Errorf("%s written: %v, want %v; output:\n%s", msg, written, level <= tc.maxLevel, output)
						}
					}
				}
			})
		}
	}
}
