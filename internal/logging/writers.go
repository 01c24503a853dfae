package logging

import (
	"bufio"
	"io"
	"sync"
	"time"
)

// lineWriter serialises writes, so that lines written concurrently by
// several goroutines never interleave, whatever the injected writer is.
//
// With a buffer, it holds info output in memory until it is flushed: by
// klog.Flush, when the buffer is full, or at the latest `every` after a line
// went into an empty buffer. Nothing wakes it while the buffer is empty,
// unlike klog's flush daemon, which ticks for ever. A line that does not fit
// in what is left of the buffer first flushes the buffer, so the underlying
// writer only ever receives whole lines.
type lineWriter struct {
	mu    sync.Mutex
	out   io.Writer
	buf   *bufio.Writer // nil: writes go straight to out
	every time.Duration
	timer *time.Timer // armed while lines wait in the buffer
}

func newBufferedWriter(out io.Writer, size int, every time.Duration) *lineWriter {
	return &lineWriter{out: out, buf: bufio.NewWriterSize(out, size), every: every}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf == nil {
		return w.out.Write(p)
	}
	if len(p) > w.buf.Available() && w.buf.Buffered() > 0 {
		if err := w.buf.Flush(); err != nil {
			return 0, err
		}
	}
	// With an empty buffer, bufio writes a line larger than the buffer
	// straight through.
	n, err := w.buf.Write(p)
	if w.buf.Buffered() > 0 && w.timer == nil {
		w.timer = time.AfterFunc(w.every, w.Flush)
	}
	return n, err
}

// Flush writes out whatever is buffered. Errors are dropped: there is no
// better place than the log itself to report them.
func (w *lineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.buf.Flush()
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
}

// severityRouter splits klog's text output: each write is one formatted
// entry whose header starts with the severity letter, I for info, and W, E
// or F for the rest.
type severityRouter struct {
	info, errors io.Writer
}

func (r severityRouter) Write(p []byte) (int, error) {
	if len(p) > 0 && p[0] == 'I' {
		return r.info.Write(p)
	}
	return r.errors.Write(p)
}
