package auth

import (
	"context"
	"fmt"
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
