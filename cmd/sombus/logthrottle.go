package main

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// logRepeatEvery is how often a node logs a warning or an error of the same
// message at most.
const logRepeatEvery = 10 * time.Second

// maxThrottledMessages bounds the messages a throttle remembers.
const maxThrottledMessages = 1024

// throttle is a slog.Handler that passes warnings and errors of one message
// at most once every logRepeatEvery: during an outage every request and
// every round of background work meets the same failure, and the log must
// say so, not repeat it thousands of times a second. The line that passes
// after a quiet spell carries repeated=N, the lines of its message dropped
// since the last one passed. A message that does not come back is not left
// uncounted: once an interval has passed since the last line of it that
// passed, the last one dropped is written, with repeated=N for the N
// dropped before it (if any), so every line is either written or counted.
// Lines below Warn all pass.
type throttle struct {
	next  slog.Handler
	every time.Duration
	state *throttleState
}

type throttleState struct {
	mu   sync.Mutex
	seen map[string]*throttled
}

// throttled is what a throttle knows of one message.
type throttled struct {
	at      time.Time // when a line of it last passed
	dropped int       // lines dropped since
	// last is the last line dropped and h the handler it came through;
	// flushing: a flush of them is scheduled (see flush).
	last     slog.Record
	h        slog.Handler
	flushing bool
}

func newThrottle(next slog.Handler, every time.Duration) *throttle {
	return &throttle{next: next, every: every, state: &throttleState{seen: map[string]*throttled{}}}
}

func (t *throttle) Enabled(ctx context.Context, l slog.Level) bool { return t.next.Enabled(ctx, l) }

func (t *throttle) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return t.next.Handle(ctx, r)
	}
	key := r.Level.String() + "\x00" + r.Message
	now := r.Time
	if now.IsZero() {
		now = time.Now()
	}
	st := t.state
	st.mu.Lock()
	s := st.seen[key]
	if s != nil && now.Sub(s.at) < t.every && !now.Before(s.at) {
		s.dropped++
		s.last, s.h = r, t.next
		if !s.flushing {
			s.flushing = true
			wait := min(max(s.at.Add(t.every).Sub(now), 0), t.every)
			time.AfterFunc(wait, func() { t.flush(key, s) })
		}
		st.mu.Unlock()
		return nil
	}
	dropped := 0
	if s != nil {
		dropped = s.dropped
	}
	if s == nil && len(st.seen) >= maxThrottledMessages {
		clear(st.seen) // messages are a fixed set in practice; this bounds the worst case
	}
	st.seen[key] = &throttled{at: now}
	st.mu.Unlock()
	if dropped > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("repeated", dropped))
	}
	return t.next.Handle(ctx, r)
}

// flush writes the last dropped line of message key, unless a line of it
// passed since (and counted the dropped ones): the interval is over and
// no later line may come to say how many were dropped.
func (t *throttle) flush(key string, s *throttled) {
	st := t.state
	st.mu.Lock()
	s.flushing = false
	n := s.dropped
	if n == 0 || st.seen[key] != s {
		st.mu.Unlock()
		return
	}
	r, h := s.last.Clone(), s.h
	// The interval starts again now, as if the line passed now: it is
	// written now, whatever time it carries.
	s.dropped, s.at, s.last, s.h = 0, time.Now(), slog.Record{}, nil
	st.mu.Unlock()
	if n > 1 {
		r.AddAttrs(slog.Int("repeated", n-1))
	}
	_ = h.Handle(context.Background(), r)
}

func (t *throttle) WithAttrs(as []slog.Attr) slog.Handler {
	return &throttle{next: t.next.WithAttrs(as), every: t.every, state: t.state}
}

func (t *throttle) WithGroup(name string) slog.Handler {
	return &throttle{next: t.next.WithGroup(name), every: t.every, state: t.state}
}
