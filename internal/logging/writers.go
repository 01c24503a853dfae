package logging

import (
	"bufio"
	"io"
	"sync"
	"time"
)

// lineWriter serialises writes, so that lines written concurrently never
// interleave, whatever out is.
//
// With buf, it holds info lines until klog.Flush, a full buffer, or `every`
// after a line went into an empty buffer; unlike klog's flush daemon, which
// ticks for ever, nothing wakes it while the buffer is empty. A line that
// does not fit in what is left first flushes the buffer, so that out only
// receives whole lines.
type lineWriter struct {
	mu    sync.Mutex
	out   io.Writer
	buf   *bufio.Writer // nil: writes go straight to out
	every time.Duration
	timer *time.Timer // armed while lines wait in the buffer
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

// severityRouter splits klog's text output: each write is one entry whose
// header starts with its severity, I for info, and W, E or F for the rest.
type severityRouter struct {
	info, errors io.Writer
}

func (r severityRouter) Write(p []byte) (int, error) {
	if len(p) > 0 && p[0] == 'I' {
		return r.info.Write(p)
	}
	return r.errors.Write(p)
}
