package auth

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

func TestLimiterWindows(t *testing.T) {
	ctx := context.Background()
	clock := bus.NewManualClock(t0)
	l := NewMemoryFailureLimiter(clock)
	for i := 0; i < FailuresPerClient-1; i++ {
		_ = l.Failed(ctx, "c1", fmt.Sprintf("10.0.0.%d:1", i))
	}
	if w, _ := l.Blocked(ctx, "c1", "10.9.9.9:1"); w != 0 {
		t.Fatalf("blocked after %d failures", FailuresPerClient-1)
	}
	// A failure after the window ended starts a new one: not blocked.
	clock.Advance(time.Minute)
	_ = l.Failed(ctx, "c1", "10.0.0.1:1")
	if w, _ := l.Blocked(ctx, "c1", "10.9.9.9:1"); w != 0 {
		t.Fatal("failures of an ended window still count")
	}
	// The sweep dropped the ended windows.
	if len(l.addrs) != 1 || len(l.clients) != 1 {
		t.Fatalf("tables hold %d clients, %d addresses after the sweep", len(l.clients), len(l.addrs))
	}
}

// TestLimiterSlidingWindow: attempts are blocked while the minute before
// holds the limit's failures, wherever a window would have begun: 19
// failures just before the minute after a key's first failure ends and
// two just after it block the key at the second, until the 19 are a
// minute old; and a key keeps no more times than its limit.
func TestLimiterSlidingWindow(t *testing.T) {
	ctx := context.Background()
	clock := bus.NewManualClock(t0)
	l := NewMemoryFailureLimiter(clock)
	blocked := func() time.Duration {
		t.Helper()
		w, _ := l.Blocked(ctx, "c1", "192.0.2.1:1")
		return w
	}
	fail := func(n int) {
		for i := range n {
			_ = l.Failed(ctx, "c1", fmt.Sprintf("10.0.0.%d:1", i))
		}
	}
	fail(1)
	clock.Advance(59*time.Second + 500*time.Millisecond)
	fail(FailuresPerClient - 2)
	if w := blocked(); w != 0 {
		t.Fatalf("blocked %v after %d failures", w, FailuresPerClient-1)
	}
	clock.Advance(700 * time.Millisecond) // the first failure is a minute old
	fail(1)
	if w := blocked(); w != 0 {
		t.Fatalf("blocked %v with %d failures in the minute", w, FailuresPerClient-1)
	}
	fail(1)
	if w := blocked(); w != time.Minute {
		t.Fatalf("blocked %v with %d failures in the minute, want 1m (59.3s, rounded up)", w, FailuresPerClient)
	}
	clock.Advance(59*time.Second + 300*time.Millisecond - time.Millisecond)
	if w := blocked(); w != time.Second {
		t.Fatalf("1ms before the oldest of them is a minute old: blocked %v, want 1s", w)
	}
	clock.Advance(time.Millisecond)
	if w := blocked(); w != 0 {
		t.Fatalf("once it is a minute old: blocked %v", w)
	}
	// Past its limit a key keeps only the latest times.
	fail(5 * FailuresPerClient)
	if f := l.clients["c1"]; len(f) != FailuresPerClient || cap(f) > FailuresPerClient {
		t.Fatalf("a key keeps %d times in room for %d, want %d in at most as much", len(f), cap(f), FailuresPerClient)
	}
}

func TestLimiterBounded(t *testing.T) {
	ctx := context.Background()
	clock := bus.NewManualClock(t0)
	l := NewMemoryFailureLimiter(clock)
	for i := 0; i < maxLimiterKeys+10; i++ {
		_ = l.Failed(ctx, fmt.Sprintf("c%d", i), fmt.Sprintf("10.%d.%d.%d:1", i>>16&255, i>>8&255, i&255))
	}
	if len(l.clients) > maxLimiterKeys || len(l.addrs) > maxLimiterKeys {
		t.Fatalf("tables grew to %d, %d", len(l.clients), len(l.addrs))
	}
	// Once the windows end the tables empty out on the next failure.
	clock.Advance(time.Minute)
	_ = l.Failed(ctx, "late", "192.0.2.1:1")
	if len(l.clients) != 1 || len(l.addrs) != 1 {
		t.Fatalf("tables hold %d, %d after the windows ended", len(l.clients), len(l.addrs))
	}
}

// TestLimiterKey: plain text of at most MaxLimiterKey bytes is its own key;
// anything else gets a key of bounded size, plain text, that no connection
// id can be, distinct for distinct inputs.
func TestLimiterKey(t *testing.T) {
	long := strings.Repeat("c", MaxLimiterKey)
	for _, c := range []struct{ in, want string }{
		{"c1", "c1"},
		{"portal:bob@example.com", "portal:bob@example.com"},
		{long, long},
		{"c\x00", `"c\x00"`},
		{"\xff", `"\xff"`},
	} {
		if got := LimiterKey(c.in); got != c.want {
			t.Errorf("LimiterKey(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	seen := map[string]string{}
	for _, in := range []string{long + "c", long + "d", strings.Repeat("\x00", 100), strings.Repeat("\x00", 101), strings.Repeat("é\x01", 1<<16)} {
		k := LimiterKey(in)
		if !strings.HasPrefix(k, "sha256:") || len(k) != len("sha256:")+64 || !bus.PlainText(k) {
			t.Errorf("LimiterKey of %d bytes = %q, want a sha256: digest", len(in), k)
		}
		if prev, dup := seen[k]; dup {
			t.Errorf("inputs of %d and %d bytes share the key %s", len(prev), len(in), k)
		}
		seen[k] = in
	}
	// The memory limiter counts a long id under its key: 20 failures block
	// it, and another long id with the same first bytes is not blocked.
	ctx := context.Background()
	l := NewMemoryFailureLimiter(bus.NewManualClock(t0))
	for i := range FailuresPerClient {
		_ = l.Failed(ctx, long+"c", fmt.Sprintf("10.0.%d.1:1", i))
	}
	if w, _ := l.Blocked(ctx, long+"c", "10.9.9.9:1"); w == 0 {
		t.Fatal("a long client id was not blocked after its failures")
	}
	if w, _ := l.Blocked(ctx, long+"d", "10.9.9.9:1"); w != 0 {
		t.Fatal("another long client id was blocked")
	}
	for k := range l.clients {
		if len(k) > MaxLimiterKey {
			t.Fatalf("the limiter keeps a key of %d bytes", len(k))
		}
	}
}
