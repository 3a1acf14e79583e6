package servertest

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

// ProcessLog is the standard output or error of a child process (a
// `sombus serve` the test started): each line goes to t.Log, prefixed by
// the process's name, until Stop (a test must not log after it ended), and
// the first MiB is kept for Text, to quote in a failure message.
type ProcessLog struct {
	t    testing.TB
	name string
	mu   sync.Mutex
	done bool
	buf  bytes.Buffer // a partial last line
	all  strings.Builder
}

// NewProcessLog is the log of the process called name.
func NewProcessLog(t testing.TB, name string) *ProcessLog {
	return &ProcessLog{t: t, name: name}
}

// Write takes the process's output.
func (w *ProcessLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line) // keep the partial line
			break
		}
		if w.all.Len() < 1<<20 {
			w.all.WriteString(line)
		}
		if !w.done {
			w.t.Logf("[%s] %s", w.name, strings.TrimRight(line, "\n"))
		}
	}
	return len(p), nil
}

// Stop ends the lines to t.Log; Text still grows.
func (w *ProcessLog) Stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// Text is everything the process wrote so far (up to 1 MiB).
func (w *ProcessLog) Text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}
