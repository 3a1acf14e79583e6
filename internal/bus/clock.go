package bus

import (
	"sync"
	"time"
)

// Clock is where the bus reads the time. Production uses SystemClock; tests
// use a ManualClock and move it forward.
type Clock interface {
	Now() time.Time
}

// SystemClock reads the machine's clock, in UTC, truncated to milliseconds
// (the precision of every time the API shows).
type SystemClock struct{}

// Now returns the current UTC time in milliseconds.
func (SystemClock) Now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// ManualClock is a Clock that moves only when told to. Safe for concurrent use.
type ManualClock struct {
	mu     sync.Mutex
	t      time.Time
	onMove []func()
}

// OnMove calls f after every Advance and Set (a service wakes its long
// polls, whose timers run on real time, to look again).
func (c *ManualClock) OnMove(f func()) {
	c.mu.Lock()
	c.onMove = append(c.onMove, f)
	c.mu.Unlock()
}

// moved calls the OnMove functions.
func (c *ManualClock) moved() {
	c.mu.Lock()
	fs := c.onMove
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// NewManualClock starts a manual clock at t.
func NewManualClock(t time.Time) *ManualClock {
	return &ManualClock{t: t.UTC().Truncate(time.Millisecond)}
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
	c.moved()
}

// Set moves the clock to t.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t.UTC().Truncate(time.Millisecond)
	c.mu.Unlock()
	c.moved()
}
