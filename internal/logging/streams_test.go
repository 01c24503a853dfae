package logging

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/csi-registrar/node-driver-registrar/internal/poll"

	"k8s.io/klog/v2"
)

func TestStreams(t *testing.T) {
	logAll := func() {
		klog.InfoS("info line")
		klog.Background().Info("contextual info line")
		klog.Warning("warning line")
		klog.ErrorS(errors.New("boom"), "error line")
		klog.Background().Error(nil, "contextual error line")
	}
	all := []string{"info line", "contextual info line", "warning line", "error line", "contextual error line"}
	tests := []struct {
		name                 string
		args                 []string
		wantStdout, wantErrs []string
	}{{
		name:     "text",
		wantErrs: all,
	}, {
		name:       "text split",
		args:       []string{"--log-text-split-stream"},
		wantStdout: []string{"info line", "contextual info line"},
		wantErrs:   []string{"warning line", "error line", "contextual error line"},
	}, {
		name:     "json",
		args:     []string{"--logging-format=json"},
		wantErrs: all,
	}, {
		// Without severities in JSON, klog passes warnings on as info.
		name:       "json split",
		args:       []string{"--logging-format=json", "--log-json-split-stream"},
		wantStdout: []string{"info line", "contextual info line", "warning line"},
		wantErrs:   []string{"error line", "contextual error line"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := apply(t, tc.args...)
			logAll()
			checkMessages(t, "stdout", stdout.lines(), tc.wantStdout)
			checkMessages(t, "stderr", stderr.lines(), tc.wantErrs)
		})
	}
}

// checkMessages checks that lines hold exactly the messages want, in order.
func checkMessages(t *testing.T, stream string, lines, want []string) {
	t.Helper()
	if len(lines) != len(want) {
		t.Errorf("%s has %d lines, want %d: %q", stream, len(lines), len(want), lines)
		return
	}
	for i, line := range lines {
		if message(t, line) != want[i] {
			t.Errorf("%s line %d has message %q, want %q: %s", stream, i, message(t, line), want[i], line)
		}
	}
}

// message returns the message of a JSON or a text line.
func message(t *testing.T, line string) string {
	t.Helper()
	if strings.HasPrefix(line, "{") {
		var entry struct{ Msg string }
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("not JSON: %v: %s", err, line)
		}
		return entry.Msg
	}
	_, text, found := strings.Cut(line, "] ")
	if !found {
		t.Fatalf("no klog header: %s", line)
	}
	// Structured calls quote the message; unstructured ones do not.
	quoted, err := strconv.QuotedPrefix(text)
	if err != nil {
		return text
	}
	msg, _ := strconv.Unquote(quoted)
	return msg
}

func TestInfoBufferFlushedByKlogFlush(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			// The buffer must not be flushed by time during the test.
			stdout, stderr := apply(t, "--logging-format="+format, "--log-"+format+"-split-stream",
				"--log-"+format+"-info-buffer-size=64Ki", "--log-flush-frequency=1h")
			klog.InfoS("buffered info")
			klog.ErrorS(nil, "unbuffered error")

			if got := stdout.String(); got != "" {
				t.Errorf("stdout before klog.Flush: %q, want nothing", got)
			}
			checkMessages(t, "stderr", stderr.lines(), []string{"unbuffered error"})
			klog.Flush()
			checkMessages(t, "stdout after klog.Flush", stdout.lines(), []string{"buffered info"})
		})
	}
}

func TestInfoBufferFlushedWithinTheFlushFrequency(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			stdout, _ := apply(t, "--logging-format="+format, "--log-"+format+"-split-stream",
				"--log-"+format+"-info-buffer-size=1Mi", "--log-flush-frequency=10ms")
			klog.InfoS("buffered info")

			poll.Until(t, "the buffered line is written, with --log-flush-frequency=10ms", func() bool {
				return strings.Contains(stdout.String(), "buffered info")
			})
		})
	}
}

// Lines logged concurrently must come out whole, through the buffer too.
func TestConcurrentLinesStayWhole(t *testing.T) {
	for _, args := range [][]string{
		{"--logging-format=json", "--log-json-split-stream", "--log-json-info-buffer-size=1Ki"},
		{"--logging-format=json"},
		{"--log-text-split-stream", "--log-text-info-buffer-size=1Ki"},
		{},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			stdout, stderr := apply(t, args...)
			const goroutines, perGoroutine = 8, 50
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range perGoroutine {
						klog.InfoS("concurrent", "goroutine", g, "i", i, "padding", strings.Repeat("x", 100))
					}
				})
			}
			wg.Wait()
			klog.Flush()

			lines := append(stdout.lines(), stderr.lines()...)
			if len(lines) != goroutines*perGoroutine {
				t.Fatalf("%d lines, want %d", len(lines), goroutines*perGoroutine)
			}
			seen := map[string]bool{}
			for _, line := range lines {
				if message(t, line) != "concurrent" || !strings.Contains(line, strings.Repeat("x", 100)) {
					t.Fatalf("damaged line: %s", line)
				}
				seen[line[strings.Index(line, "goroutine"):]] = true
			}
			if len(seen) != goroutines*perGoroutine {
				t.Errorf("%d distinct lines, want %d", len(seen), goroutines*perGoroutine)
			}
		})
	}
}

func TestBufferedWriterWritesWholeLines(t *testing.T) {
	var writes []string
	out := writerFunc(func(p []byte) (int, error) {
		writes = append(writes, string(p))
		return len(p), nil
	})
	buffered := &lineWriter{out: out, buf: bufio.NewWriterSize(out, 16), every: time.Hour}
	steps := []struct {
		write, flush bool
		line         string
		wantWrites   []string
	}{
		{write: true, line: "0123456789\n"},
		{write: true, line: "abcdefghij\n", wantWrites: []string{"0123456789\n"}},
		{write: true, line: strings.Repeat("L", 40) + "\n", wantWrites: []string{"0123456789\n", "abcdefghij\n", strings.Repeat("L", 40) + "\n"}},
		{write: true, line: "tail\n", wantWrites: []string{"0123456789\n", "abcdefghij\n", strings.Repeat("L", 40) + "\n"}},
		{flush: true, wantWrites: []string{"0123456789\n", "abcdefghij\n", strings.Repeat("L", 40) + "\n", "tail\n"}},
	}
	for i, step := range steps {
		if step.write {
			if n, err := buffered.Write([]byte(step.line)); n != len(step.line) || err != nil {
				t.Fatalf("step %d: Write = %d, %v", i, n, err)
			}
		}
		if step.flush {
			buffered.Flush()
		}
		if fmt.Sprint(writes) != fmt.Sprint(step.wantWrites) {
			t.Errorf("step %d: writes %q, want %q", i, writes, step.wantWrites)
		}
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
