package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
)

// checkKubeletLog is check 11, after all others: kubelet's plugin watcher
// logged no error about a file created in its registry directory. It
// stats every file created there, dot-files too, and logs "Error when
// handling create event" for one already gone: a registrar that makes a
// name and removes it at once would put a misleading error in kubelet's
// log at each publication.
func (s *suite) checkKubeletLog(context.Context) bool {
	const name = "11. kubelet's log: no plugin watcher error"
	data, err := os.ReadFile(filepath.Join(s.cluster.logs, "kubelet.log"))
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	var errors []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.Contains(line, "Error when handling create") {
			errors = append(errors, line)
		}
	}
	if len(errors) > 0 {
		return s.report(name, false, "%d error(s) of kubelet's plugin watcher, the first: %s", len(errors), errors[0])
	}
	return s.report(name, true, "none in %d lines of kubelet's log, through every check above", strings.Count(string(data), "\n"))
}
