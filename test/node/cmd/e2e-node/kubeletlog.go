package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// checkKubeletLog: kubelet's plugin watcher logs an error for a file
// created in its registry directory and gone before it stats it, which a
// registrar's temporary names would cause.
func (s *suite) checkKubeletLog(context.Context) bool {
	const name = "11. kubelet's log: no plugin watcher error"
	files, err := filepath.Glob(filepath.Join(s.Logs, "kubelet*.log"))
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("no kubelet*.log in %s", s.Logs)
	}
	if err != nil {
		return s.report(name, false, "%v", err)
	}
	var errors, names []string
	lines := 0
	for _, file := range files {
		names = append(names, filepath.Base(file))
		data, err := os.ReadFile(file)
		if err != nil {
			return s.report(name, false, "%v", err)
		}
		lines += strings.Count(string(data), "\n")
		for line := range strings.SplitSeq(string(data), "\n") {
			if strings.Contains(line, "Error when handling create") {
				errors = append(errors, filepath.Base(file)+": "+line)
			}
		}
	}
	if len(errors) > 0 {
		return s.report(name, false, "%d error(s) of kubelet's plugin watcher, the first: %s", len(errors), errors[0])
	}
	return s.report(name, true, "none in %d lines of kubelet's logs %v (a kubelet restarted by check 13 logs to a file of its own), through every check above", lines, names)
}
