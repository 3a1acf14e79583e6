package limits_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/limits"
)

var ctx = context.Background()

// t0 is a morning, well inside a UTC day.
var t0 = time.Date(2026, 9, 25, 10, 15, 2, 114_000_000, time.UTC)

func setup(t *testing.T) (*limits.Memory, *bus.ManualClock) {
	t.Helper()
	return limits.NewMemory(limits.Options{}), bus.NewManualClock(t0)
}

func allow(t *testing.T, l limits.Limiter, key string, tier limits.Tier, now time.Time) limits.Decision {
	t.Helper()
	d, err := l.Allow(ctx, key, tier, now)
	if err != nil {
		t.Fatalf("Allow: %v", err)
	}
	return d
}

func headers(d limits.Decision) http.Header {
	h := http.Header{}
	d.SetHeaders(h)
	return h
}

func wantHeaders(t *testing.T, d limits.Decision, want map[string]string) {
	t.Helper()
	h := headers(d)
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if _, ok := want["Retry-After"]; !ok && h.Get("Retry-After") != "" {
		t.Errorf("Retry-After = %q on an allowed answer", h.Get("Retry-After"))
	}
}

func TestBurstThenRefused(t *testing.T) {
	t.Parallel()
	m, clock := setup(t)
	std := limits.Standard()
	now := clock.Now()

	for i := 1; i <= 40; i++ {
		d := allow(t, m, "c1", std, now)
		if !d.Allowed {
			t.Fatalf("request %d refused: %+v", i, d)
		}
		if d.Limit != 40 || d.Remaining != int64(40-i) {
			t.Fatalf("request %d: limit %d remaining %d, want 40 and %d", i, d.Limit, d.Remaining, 40-i)
		}
		// Reset: seconds until full again = i × 50ms, rounded up.
		if want := int64((time.Duration(i)*50*time.Millisecond + time.Second - 1) / time.Second); d.Reset != want {
			t.Fatalf("request %d: reset %d, want %d", i, d.Reset, want)
		}
		if i == 1 {
			wantHeaders(t, d, map[string]string{"RateLimit-Limit": "40", "RateLimit-Remaining": "39", "RateLimit-Reset": "1"})
		}
		if i == 40 {
			wantHeaders(t, d, map[string]string{"RateLimit-Limit": "40", "RateLimit-Remaining": "0", "RateLimit-Reset": "2"})
		}
	}

	d := allow(t, m, "c1", std, now)
	if d.Allowed || d.Rule != bus.RuleRateLimited || d.RetryAfter != 50*time.Millisecond {
		t.Fatalf("41st: %+v, want refused rate.limited after 50ms", d)
	}
	wantHeaders(t, d, map[string]string{
		"RateLimit-Limit": "40", "RateLimit-Remaining": "0", "RateLimit-Reset": "2", "Retry-After": "1",
	})
	e := d.Err()
	if e == nil || e.Status != http.StatusTooManyRequests || e.Rule() != bus.RuleRateLimited || e.RetryAfter != 50*time.Millisecond {
		t.Fatalf("Err() = %#v", e)
	}
	if want := "Rate limit of 20 requests a second (bursts of 40) exceeded for this connection; retry after 1s."; e.Violations[0].Message != want {
		t.Errorf("message %q, want %q", e.Violations[0].Message, want)
	}
	if allow(t, m, "c1", std, now).Allowed {
		t.Fatal("refused requests must keep being refused in the same instant")
	}

	// A refused request took nothing: 50ms later exactly one is allowed.
	clock.Advance(49 * time.Millisecond)
	if d := allow(t, m, "c1", std, clock.Now()); d.Allowed || d.RetryAfter != time.Millisecond {
		t.Fatalf("at 49ms: %+v, want refused with 1ms to wait", d)
	}
	clock.Advance(time.Millisecond)
	if d := allow(t, m, "c1", std, clock.Now()); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("at 50ms: %+v, want allowed with 0 remaining", d)
	}
	if d := allow(t, m, "c1", std, clock.Now()); d.Allowed {
		t.Fatalf("second at 50ms allowed: %+v", d)
	}
}

func TestJustUnderTheLimitNeverRefused(t *testing.T) {
	t.Parallel()
	m, clock := setup(t)
	// Steady 20/s for a minute after a full burst of 40: never refused,
	// since each 50ms brings back the token the request takes.
	for range 40 {
		if !allow(t, m, "c", limits.Standard(), clock.Now()).Allowed {
			t.Fatal("burst of 40 refused")
		}
	}
	for i := range 20 * 60 {
		clock.Advance(50 * time.Millisecond)
		if d := allow(t, m, "c", limits.Standard(), clock.Now()); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("steady request %d: %+v", i, d)
		}
	}
}

func TestRefill(t *testing.T) {
	t.Parallel()
	m, clock := setup(t)
	std := limits.Standard()
	for range 40 {
		allow(t, m, "c", std, clock.Now())
	}
	clock.Advance(500 * time.Millisecond) // 10 tokens back
	d := allow(t, m, "c", std, clock.Now())
	if !d.Allowed || d.Remaining != 9 || d.Reset != 2 {
		t.Fatalf("after 500ms: %+v, want allowed, 9 remaining, reset 2", d)
	}
	// Deficit now 31 tokens = 1.55s: reset rounds up to 2.
	clock.Advance(1550 * time.Millisecond)
	d = allow(t, m, "c", std, clock.Now())
	if !d.Allowed || d.Remaining != 39 || d.Reset != 1 {
		t.Fatalf("after refill: %+v, want allowed, 39 remaining, reset 1", d)
	}
	// A long idle never gives more than the burst.
	clock.Advance(time.Hour)
	n := 0
	for allow(t, m, "c", std, clock.Now()).Allowed {
		n++
	}
	if n != 40 {
		t.Fatalf("after an hour idle %d allowed, want 40", n)
	}
}

func TestDailyQuota(t *testing.T) {
	t.Parallel()
	m := limits.NewMemory(limits.Options{})
	std := limits.Standard()
	midnight := time.Date(2026, 9, 25, 0, 0, 0, 0, time.UTC)
	now := midnight
	var d limits.Decision
	for i := 1; i <= 100_000; i++ {
		d = allow(t, m, "c", std, now)
		if !d.Allowed {
			t.Fatalf("request %d refused: %+v", i, d)
		}
		// At a steady 20/s the bucket holds 39 tokens: its headers are shown
		// until fewer requests than that are left of the day.
		if i == 99_961 && (d.Limit != 40 || d.Remaining != 39 || d.QuotaRemaining != 39) {
			t.Fatalf("request %d: %+v, want the bucket's headers and 39 left today", i, d)
		}
		if i == 99_962 && (d.Limit != 100_000 || d.Remaining != 38 || d.Reset != int64((midnight.Add(24*time.Hour).Sub(now)+time.Second-1)/time.Second)) {
			t.Fatalf("request %d: %+v, want the quota's headers with 38 left", i, d)
		}
		now = now.Add(50 * time.Millisecond)
	}
	// The last of the day's allowance: the quota is now the tighter limit.
	if d.Limit != 100_000 || d.Remaining != 0 || d.QuotaRemaining != 0 {
		t.Fatalf("100,000th: %+v, want quota headers with 0 remaining", d)
	}

	now = now.Add(time.Minute) // bucket full again: only the quota refuses
	d = allow(t, m, "c", std, now)
	wait := midnight.Add(24 * time.Hour).Sub(now)
	if d.Allowed || d.Rule != bus.RuleQuotaExceeded || d.RetryAfter != wait {
		t.Fatalf("100,001st: %+v, want quota.exceeded with %v to wait", d, wait)
	}
	secs := fmt.Sprint(int64((wait + time.Second - 1) / time.Second))
	wantHeaders(t, d, map[string]string{
		"RateLimit-Limit": "100000", "RateLimit-Remaining": "0", "RateLimit-Reset": secs, "Retry-After": secs,
	})
	e := d.Err()
	if e.Status != 429 || e.Rule() != bus.RuleQuotaExceeded || e.RetryAfter != wait {
		t.Fatalf("Err() = %#v", e)
	}
	want := "Daily quota of 100,000 requests exceeded for this connection; it resets at 00:00 UTC, retry after " +
		(((wait + time.Second - 1) / time.Second) * time.Second).String() + "."
	if e.Violations[0].Message != want {
		t.Errorf("message %q, want %q", e.Violations[0].Message, want)
	}
	u, err := m.Usage(ctx, "c", std, now)
	if err != nil || u != (limits.Usage{Day: "2026-09-25", RequestsToday: 100_000, DailyQuota: 100_000, Remaining: 0, ResetsAt: midnight.Add(24 * time.Hour)}) {
		t.Fatalf("Usage = %+v, %v", u, err)
	}

	// One millisecond before midnight: still refused. At 00:00 UTC: a new day.
	last := midnight.Add(24*time.Hour - time.Millisecond)
	if d := allow(t, m, "c", std, last); d.Allowed || d.RetryAfter != time.Millisecond {
		t.Fatalf("23:59:59.999: %+v", d)
	}
	next := midnight.Add(24 * time.Hour)
	if d := allow(t, m, "c", std, next); !d.Allowed || d.QuotaRemaining != 99_999 || d.Limit != 40 {
		t.Fatalf("at midnight: %+v", d)
	}
	u, _ = m.Usage(ctx, "c", std, next)
	if u.Day != "2026-09-26" || u.RequestsToday != 1 || u.Remaining != 99_999 {
		t.Fatalf("Usage after midnight = %+v", u)
	}
}

func TestQuotaAndRateBothRefuse(t *testing.T) {
	t.Parallel()
	tier := limits.Tier{Name: "tiny", RatePerSecond: 1, Burst: 2, DailyQuota: 2}
	now := time.Date(2026, 9, 25, 23, 59, 59, 900_000_000, time.UTC)
	var s limits.State
	var d limits.Decision
	for range 2 {
		s, d = limits.Take(s, tier, now)
	}
	before := s
	s, d = limits.Take(s, tier, now)
	// The quota resets in 100ms but the bucket needs 1s: the true wait is 1s.
	if d.Allowed || d.Rule != bus.RuleQuotaExceeded || d.RetryAfter != time.Second {
		t.Fatalf("%+v, want quota.exceeded with 1s to wait", d)
	}
	if s != before {
		t.Fatalf("a refusal changed the state: %+v → %+v", before, s)
	}
}

func TestTierChange(t *testing.T) {
	t.Parallel()
	m, clock := setup(t)
	std := limits.Standard()
	gold := limits.Tier{Name: "gold", RatePerSecond: 100, Burst: 200, DailyQuota: 1_000_000}
	now := clock.Now()

	for range 30 {
		allow(t, m, "c", std, now)
	}
	// Upgrade: the 30 tokens used carry over; 170 of gold's 200 are left.
	d := allow(t, m, "c", gold, now)
	if !d.Allowed || d.Limit != 200 || d.Remaining != 169 || d.QuotaRemaining != 1_000_000-31 {
		t.Fatalf("first on gold: %+v, want 169 left of 200", d)
	}
	n := 1
	for allow(t, m, "c", gold, now).Allowed {
		n++
	}
	if n != 170 {
		t.Fatalf("%d allowed on gold, want 170", n)
	}
	// Downgrade with 200 tokens used: clamped to standard's burst, so the
	// bucket is empty and refills at 20/s.
	d = allow(t, m, "c", std, now)
	if d.Allowed || d.Rule != bus.RuleRateLimited || d.RetryAfter != 50*time.Millisecond || d.Limit != 40 || d.Reset != 2 {
		t.Fatalf("first on standard: %+v", d)
	}
	clock.Advance(100 * time.Millisecond)
	if d := allow(t, m, "c", std, clock.Now()); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("100ms later on standard: %+v, want allowed with 1 left", d)
	}
	// The day's count carries over and meets the new tier's quota at once.
	small := limits.Tier{Name: "small", RatePerSecond: 1000, Burst: 1000, DailyQuota: 201}
	if d := allow(t, m, "c", small, clock.Now()); d.Allowed || d.Rule != bus.RuleQuotaExceeded {
		t.Fatalf("on a quota of 201 after 201 requests: %+v", d)
	}
	// A full bucket is full on any tier.
	clock.Advance(time.Hour)
	n = 0
	for allow(t, m, "c", gold, clock.Now()).Allowed {
		n++
	}
	if n != 200 {
		t.Fatalf("full bucket on gold: %d allowed, want 200", n)
	}
}

func TestKeysAreIndependent(t *testing.T) {
	t.Parallel()
	m, clock := setup(t)
	for allow(t, m, "limited", limits.Standard(), clock.Now()).Allowed {
	}
	for i := range 40 {
		if d := allow(t, m, "other", limits.Standard(), clock.Now()); !d.Allowed || d.Remaining != int64(39-i) {
			t.Fatalf("other key request %d: %+v", i, d)
		}
	}
	u, _ := m.Usage(ctx, "limited", limits.Standard(), clock.Now())
	if u.RequestsToday != 40 {
		t.Fatalf("limited key counted %d, want 40 (refusals do not count)", u.RequestsToday)
	}
}

// A key held busy (its entry locked in a long loop by 8 goroutines) does
// not stop other keys: they keep being decided while it is hammered.
func TestLimitedKeyDoesNotSlowOthers(t *testing.T) {
	t.Parallel()
	m, clock := setup(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					m.Allow(ctx, "hot", limits.Standard(), clock.Now())
				}
			}
		})
	}
	for i := range 1000 {
		if d := allow(t, m, fmt.Sprint("cold-", i), limits.Standard(), clock.Now()); !d.Allowed {
			t.Fatalf("cold key %d refused", i)
		}
	}
	close(stop)
	wg.Wait()
}

func TestUnlimited(t *testing.T) {
	t.Parallel()
	m, clock := setup(t)
	for i := range 200_000 {
		d := allow(t, m, "load", limits.Unlimited(), clock.Now())
		if !d.Allowed || d.Err() != nil {
			t.Fatalf("request %d refused: %+v", i, d)
		}
		if h := headers(d); i == 0 && (h.Get("RateLimit-Limit") != "1000000000" || h.Get("RateLimit-Remaining") != "1000000000" || h.Get("RateLimit-Reset") != "0") {
			t.Fatalf("unlimited headers: %v", h)
		}
	}
	u, _ := m.Usage(ctx, "load", limits.Unlimited(), clock.Now())
	if !u.Unlimited || u.Remaining != -1 || u.RequestsToday != 200_000 {
		t.Fatalf("Usage = %+v", u)
	}
}

func TestConcurrentAllowFrozenTime(t *testing.T) {
	t.Parallel()
	m, clock := setup(t)
	now := clock.Now()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 50 {
				d, err := m.Allow(ctx, "c", limits.Standard(), now)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if allowed.Load() != 40 {
		t.Fatalf("%d allowed from 16 goroutines, want exactly 40", allowed.Load())
	}
}

func TestMemoryStaysBounded(t *testing.T) {
	t.Parallel()
	m := limits.NewMemory(limits.Options{Shards: 4, SweepEvery: -1})
	now := t0
	for i := range 1000 {
		allow(t, m, fmt.Sprint("k", i), limits.Standard(), now)
	}
	if n := m.Sweep(now.Add(time.Hour)); n != 0 || m.Len() != 1000 {
		t.Fatalf("same day: swept %d, %d left; today's counts must be kept", n, m.Len())
	}
	tomorrow := dayStart(now).Add(24 * time.Hour)
	if n := m.Sweep(tomorrow); n != 1000 || m.Len() != 0 {
		t.Fatalf("next day: swept %d, %d left", n, m.Len())
	}
	// A key active right now is kept even on a later day if its bucket is not full.
	allow(t, m, "busy", limits.Standard(), tomorrow)
	if m.Sweep(tomorrow.Add(24*time.Hour-time.Millisecond)) != 0 {
		t.Fatal("today's key swept")
	}

	// Automatic sweeps as time passes in Allow.
	auto := limits.NewMemory(limits.Options{Shards: 1, SweepEvery: time.Minute})
	for i := range 100 {
		allow(t, auto, fmt.Sprint("k", i), limits.Standard(), now)
	}
	allow(t, auto, "late", limits.Standard(), tomorrow)
	if auto.Len() != 1 {
		t.Fatalf("after the automatic sweep %d keys kept, want 1", auto.Len())
	}
	// A swept key starts again from a full bucket and a fresh day.
	if d := allow(t, auto, "k1", limits.Standard(), tomorrow); !d.Allowed || d.Remaining != 39 || d.QuotaRemaining != 99_999 {
		t.Fatalf("swept key: %+v", d)
	}
}

func TestSweepRacesAllow(t *testing.T) {
	t.Parallel()
	// Sweeps running while keys are decided must never lose a counted request.
	m := limits.NewMemory(limits.Options{Shards: 1, SweepEvery: -1})
	tier := limits.Tier{Name: "wide", RatePerSecond: 1e6, Burst: 1e6, DailyQuota: 1e12}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				m.Sweep(t0)
			}
		}
	})
	var workers sync.WaitGroup
	for g := range 8 {
		workers.Go(func() {
			for range 500 {
				m.Allow(ctx, fmt.Sprint("k", g), tier, t0)
			}
		})
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	for g := range 8 {
		u, _ := m.Usage(ctx, fmt.Sprint("k", g), tier, t0)
		if u.RequestsToday != 500 {
			t.Fatalf("k%d counted %d, want 500", g, u.RequestsToday)
		}
	}
}

func TestAllowRefusesBadTier(t *testing.T) {
	t.Parallel()
	m, clock := setup(t)
	for _, tier := range []limits.Tier{
		{},
		{Name: "x", RatePerSecond: 20},
		{Name: "x", RatePerSecond: -1, Burst: 4, DailyQuota: 1},
		{Name: "x", RatePerSecond: 1, Burst: 4, DailyQuota: -5},
	} {
		if _, err := m.Allow(ctx, "c", tier, clock.Now()); err == nil {
			t.Errorf("tier %+v accepted", tier)
		}
	}
}

func TestTakeFractionalRate(t *testing.T) {
	t.Parallel()
	// 3 a second: the interval is 333,333,333ns; waiting RetryAfter always
	// gives a token, never a second refusal.
	tier := limits.Tier{Name: "odd", RatePerSecond: 3, Burst: 1, DailyQuota: 1000}
	now := t0
	var s limits.State
	var d limits.Decision
	for i := range 100 {
		s, d = limits.Take(s, tier, now)
		if !d.Allowed {
			t.Fatalf("request %d refused right after its wait: %+v", i, d)
		}
		s, d = limits.Take(s, tier, now)
		if d.Allowed {
			t.Fatalf("request %d: two in one instant with burst 1", i)
		}
		now = now.Add(d.RetryAfter)
	}
	if e := d.Err(); !strings.Contains(e.Violations[0].Message, "3 requests a second (bursts of 1)") {
		t.Errorf("message %q", e.Violations[0].Message)
	}
	half := limits.Tier{Name: "slow", RatePerSecond: 0.5, Burst: 1, DailyQuota: 1}
	_, d = limits.Take(limits.State{}, half, now)
	_, d = limits.Take(limits.State{Bucket: limits.BucketState{Full: now.Add(2 * time.Second), Interval: 2 * time.Second}}, half, now)
	if e := d.Err(); !strings.Contains(e.Violations[0].Message, "0.5 requests a second") || !strings.Contains(e.Violations[0].Message, "retry after 2s") {
		t.Errorf("message %q", e.Violations[0].Message)
	}
}

func TestClockGoingBackNeverGivesMore(t *testing.T) {
	t.Parallel()
	std := limits.Standard()
	var s limits.State
	var d limits.Decision
	for range 40 {
		s, d = limits.Take(s, std, t0)
	}
	// An hour back: the deficit is capped at one burst, so the wait is 50ms
	// (not an hour), and the day's count is kept.
	_, d = limits.Take(s, std, t0.Add(-time.Hour))
	if d.Allowed || d.RetryAfter != 50*time.Millisecond {
		t.Fatalf("%+v", d)
	}
	u := limits.UsageOf(s, std, t0.Add(-24*time.Hour))
	if u.Day != "2026-09-25" || u.RequestsToday != 40 {
		t.Fatalf("usage a day back: %+v", u)
	}
}

// TestClockSteppedBackRecovers: after the clock steps back an hour, the
// in-process limiter refuses the first request (the bucket is taken as
// empty at the new now) and from one interval later gives the rate again,
// not a refusal for the whole hour; never more than a burst at once.
func TestClockSteppedBackRecovers(t *testing.T) {
	t.Parallel()
	l, _ := setup(t)
	std := limits.Standard()
	for range 5 {
		allow(t, l, "k", std, t0)
	}
	back := t0.Add(-time.Hour)
	if d := allow(t, l, "k", std, back); d.Allowed || d.RetryAfter != 50*time.Millisecond {
		t.Fatalf("right after the step: %+v, want refused for one interval", d)
	}
	allowed := 0
	for i := range 200 {
		if allow(t, l, "k", std, back.Add(50*time.Millisecond+time.Duration(i)*time.Millisecond)).Allowed {
			allowed++
		}
	}
	// 200 ms at 20 a second from an empty bucket: four or so.
	if allowed < 3 || allowed > 5 {
		t.Fatalf("%d allowed in the 200 ms after the step's first interval, want the rate's 4 or so", allowed)
	}
	// An old now within the tolerance (requests reaching the limiter out
	// of order) is refused and changes nothing: still nothing at back+250ms
	// beyond the rate.
	for range 3 {
		if d := allow(t, l, "k", std, back.Add(250*time.Millisecond-3*time.Second)); d.Allowed {
			t.Fatal("an old now within the tolerance was allowed")
		}
	}
}

func TestHeadersOnEveryAnswer(t *testing.T) {
	t.Parallel()
	m, clock := setup(t)
	for i := range 60 {
		d := allow(t, m, "c", limits.Standard(), clock.Now())
		h := headers(d)
		for _, k := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
			if h.Get(k) == "" {
				t.Fatalf("answer %d lacks %s", i, k)
			}
		}
		if (h.Get("Retry-After") != "") == d.Allowed {
			t.Fatalf("answer %d: allowed %v, Retry-After %q", i, d.Allowed, h.Get("Retry-After"))
		}
		clock.Advance(10 * time.Millisecond)
	}
	if got := limits.RetryAfterSeconds(0); got != 1 {
		t.Errorf("RetryAfterSeconds(0) = %d, want 1", got)
	}
	if got := limits.RetryAfterSeconds(2001 * time.Millisecond); got != 3 {
		t.Errorf("RetryAfterSeconds(2.001s) = %d, want 3", got)
	}
}

func TestTiers(t *testing.T) {
	t.Parallel()
	var zero limits.Tiers
	if got := zero.Names(); strings.Join(got, ",") != "standard,unlimited" {
		t.Fatalf("built-in names %v", got)
	}
	std, ok := zero.Get("standard")
	if !ok || std != (limits.Tier{Name: "standard", RatePerSecond: 20, Burst: 40, DailyQuota: 100_000}) {
		t.Fatalf("standard = %+v", std)
	}
	if exists, op := zero.Info("unlimited"); !exists || !op {
		t.Fatal("unlimited must exist and be operator-only")
	}
	var _ bus.TierInfo = zero.Info

	dir := t.TempDir()
	path := filepath.Join(dir, "tiers.json")
	os.WriteFile(path, []byte(`{"tiers":[
		{"name":"gold","rate_per_second":100,"burst":200,"daily_quota":1000000,"operator_only":false},
		{"name":"standard","rate_per_second":10,"burst":15,"daily_quota":5000},
		{"name":"internal","rate_per_second":1000,"burst":2000,"daily_quota":100000000,"operator_only":true}]}`), 0o600)
	ts, err := limits.LoadTiers(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ts.Names(), ","); got != "gold,internal,standard,unlimited" {
		t.Fatalf("names %s", got)
	}
	if g, _ := ts.Get("gold"); g != (limits.Tier{Name: "gold", RatePerSecond: 100, Burst: 200, DailyQuota: 1_000_000}) {
		t.Fatalf("gold = %+v", g)
	}
	if s, _ := ts.Get("standard"); s.Burst != 15 || s.RatePerSecond != 10 || s.DailyQuota != 5000 {
		t.Fatalf("standard not overridden: %+v", s)
	}
	if _, op := ts.Info("internal"); !op {
		t.Fatal("internal not operator-only")
	}
	if _, ok := ts.Get("platinum"); ok {
		t.Fatal("unknown tier found")
	}
	if _, err := limits.LoadTiers(filepath.Join(dir, "missing.json")); err == nil {
		t.Fatal("missing file accepted")
	}
}

func TestLoadTiersErrors(t *testing.T) {
	t.Parallel()
	tier := func(fields string) string { return `{"tiers":[{` + fields + `}]}` }
	const ok = `"rate_per_second":1,"burst":2,"daily_quota":3`
	for _, c := range []struct{ json, want string }{
		{`{"tiers":[`, "malformed JSON"},
		{`{"tiers":[]} {}`, "data after"},
		{`{"tier":[]}`, `unknown field "tier"`},
		{tier(`"name":"gold",` + ok + `,"colour":"gold"`), `unknown field "colour"`},
		{tier(ok), "tiers[0]: name is required"},
		{tier(`"name":"Gold!",` + ok), "name must be"},
		{tier(`"name":"unlimited",` + ok), "unlimited is built in"},
		{tier(`"name":"standard",` + ok + `,"operator_only":true`), "operator_only cannot be set on standard"},
		{`{"tiers":[{"name":"a",` + ok + `},{"name":"a",` + ok + `}]}`, `tiers[1] ("a"): name is defined twice`},
		{tier(`"name":"a","burst":2,"daily_quota":3`), `tiers[0] ("a"): rate_per_second is required`},
		{tier(`"name":"a","rate_per_second":1,"daily_quota":3`), "burst is required"},
		{tier(`"name":"a","rate_per_second":1,"burst":2`), "daily_quota is required"},
		{tier(`"name":"a","rate_per_second":0,"burst":2,"daily_quota":3`), "rate_per_second must be between 0.001 and 1e+06, got 0"},
		{tier(`"name":"a","rate_per_second":2e6,"burst":2,"daily_quota":3`), "rate_per_second must be between 0.001 and 1e+06, got 2e+06"},
		{tier(`"name":"a","rate_per_second":1,"burst":0,"daily_quota":3`), "burst must be between 1 and 1000000, got 0"},
		{tier(`"name":"a","rate_per_second":1,"burst":2,"daily_quota":-1`), "daily_quota must be between 1 and 1000000000000, got -1"},
		{tier(`"name":"a","rate_per_second":1,"burst":2.5,"daily_quota":3`), "malformed JSON"},
		// Names are exact, null is no value, a name is given once.
		{tier(`"name":"a",` + ok + `,"BURST":1000000`), `member "tiers[0].BURST" differs from "tiers[0].burst" only by case`},
		{tier(`"Name":"a",` + ok), `member "tiers[0].Name" differs from "tiers[0].name"`},
		{`{"TIERS":[]}`, `member "TIERS" differs from "tiers"`},
		{tier(`"name":"a",` + ok + `,"operator_onl\u0059":true`), `member "tiers[0].operator_onlY" differs from "tiers[0].operator_only"`},
		{tier(`"name":"a","rate_per_second":1,"burst":null,"daily_quota":3`), "tiers[0].burst must be an integer, not null"},
		{tier(`"name":"a",` + ok + `,"burst":5`), `"burst" given twice`},
		{tier(`"name":"a","rate_per_second":"fast","burst":2,"daily_quota":3`), "malformed JSON"},
	} {
		_, err := limits.ParseTiers([]byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.json, err, c.want)
		}
	}
}

// TestTierOperatorOnlyNull: a tier's operator_only null is false, as files
// written for earlier versions may have it.
func TestTierOperatorOnlyNull(t *testing.T) {
	t.Parallel()
	ts, err := limits.ParseTiers([]byte(`{"tiers":[{"name":"gold","rate_per_second":1,"burst":2,"daily_quota":3,"operator_only":null}]}`))
	if err != nil {
		t.Fatalf("operator_only null: %v", err)
	}
	if _, operatorOnly := ts.Info("gold"); operatorOnly {
		t.Error("operator_only null made the tier operator-only")
	}
}

func TestLongPollGate(t *testing.T) {
	t.Parallel()
	var g limits.LongPollGate // the zero value works
	var releases []func()
	for i := range 10 {
		rel, ok := g.Acquire("c", 10)
		if !ok {
			t.Fatalf("poll %d refused", i)
		}
		releases = append(releases, rel)
	}
	if _, ok := g.Acquire("c", 10); ok {
		t.Fatal("11th poll allowed")
	}
	if _, ok := g.Acquire("other", 10); !ok {
		t.Fatal("another connection refused")
	}
	releases[0]()
	releases[0]() // a second release does nothing
	if g.Active("c") != 9 {
		t.Fatalf("active %d, want 9", g.Active("c"))
	}
	rel, ok := g.Acquire("c", 10)
	if !ok {
		t.Fatal("a freed place not reusable")
	}
	rel()
	for _, r := range releases[1:] {
		r()
	}
	if g.Active("c") != 0 {
		t.Fatalf("active %d after all released", g.Active("c"))
	}
	e := limits.LongPollRefusal(10)
	if e.Status != 429 || e.Rule() != bus.RuleRateLimited || e.RetryAfter != time.Second ||
		!strings.Contains(e.Violations[0].Message, "At most 10 long polls") {
		t.Fatalf("refusal %#v", e)
	}

	// Concurrent: never more than max at once.
	var cur, peak atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 200 {
				if rel, ok := g.Acquire("hot", 10); ok {
					n := cur.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					cur.Add(-1)
					rel()
				}
			}
		})
	}
	wg.Wait()
	if peak.Load() > 10 || g.Active("hot") != 0 {
		t.Fatalf("peak %d, left %d", peak.Load(), g.Active("hot"))
	}
}

func dayStart(t time.Time) time.Time {
	y, m, d := t.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

func BenchmarkAllow(b *testing.B) {
	for _, keys := range []int{1, 1000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			m := limits.NewMemory(limits.Options{})
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprint("c", i)
			}
			// Time moves 1µs per call, so buckets refill and sweeps run as in service.
			var tick atomic.Int64
			tier := limits.Standard()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(tick.Add(7919))
				for pb.Next() {
					i++
					now := t0.Add(time.Duration(tick.Add(1)) * time.Microsecond)
					if _, err := m.Allow(ctx, names[i%keys], tier, now); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

func TestDayBoundaries(t *testing.T) {
	t.Parallel()
	for _, at := range []time.Time{
		time.Date(2026, 9, 25, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 9, 25, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(2026, 9, 25, 1, 30, 0, 0, time.FixedZone("CEST", 2*3600)), // 2026-09-24 23:30 UTC
		time.Date(1969, 12, 31, 12, 0, 0, 0, time.UTC),
	} {
		want := at.UTC().Format(time.DateOnly)
		u := limits.UsageOf(limits.State{}, limits.Standard(), at)
		if u.Day != want || !u.ResetsAt.Equal(dayStart(at.UTC()).Add(24*time.Hour)) {
			t.Errorf("%v: day %s resets %v, want %s", at, u.Day, u.ResetsAt, want)
		}
	}
}

// Requests of several nodes reach a shared state out of order: a refused
// request whose now is older than the last one's must not give tokens back.
func TestRefusalOutOfOrderKeepsBucket(t *testing.T) {
	t.Parallel()
	tier := limits.Standard()
	t0 := time.Date(2026, 9, 25, 10, 0, 0, 0, time.UTC)
	var st limits.State
	allowed := 0
	for i := range 40 {
		var d limits.Decision
		st, d = limits.Take(st, tier, t0.Add(time.Duration(i)*time.Millisecond))
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 40 {
		t.Fatalf("burst: %d allowed, want 40", allowed)
	}
	full := st.Bucket.Full
	// A late request carrying an old now (100 ms before the burst) is refused
	// and leaves the bucket as it was.
	st, d := limits.Take(st, tier, t0.Add(-100*time.Millisecond))
	if d.Allowed || !st.Bucket.Full.Equal(full) {
		t.Fatalf("old-now request: allowed=%v, bucket full at %v, want refused and %v", d.Allowed, st.Bucket.Full, full)
	}
	// So at the burst's last now nothing more is allowed.
	if _, d := limits.Take(st, tier, t0.Add(40*time.Millisecond)); d.Allowed {
		t.Fatal("a token came back from a refusal")
	}
}
