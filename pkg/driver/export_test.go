package driver

import "github.com/fsnotify/fsnotify"

// WithFileEvents is cfg with onFileEvent set to onEvent.
func WithFileEvents(cfg Config, onEvent func(fsnotify.Event)) Config {
	cfg.onFileEvent = onEvent
	return cfg
}
