package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestThrottleRepeatedWarnings: a warning or an error of one message passes
// at most once every interval, the next one passed says how many were
// dropped, other messages and lower levels are not held back, and loggers
// made With attributes share the count.
func TestThrottleRepeatedWarnings(t *testing.T) {
	var out bytes.Buffer
	h := newThrottle(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}), 10*time.Second)
	log := slog.New(h)
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	emit := func(at time.Duration, level slog.Level, msg string, l *slog.Logger) {
		r := slog.NewRecord(t0.Add(at), level, msg, 0)
		_ = l.Handler().Handle(context.Background(), r)
	}
	for i := range 1000 {
		emit(time.Duration(i)*time.Millisecond, slog.LevelWarn, "store unavailable", log)
		emit(time.Duration(i)*time.Millisecond, slog.LevelInfo, "request", log)
	}
	emit(time.Second, slog.LevelError, "store unavailable", log) // another level: its own count
	emit(2*time.Second, slog.LevelWarn, "other", log)
	emit(3*time.Second, slog.LevelWarn, "store unavailable", log.With("queue_id", "c1"))
	emit(11*time.Second, slog.LevelWarn, "store unavailable", log)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	count := func(s string) int {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, s) {
				n++
			}
		}
		return n
	}
	if n := count(`level=WARN msg="store unavailable"`); n != 2 {
		t.Fatalf("%d warnings of one message over 11 s, want 2:\n%s", n, out.String())
	}
	if !strings.Contains(lines[len(lines)-1], "repeated=1000") {
		t.Fatalf("the warning after the quiet spell does not count the 1000 dropped: %s", lines[len(lines)-1])
	}
	if n := count("msg=request"); n != 1000 {
		t.Fatalf("%d info lines passed, want every one (1000)", n)
	}
	if count(`level=ERROR msg="store unavailable"`) != 1 || count("msg=other") != 1 {
		t.Fatalf("another level or message was held back:\n%s", out.String())
	}
}

// TestThrottleWritesTheLastDroppedLine: a message that stops recurring is
// not left uncounted: once the interval is over, the last line dropped is
// written with the count of those dropped before it, so that the lines
// written and their repeated counts add up to every line logged.
func TestThrottleWritesTheLastDroppedLine(t *testing.T) {
	var mu sync.Mutex
	var out bytes.Buffer
	h := newThrottle(slog.NewTextHandler(lockedWriter{&mu, &out}, nil), 50*time.Millisecond)
	log := slog.New(h)
	for i := range 5 {
		log.Warn("store unavailable", "i", i)
	}
	lines := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Split(strings.TrimSpace(out.String()), "\n")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(lines()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := lines()
	if len(got) != 2 || !strings.Contains(got[0], "i=0") || !strings.Contains(got[1], "i=4") || !strings.Contains(got[1], "repeated=3") {
		t.Fatalf("want the first line, then the last with repeated=3 once the interval is over; got:\n%s", strings.Join(got, "\n"))
	}
	// One more within the interval after that: written alone, later.
	log.Warn("store unavailable", "i", 5)
	time.Sleep(200 * time.Millisecond)
	got = lines()
	if len(got) != 3 || !strings.Contains(got[2], "i=5") || strings.Contains(got[2], "repeated") {
		t.Fatalf("want the sixth line written alone; got:\n%s", strings.Join(got, "\n"))
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestThrottleIntervalStartsAtTheFlush: the last dropped line, once
// written, starts the interval again, so a line right after it is dropped
// (and counted) rather than written too.
func TestThrottleIntervalStartsAtTheFlush(t *testing.T) {
	var mu sync.Mutex
	var out bytes.Buffer
	log := slog.New(newThrottle(slog.NewTextHandler(lockedWriter{&mu, &out}, nil), 400*time.Millisecond))
	lines := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Split(strings.TrimSpace(out.String()), "\n")
	}
	log.Warn("store unavailable", "i", 0) // written
	log.Warn("store unavailable", "i", 1) // dropped, written at the end of the interval
	for deadline := time.Now().Add(5 * time.Second); len(lines()) < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	log.Warn("store unavailable", "i", 2) // right after that: held back
	time.Sleep(50 * time.Millisecond)
	if got := lines(); len(got) != 2 || !strings.Contains(got[1], "i=1") {
		t.Fatalf("want the first line and the flushed second, the third held back; got:\n%s", strings.Join(got, "\n"))
	}
}
