package driver

import "github.com/fsnotify/fsnotify"

// WithFileEvents is cfg with each file system event Follow handles passed
// to onEvent, in order with its reports.
func WithFileEvents(cfg Config, onEvent func(fsnotify.Event)) Config {
	cfg.hooks.fileEvent = onEvent
	return cfg
}

// WithWatches is cfg with each directory Follow's watcher moves to passed
// to onWatch.
func WithWatches(cfg Config, onWatch func(dir string)) Config {
	cfg.hooks.watching = onWatch
	return cfg
}

// Follow's fixed waits, for tests that step its clock through them.
const (
	InitialBackoff = initialBackoff
	SettleTime     = settleTime
	ListenPoll     = listenPoll
)
