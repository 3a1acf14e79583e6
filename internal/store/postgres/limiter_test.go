package postgres

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/auth"
	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/limits"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// t0 is a morning, well inside a UTC day.
var t0 = time.Date(2026, 9, 25, 10, 15, 2, 114_000_000, time.UTC)

// twoNodes opens two stores ("nodes") on one fresh schema.
func twoNodes(t *testing.T) (*Store, *Store) {
	t.Helper()
	url := pgtest.URL(t)
	return openURL(t, url), openURL(t, url)
}

func TestLimiterSharedBucket(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	la, lb := a.Limiter(), b.Limiter()
	std := limits.Standard()
	// 40 requests at once in one instant, spread over both nodes: each is
	// allowed, and together they take exactly the burst.
	var allowed atomic.Int32
	var wg sync.WaitGroup
	for i := range 40 {
		l := la
		if i%2 == 1 {
			l = lb
		}
		wg.Go(func() {
			d, err := l.Allow(t.Context(), "c1", std, t0)
			if err != nil {
				t.Errorf("Allow: %v", err)
				return
			}
			if d.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if allowed.Load() != 40 {
		t.Fatalf("%d of 40 allowed, want all", allowed.Load())
	}
	for i, l := range []*Limiter{la, lb} {
		d, err := l.Allow(t.Context(), "c1", std, t0)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed || d.Rule != bus.RuleRateLimited || d.RetryAfter != 50*time.Millisecond || d.Remaining != 0 {
			t.Fatalf("41st on node %d: %+v, want refused rate.limited after 50ms", i, d)
		}
	}
	// Another key has its own bucket.
	if d, _ := lb.Allow(t.Context(), "c2", std, t0); !d.Allowed || d.Remaining != 39 {
		t.Fatalf("other key: %+v", d)
	}
	// Refill by the explicit now: 50ms brings back one token, on either node.
	if d, _ := lb.Allow(t.Context(), "c1", std, t0.Add(49*time.Millisecond)); d.Allowed || d.RetryAfter != time.Millisecond {
		t.Fatalf("at 49ms: %+v, want refused with 1ms to wait", d)
	}
	if d, _ := la.Allow(t.Context(), "c1", std, t0.Add(50*time.Millisecond)); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("at 50ms: %+v, want allowed with 0 remaining", d)
	}
	if d, _ := lb.Allow(t.Context(), "c1", std, t0.Add(50*time.Millisecond)); d.Allowed {
		t.Fatalf("second at 50ms allowed on the other node: %+v", d)
	}
	// 500ms later ten tokens are back.
	if d, _ := lb.Allow(t.Context(), "c1", std, t0.Add(550*time.Millisecond)); !d.Allowed || d.Remaining != 9 {
		t.Fatalf("after 500ms: %+v, want allowed with 9 remaining", d)
	}
	// Usage is shared too: 42 allowed requests of c1 today, seen from a.
	u, err := la.Usage(t.Context(), "c1", std, t0.Add(time.Second))
	if err != nil || u.RequestsToday != 42 || u.Remaining != 100_000-42 || u.Day != "2026-09-25" {
		t.Fatalf("Usage = %+v, %v", u, err)
	}
	u, err = lb.Usage(t.Context(), "nobody", std, t0)
	if err != nil || u.RequestsToday != 0 || u.Remaining != 100_000 {
		t.Fatalf("Usage of an unknown key = %+v, %v", u, err)
	}
}

// TestLimiterMatchesMemory drives the shared limiter and limits.Memory with
// one sequence of requests, tiers and times, and wants the same decisions.
func TestLimiterMatchesMemory(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	nodes := []*Limiter{a.Limiter(), b.Limiter()}
	mem := limits.NewMemory(limits.Options{SweepEvery: -1})
	tiny := limits.Tier{Name: "tiny", RatePerSecond: 2, Burst: 3, DailyQuota: 7}
	gold := limits.Tier{Name: "gold", RatePerSecond: 100, Burst: 200, DailyQuota: 1_000_000}
	steps := []struct {
		tier limits.Tier
		at   time.Duration
	}{
		{tiny, 0}, {tiny, 0}, {tiny, 0}, {tiny, 0}, {tiny, 400 * time.Millisecond}, {tiny, 500 * time.Millisecond},
		{gold, 500 * time.Millisecond}, {gold, 501 * time.Millisecond}, {tiny, 502 * time.Millisecond},
		{tiny, 10 * time.Second}, {tiny, 11 * time.Second}, {tiny, 12 * time.Second}, {tiny, 13 * time.Second},
		{limits.Unlimited(), 14 * time.Second}, {tiny, 15 * time.Second},
		// Next UTC day: the quota starts again.
		{tiny, 14 * time.Hour}, {tiny, 14 * time.Hour},
		// The clock goes back: never more.
		{tiny, 13 * time.Hour},
	}
	for i, st := range steps {
		now := t0.Add(st.at)
		want, err := mem.Allow(t.Context(), "k", st.tier, now)
		if err != nil {
			t.Fatal(err)
		}
		got, err := nodes[i%2].Allow(t.Context(), "k", st.tier, now)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("step %d (%s at +%v): got %+v, want %+v", i, st.tier.Name, st.at, got, want)
		}
		if st.tier.IsUnlimited() {
			// The unlimited tier's counts are written beside the request,
			// at most a second later: the other node sees them once
			// written.
			nodes[i%2].flushPending(t.Context())
		}
		wu, _ := mem.Usage(t.Context(), "k", st.tier, now)
		gu, err := nodes[(i+1)%2].Usage(t.Context(), "k", st.tier, now)
		if err != nil || gu != wu {
			t.Fatalf("step %d: usage %+v, %v; want %+v", i, gu, err, wu)
		}
	}
	if _, err := nodes[0].Allow(t.Context(), "k", limits.Tier{}, t0); err == nil {
		t.Fatal("a tier without a name was accepted")
	}
}

func TestLimiterSweepDropsIdleStates(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	la, lb := a.Limiter(), b.Limiter()
	// Only explicit sweeps until the end of the test.
	la.nextSweep.Store(sweepNever)
	lb.nextSweep.Store(sweepNever)
	rows := func() int {
		var n int
		if err := a.pool.QueryRow(t.Context(), `SELECT count(*) FROM rate_limits`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	burstOnly := limits.Tier{Name: "burst", RatePerSecond: 20, Burst: 40}
	allow := func(l *Limiter, key string, now time.Time) {
		t.Helper()
		if _, err := l.Allow(t.Context(), key, burstOnly, now); err != nil {
			t.Fatal(err)
		}
	}
	// Requests are counted on every tier, so a state is kept all day.
	allow(la, "x", t0)
	allow(la, "y", t0)
	midnight := time.Date(2026, 9, 26, 0, 0, 0, 0, time.UTC)
	allow(lb, "w", midnight.Add(-time.Millisecond)) // its bucket is full at 00:00:00.049
	if n, err := lb.Sweep(t.Context(), midnight.Add(-time.Millisecond)); err != nil || n != 0 || rows() != 3 {
		t.Fatalf("sweep the same day: deleted %d (%v), rows %d; want nothing deleted", n, err, rows())
	}
	allow(la, "y", midnight.Add(time.Millisecond)) // counted on the new day
	if n, err := lb.Sweep(t.Context(), midnight.Add(10*time.Millisecond)); err != nil || n != 1 || rows() != 2 {
		t.Fatalf("sweep after midnight: deleted %d (%v), rows %d; want x deleted only", n, err, rows())
	}
	u, _ := lb.Usage(t.Context(), "y", burstOnly, midnight.Add(time.Second))
	if u.RequestsToday != 1 {
		t.Fatalf("y's usage after the sweep: %+v, want 1 today", u)
	}
	if n, err := lb.Sweep(t.Context(), midnight.Add(time.Second)); err != nil || n != 1 || rows() != 1 {
		t.Fatalf("sweep once w's bucket is full: deleted %d (%v), rows %d; want w deleted", n, err, rows())
	}
	tomorrow := midnight.Add(24 * time.Hour)
	// A swept key starts from a full bucket.
	if d, err := lb.Allow(t.Context(), "x", burstOnly, tomorrow); err != nil || !d.Allowed || d.Remaining != 39 {
		t.Fatalf("after the sweep: %+v, %v", d, err)
	}
	// Allow sweeps by itself once a minute (by its now), beside the request
	// that found the sweep due: x, idle the next day, is gone soon after
	// the next request of any key.
	la = a.Limiter()
	if _, err := la.Allow(t.Context(), "z", burstOnly, tomorrow); err != nil { // first call: sweeps
		t.Fatal(err)
	}
	if _, err := la.Allow(t.Context(), "z", burstOnly, tomorrow.Add(24*time.Hour+2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); rows() != 1 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
	}
	if n := rows(); n != 1 {
		t.Fatalf("rows after Allow's own sweep: %d, want only z", n)
	}
}

// TestLimiterConcurrentSweep races Allow on both nodes against sweeps: no
// request fails and no token is lost or gained.
func TestLimiterConcurrentSweep(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	la, lb := a.Limiter(), b.Limiter()
	tier := limits.Tier{Name: "burst", RatePerSecond: 1, Burst: 1000}
	var allowed atomic.Int32
	var wg sync.WaitGroup
	for i := range 200 {
		l := la
		if i%2 == 1 {
			l = lb
		}
		wg.Go(func() {
			d, err := l.Allow(t.Context(), "k", tier, t0)
			if err != nil {
				t.Errorf("Allow: %v", err)
			} else if d.Allowed {
				allowed.Add(1)
			}
		})
		if i%20 == 0 {
			wg.Go(func() {
				if _, err := la.Sweep(t.Context(), t0); err != nil {
					t.Errorf("Sweep: %v", err)
				}
			})
		}
	}
	wg.Wait()
	d, err := la.Allow(t.Context(), "k", tier, t0)
	if err != nil || allowed.Load() != 200 || d.Remaining != 1000-201 {
		t.Fatalf("allowed %d, then %+v (%v); want 200 and 799 remaining", allowed.Load(), d, err)
	}
}

func TestFailureLimiterShared(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	clock := bus.NewManualClock(t0)
	fa, fb := a.FailureLimiter(clock), b.FailureLimiter(clock)
	ctx := t.Context()
	blocked := func(l *FailureLimiter, client, addr string) time.Duration {
		t.Helper()
		w, err := l.Blocked(ctx, client, addr)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	// 19 failures over both nodes: not blocked yet.
	for i := range 19 {
		l := fa
		if i%2 == 1 {
			l = fb
		}
		if err := l.Failed(ctx, "conn-1", "10.0.0.1:4000"); err != nil {
			t.Fatal(err)
		}
	}
	if w := blocked(fb, "conn-1", "10.0.0.9:1"); w != 0 {
		t.Fatalf("after 19 failures blocked for %v", w)
	}
	clock.Advance(10*time.Second + 300*time.Millisecond)
	if err := fb.Failed(ctx, "conn-1", "10.0.0.1:4001"); err != nil {
		t.Fatal(err)
	}
	// The 20th: blocked on both nodes, from any address, until the first
	// 19 are a minute old (49.7s, rounded up).
	for _, l := range []*FailureLimiter{fa, fb} {
		if w := blocked(l, "conn-1", "192.0.2.7:5"); w != 50*time.Second {
			t.Fatalf("after 20 failures: blocked %v, want 50s", w)
		}
	}
	if w := blocked(fa, "conn-2", "192.0.2.7:5"); w != 0 {
		t.Fatalf("another client blocked for %v", w)
	}
	clock.Advance(49*time.Second + 699*time.Millisecond)
	if w := blocked(fa, "conn-1", "x"); w != time.Second {
		t.Fatalf("1ms before the first failures are a minute old: %v, want 1s", w)
	}
	clock.Advance(time.Millisecond)
	if w := blocked(fa, "conn-1", "x"); w != 0 {
		t.Fatalf("once they are a minute old: blocked %v", w)
	}
	// The window slides: the 20th failure, 10.3s after the others, still
	// counts, so 19 more block conn-1 again until it is a minute old.
	for range 19 {
		if err := fa.Failed(ctx, "conn-1", "x"); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []*FailureLimiter{fa, fb} {
		if w := blocked(l, "conn-1", "192.0.2.7:5"); w != 11*time.Second {
			t.Fatalf("after 19 more failures: blocked %v, want 11s (10.3s, rounded up)", w)
		}
	}
	var n int

	// Per address: 100 failures from one IPv6 /64, any client, any port,
	// over both nodes.
	for i := range 100 {
		l := fa
		if i%2 == 1 {
			l = fb
		}
		if err := l.Failed(ctx, "client-"+string(rune('a'+i%20)), "[2001:db8::"+string(rune('a'+i%6))+"]:443"); err != nil {
			t.Fatal(err)
		}
	}
	if w := blocked(fb, "fresh", "[2001:db8::ffff]:1"); w != time.Minute {
		t.Fatalf("address blocked %v, want 1m", w)
	}
	if w := blocked(fb, "fresh", "[2001:db8:0:1::1]:1"); w != 0 {
		t.Fatalf("another /64 blocked %v", w)
	}
	if w := blocked(fb, "fresh", "10.0.0.1"); w != 0 {
		t.Fatalf("an address without a port blocked %v", w)
	}

	// Ended windows are swept.
	clock.Advance(time.Minute)
	if n, err := fb.Sweep(ctx); err != nil || n == 0 {
		t.Fatalf("Sweep: %d, %v", n, err)
	}
	if err := a.pool.QueryRow(ctx, `SELECT count(*) FROM auth_failure_log`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows after the sweep: %d, %v", n, err)
	}
}

// TestFailureLimiterMatchesMemory checks the shared limiter against auth's
// in-process one on one sequence, concurrent failures included.
func TestFailureLimiterMatchesMemory(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	clock := bus.NewManualClock(t0)
	mem := auth.NewMemoryFailureLimiter(clock)
	nodes := []*FailureLimiter{a.FailureLimiter(clock), b.FailureLimiter(clock)}
	ctx := t.Context()
	// settle waits for the sweeps the failures started beside them, before
	// the test moves the clock: a sweep reads the test's clock when it
	// runs, and one that read it before the clock moved on, and deleted
	// after the next failures were counted, would take those for failures
	// dated in the future (a real clock is read by the database, in the
	// sweep's own statement). Only this goroutine starts them when it runs.
	settle := func() { a.bg.Wait(); b.bg.Wait() }
	check := func(step string, client, addr string) {
		t.Helper()
		want, _ := mem.Blocked(ctx, client, addr)
		for i, l := range nodes {
			got, err := l.Blocked(ctx, client, addr)
			if err != nil || got != want {
				t.Fatalf("%s: node %d blocked %v (%v), in-process %v", step, i, got, err, want)
			}
		}
	}
	var wg sync.WaitGroup
	for i := range 25 {
		_ = mem.Failed(ctx, "c", "198.51.100.1:1")
		wg.Go(func() {
			if err := nodes[i%2].Failed(ctx, "c", "198.51.100.1:1"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	settle()
	check("25 concurrent failures", "c", "198.51.100.2")
	clock.Advance(59 * time.Second)
	check("59s later", "c", "198.51.100.2")
	clock.Advance(time.Second)
	check("a minute later", "c", "198.51.100.2")
	clock.Set(t0.Add(-time.Hour)) // the clock goes back: the window is not live
	check("clock went back", "c", "198.51.100.2")

	// Across the end of a window that opened at a key's first failure:
	// one failure, then 18 at 59.5s, then two more just after the minute.
	// Each limiter blocks at the 20th (a fixed window would have let 19
	// more through), until the 18 are a minute old.
	clock.Set(t0.Add(time.Hour))
	fail := func(n int) {
		for i := range n {
			_ = mem.Failed(ctx, "d", "198.51.100.3:1")
			if err := nodes[i%2].Failed(ctx, "d", "198.51.100.3:1"); err != nil {
				t.Fatal(err)
			}
			settle()
		}
	}
	fail(1)
	clock.Advance(59*time.Second + 500*time.Millisecond)
	fail(18)
	check("19 failures in the minute", "d", "198.51.100.4")
	clock.Advance(700 * time.Millisecond)
	fail(1)
	check("the first failure left the window", "d", "198.51.100.4")
	fail(1)
	check("20 failures in the minute before", "d", "198.51.100.4")
	if w, _ := mem.Blocked(ctx, "d", "198.51.100.4"); w != time.Minute {
		t.Fatalf("blocked %v across a window's end, want 1m (59.3s, rounded up)", w)
	}
	want := func(step, key string, d time.Duration) {
		t.Helper()
		check(step, key, "198.51.100.4")
		if w, _ := mem.Blocked(ctx, key, "198.51.100.4"); w != d {
			t.Fatalf("%s: blocked %v, want %v", step, w, d)
		}
	}
	failKey := func(key string, n int) {
		t.Helper()
		for i := range n {
			_ = mem.Failed(ctx, key, "198.51.100.5:1")
			if err := nodes[i%2].Failed(ctx, key, "198.51.100.5:1"); err != nil {
				t.Fatal(err)
			}
			settle()
		}
	}

	// More failures in the minute than the limit, a second apart: the
	// latest 20 decide, so the wait ends when the 6th is a minute old.
	start := t0.Add(2 * time.Hour)
	clock.Set(start)
	for range 25 {
		failKey("e", 1)
		clock.Advance(time.Second)
	}
	want("25 failures a second apart", "e", 40*time.Second)

	// The clock goes back a second and the key fails: the 20 failures
	// now in the future go, and do not count once the clock is past them.
	start = start.Add(time.Hour)
	clock.Set(start)
	failKey("g", 20)
	clock.Set(start.Add(-time.Second))
	failKey("g", 1)
	clock.Set(start.Add(time.Second))
	want("failures dated in the future dropped", "g", 0)

	// A sweep while the clock is back keeps a key's failures still in the
	// window: another key fails at 0s, this one 19 times at 10s and once
	// at 65s, then the clock goes back to 64s (the in-process limiter
	// sweeps at 0s, 65s and 64s) and it fails again: 20 in the minute,
	// until the 19 are a minute old.
	start = start.Add(time.Hour)
	clock.Set(start)
	failKey("h0", 1)
	clock.Set(start.Add(10 * time.Second))
	failKey("h", 19)
	clock.Set(start.Add(65 * time.Second))
	failKey("h", 1)
	clock.Set(start.Add(64 * time.Second))
	failKey("h", 1)
	want("a sweep with the clock back", "h", 6*time.Second)
}

// TestLimitTakeMatchesGo runs sombus_limit_take (the arithmetic of
// limits.Take in PL/pgSQL) and limits.Take over the same long sequences of
// (tier, now) and wants, at every step, the same state found and the same
// state kept, so the two copies cannot drift. The sequences mix tiers (tier
// changes with intervals that do not divide each other, so the deficit is
// converted and rounded), times to the nanosecond, bursts, idle gaps, UTC
// midnights, clocks going back and tiers without a bucket or a quota.
func TestLimitTakeMatchesGo(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	l := s.Limiter()
	tiers := []limits.Tier{
		limits.Standard(),
		limits.Unlimited(),
		{Name: "tiny", RatePerSecond: 2, Burst: 3, DailyQuota: 7},
		{Name: "odd", RatePerSecond: 3, Burst: 5, DailyQuota: 40},
		{Name: "seven", RatePerSecond: 7, Burst: 11},
		{Name: "slow", RatePerSecond: 0.001, Burst: 2, DailyQuota: 1_000_000_000_000},
		{Name: "fast", RatePerSecond: 1_000_000, Burst: 1_000_000},
		{Name: "quota", DailyQuota: 5},
		{Name: "gold", RatePerSecond: 100, Burst: 200, DailyQuota: 1_000_000},
	}
	midnight := time.Date(2026, 9, 26, 0, 0, 0, 0, time.UTC)
	for seq := range 6 {
		rng := mrand.New(mrand.NewPCG(uint64(seq), 42))
		key := fmt.Sprintf("seq-%d", seq)
		var st limits.State
		now := midnight.Add(-time.Duration(rng.Int64N(int64(2 * time.Second))))
		tier := tiers[rng.IntN(len(tiers))]
		for step := range 400 {
			switch r := rng.IntN(100); {
			case r < 8:
				tier = tiers[rng.IntN(len(tiers))]
			case r < 10:
				now = now.Add(-time.Duration(rng.Int64N(int64(time.Hour)))) // back
			case r < 12:
				now = now.Add(time.Duration(rng.Int64N(int64(30 * time.Hour)))) // a day or more
			case r < 40:
				// the same instant: a burst
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
			}
			old, stored, at, err := l.take(t.Context(), key, tier, now)
			if err != nil {
				t.Fatal(err)
			}
			if !at.Equal(now) {
				t.Fatalf("seq %d step %d: decided at %v, given %v", seq, step, at, now)
			}
			next, _ := limits.Take(st, tier, now)
			if got, want := newRowState(old), newRowState(st); !got.equal(want) {
				t.Fatalf("seq %d step %d (%s at %v): found %v, want %v", seq, step, tier.Name, now, got, want)
			}
			if want := newRowState(next); !stored.equal(want) {
				t.Fatalf("seq %d step %d (%s at %v): stored %v, limits.Take keeps %v (from %v)",
					seq, step, tier.Name, now, stored, want, newRowState(st))
			}
			st = next
		}
	}
}

// Unlimited requests are counted in the node and written at most once a
// second; usage shows them (the node writes its pending counts first), and
// a new UTC day starts again.
func TestUnlimitedCountedForUsage(t *testing.T) {
	t.Parallel()
	l := OpenTest(t).Limiter()
	ctx := t.Context()
	now := time.Date(2026, 9, 25, 23, 59, 59, 0, time.UTC)
	for i := range 5 {
		d, err := l.Allow(ctx, "u", limits.Unlimited(), now.Add(time.Duration(i)*time.Millisecond))
		if err != nil || !d.Allowed {
			t.Fatalf("unlimited request %d: %+v %v", i, d, err)
		}
	}
	u, err := l.Usage(ctx, "u", limits.Unlimited(), now)
	if err != nil || u.RequestsToday != 5 {
		t.Fatalf("usage %+v, %v: want 5 requests today", u, err)
	}
	next := now.Add(2 * time.Second) // the next UTC day
	if _, err := l.Allow(ctx, "u", limits.Unlimited(), next); err != nil {
		t.Fatal(err)
	}
	u, err = l.Usage(ctx, "u", limits.Unlimited(), next)
	if err != nil || u.RequestsToday != 1 {
		t.Fatalf("usage on the next day %+v, %v: want 1", u, err)
	}
}

// Two nodes write the unlimited counts of the same keys at once, over and
// over: every write succeeds (no deadlock between their transactions,
// which lock the keys' rows in one order), and the rows hold every count.
func TestUnlimitedCountsConcurrentNodes(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	ctx := t.Context()
	day := t0.Truncate(24 * time.Hour).Unix()
	const keys, rounds = 2000, 5
	batch := func() map[pendingCount]int64 {
		m := make(map[pendingCount]int64, keys)
		for i := range keys {
			m[pendingCount{fmt.Sprint("k", i), day}] = 1
		}
		return m
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	for _, s := range []*Store{a, b} {
		l := s.Limiter()
		wg.Go(func() {
			for range rounds {
				if err := l.writeCounts(ctx, batch()); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("writing counts: %v", err)
	}
	var rows, total int64
	if err := a.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(quota_count), 0) FROM rate_limits WHERE quota_day = $1`, day).Scan(&rows, &total); err != nil {
		t.Fatal(err)
	}
	if rows != keys || total != 2*rounds*keys {
		t.Fatalf("%d rows counting %d requests, want %d rows counting %d", rows, total, keys, 2*rounds*keys)
	}
}

// A batch written across midnight UTC: a key counted on both days keeps
// the newer day's count (added to a row of that day, replacing an older
// one), and a count of an older day than the row's leaves the row alone,
// as when the days were written one after the other.
func TestUnlimitedCountsAcrossMidnight(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	l := s.Limiter()
	ctx := t.Context()
	day1 := t0.Truncate(24 * time.Hour).Unix()
	day2 := day1 + 86400
	seed := map[pendingCount]int64{{"old", day1}: 4, {"same", day2}: 5, {"newer", day2}: 6}
	if err := l.writeCounts(ctx, seed); err != nil {
		t.Fatal(err)
	}
	batch := map[pendingCount]int64{
		{"fresh", day1}: 3, {"fresh", day2}: 2, // no row: the newer day's count
		{"old", day1}: 1, {"old", day2}: 2, // a row of day 1: day 2 starts again
		{"same", day1}: 9, {"same", day2}: 1, // a row of day 2: added to it
		{"newer", day1}: 7, // a row of a newer day: left alone
	}
	if err := l.writeCounts(ctx, batch); err != nil {
		t.Fatal(err)
	}
	want := map[string][2]int64{"fresh": {day2, 2}, "old": {day2, 2}, "same": {day2, 6}, "newer": {day2, 6}}
	for key, w := range want {
		var d, n int64
		if err := s.pool.QueryRow(ctx, `SELECT quota_day, quota_count FROM rate_limits WHERE key = $1`, key).Scan(&d, &n); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if d != w[0] || n != w[1] {
			t.Errorf("%s: day %d count %d, want day %d count %d", key, d, n, w[0], w[1])
		}
	}
}

// The unlimited tier's counts are written beside the request that found
// the write due: with the key's row locked by another transaction, that
// request is answered at once, and usage (which waits for the write under
// way) shows every count once the row is free.
func TestUnlimitedCountsWrittenBesideRequests(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	l := s.Limiter()
	ctx := t.Context()
	now := t0
	if _, err := l.Allow(ctx, "w", limits.Unlimited(), now); err != nil {
		t.Fatal(err)
	}
	if u, err := l.Usage(ctx, "w", limits.Unlimited(), now); err != nil || u.RequestsToday != 1 {
		t.Fatalf("usage %+v, %v: want 1 request today", u, err)
	}
	tx := lockLimitRow(t, s, "w")
	// A second later the next request finds the write due; the write waits
	// for the row, the request does not.
	answeredBesideLock(t, tx, "a request that found the counts' write due", func() {
		if _, err := l.Allow(ctx, "w", limits.Unlimited(), now.Add(2*time.Second)); err != nil {
			t.Fatal(err)
		}
	})
	usage := make(chan limits.Usage, 1)
	go func() {
		u, err := l.Usage(ctx, "w", limits.Unlimited(), now.Add(2*time.Second))
		if err != nil {
			t.Error(err)
		}
		usage <- u
	}()
	time.Sleep(50 * time.Millisecond)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if u := <-usage; u.RequestsToday != 2 {
		t.Fatalf("usage shows %d requests today, want 2", u.RequestsToday)
	}
}

// Allow's own sweep runs beside the request that found it due: with an
// idle key's row locked by another transaction (the sweep's delete waits
// for it), that request is answered at once, and the idle row is gone once
// the lock is released.
func TestLimiterSweepBesideRequests(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	l := s.Limiter()
	ctx := t.Context()
	burstOnly := limits.Tier{Name: "burst", RatePerSecond: 20, Burst: 40}
	if _, err := l.Allow(ctx, "idle", burstOnly, t0); err != nil { // the first call's sweep finds nothing
		t.Fatal(err)
	}
	tx := lockLimitRow(t, s, "idle")
	// Two days later "idle" is idle, and a sweep is due.
	answeredBesideLock(t, tx, "a request that found a sweep due", func() {
		if _, err := l.Allow(ctx, "busy", burstOnly, t0.Add(48*time.Hour)); err != nil {
			t.Fatal(err)
		}
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if !rowsGone(t, s, `SELECT count(*) FROM rate_limits WHERE key = 'idle'`) {
		t.Fatal("the idle key's row was not swept once its lock was released")
	}
}

// lockLimitRow locks key's row of rate_limits in a transaction of its own,
// rolled back at the end of the test if not before.
func lockLimitRow(t *testing.T, s *Store, key string) pgx.Tx {
	t.Helper()
	return lockRow(t, s, `SELECT 1 FROM rate_limits WHERE key = $1 FOR UPDATE`, key)
}

// lockRow runs a locking query (SELECT … FOR UPDATE) in a transaction of its
// own, rolled back at the end of the test if not before.
func lockRow(t *testing.T, s *Store, query string, args ...any) pgx.Tx {
	t.Helper()
	ctx := t.Context()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, query, args...); err != nil {
		t.Fatal(err)
	}
	return tx
}

// answeredBesideLock runs call, which finds due a write (a sweep, the
// counts) that waits for a row lock tx holds, and fails the test when call
// waited for it too: when call returned only once the lock was released.
// What is judged is the order of the two events, not a time: a call slowed
// by a busy machine but done before the release passes. When call has not
// returned after lockHold, the lock is released, so that such a call fails
// the test rather than hanging it; when call returns in time the lock stays
// held, and the caller releases it.
func answeredBesideLock(t *testing.T, tx pgx.Tx, what string, call func()) {
	t.Helper()
	released := make(chan struct{})
	release := time.AfterFunc(lockHold, func() {
		defer close(released)
		_ = tx.Rollback(context.Background())
	})
	start := time.Now()
	var took time.Duration
	returned := false
	defer func() { // also when call ends the test (t.Fatal)
		if release.Stop() {
			return
		}
		<-released // no other Rollback of tx while this one runs
		if returned {
			t.Fatalf("%s returned after %v, only once the row lock was released at %v: it waited for the lock", what, took, lockHold)
		}
	}()
	call()
	took, returned = time.Since(start), true
}

// lockHold is how long answeredBesideLock waits for call before it releases
// the row lock. It is below the timeouts of the writes that wait for the
// lock (5 s for the unlimited tier's counts, 30 s for the sweeps): a call
// that ran such a write itself would otherwise return at the write's
// timeout, with the lock still held, and pass.
const lockHold = 4 * time.Second

// rowsGone waits up to 10 s for countQuery to count no row.
func rowsGone(t *testing.T, s *Store, countQuery string) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if err := s.pool.QueryRow(t.Context(), countQuery).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// TestFailureSweepBesideRefusals: the sweep of failures a minute old that a
// refusal finds due runs beside it, and skips a row another transaction
// holds (a count deleting its key's future failures) rather than wait for
// it: with one old failure's row locked, the refusal is counted at once,
// the sweep deletes the other old failure, and the locked one goes with a
// later sweep once the lock is released. (As the sweep skips the locked row,
// this checks that the refusal is not held by it, not that the sweep runs
// on a goroutine of its own.)
func TestFailureSweepBesideRefusals(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	clock := bus.NewManualClock(t0)
	l := s.FailureLimiter(clock)
	ctx := t.Context()
	for _, key := range []string{"conn-1", "conn-3"} { // the first's sweep finds nothing
		if err := l.Failed(ctx, key, "10.0.0.1:4000"); err != nil {
			t.Fatal(err)
		}
	}
	tx := lockRow(t, s, `SELECT 1 FROM auth_failure_log WHERE key = $1 FOR UPDATE`, "conn-1")
	defer func() { _ = tx.Rollback(context.Background()) }()
	// Two minutes later both failures are out of the window and a sweep is due.
	clock.Advance(2 * time.Minute)
	answeredBesideLock(t, tx, "a refusal that found a sweep due", func() {
		if err := l.Failed(ctx, "conn-2", "10.0.0.2:4000"); err != nil {
			t.Fatal(err)
		}
	})
	if !rowsGone(t, s, `SELECT count(*) FROM auth_failure_log WHERE key = 'conn-3'`) {
		t.Fatal("the sweep did not delete the old failure beside the locked one")
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM auth_failure_log WHERE key = 'conn-1'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the locked failure: %d rows (%v), want it left for a later sweep", n, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if !rowsGone(t, s, `SELECT count(*) FROM auth_failure_log WHERE key = 'conn-1'`) {
		t.Fatal("the old failure was not swept once its lock was released")
	}
}

// TestSweepDueAfterTheClockWentBack: a sweep is due at its time, and also
// when the clock went back before the last sweep by more than
// limits.ClockStepTolerance (it would otherwise wait until the clock was
// back where it had been), not for callers just behind it; the next one is
// then due an interval after the new time.
func TestSweepDueAfterTheClockWentBack(t *testing.T) {
	var next atomic.Int64
	every := time.Minute
	if !sweepDue(&next, t0, every) {
		t.Fatal("the first sweep is not due")
	}
	if sweepDue(&next, t0.Add(59*time.Second), every) {
		t.Fatal("due again before its interval")
	}
	if sweepDue(&next, t0.Add(-limits.ClockStepTolerance), every) {
		t.Fatal("due for a caller whose time was read a little before the last sweep's")
	}
	back := t0.Add(-limits.ClockStepTolerance - time.Millisecond)
	if !sweepDue(&next, back, every) {
		t.Fatal("not due after the clock went back before the last sweep")
	}
	if sweepDue(&next, back.Add(every-time.Millisecond), every) || !sweepDue(&next, back.Add(every), every) {
		t.Fatal("the next sweep is not due an interval after the clock went back")
	}
	next.Store(sweepNever)
	if sweepDue(&next, t0, every) {
		t.Fatal("due with sweeps stopped")
	}
}

// TestFailureSweepAfterTheClockWentBack: a node whose clock ran an hour
// ahead when it last swept the failures sweeps again once its clock is
// back, instead of an hour later.
func TestFailureSweepAfterTheClockWentBack(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	clock := bus.NewManualClock(t0.Add(-2 * time.Minute))
	l := s.FailureLimiter(clock)
	l.nextSweep.Store(t0.Add(time.Hour + time.Minute).UnixNano()) // swept at t0+1h
	ctx := t.Context()
	if err := l.Failed(ctx, "old", "10.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	clock.Set(t0)
	if err := l.Failed(ctx, "new", "10.0.0.2:1"); err != nil {
		t.Fatal(err)
	}
	if !rowsGone(t, s, `SELECT count(*) FROM auth_failure_log WHERE key = 'old'`) {
		t.Fatal("a failure two minutes old was not swept: the sweeps wait for the clock to be an hour ahead again")
	}
}

// TestRateLimiterUsesTheDatabaseClock: a node's limiter decides at the
// database's clock, whatever time the node gives it, so nodes whose
// clocks disagree still share one bucket. With each node's own clock, the
// node an hour ahead would find the spent bucket full again, the node an
// hour behind would be refused a fresh one, and the sweep of the node
// ahead would delete the spent bucket for everyone.
func TestRateLimiterUsesTheDatabaseClock(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	ahead, behind := a.RateLimiter(), b.RateLimiter()
	tiny := limits.Tier{Name: "tiny", RatePerSecond: 0.01, Burst: 3, DailyQuota: 100}
	now := time.Now()
	allow := func(l limits.Limiter, key string, skew time.Duration) limits.Decision {
		t.Helper()
		d, err := l.Allow(t.Context(), key, tiny, now.Add(skew))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// The node behind spends the bucket; the node ahead finds it spent.
	for i := range 3 {
		if d := allow(behind, "k1", -time.Hour); !d.Allowed {
			t.Fatalf("request %d behind: refused (%s) from a fresh bucket", i, d.Rule)
		}
	}
	d := allow(ahead, "k1", time.Hour)
	if d.Allowed {
		t.Fatal("the node an hour ahead was allowed a request from a spent bucket")
	}
	if d.RetryAfter <= 0 || d.RetryAfter > 101*time.Second {
		t.Fatalf("retry after %v, want the wait for one token (100 s)", d.RetryAfter)
	}
	// The sweep of the node ahead leaves the spent bucket in place.
	if _, err := ahead.(*Limiter).Sweep(t.Context(), now.Add(365*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if d := allow(behind, "k1", 0); d.Allowed {
		t.Fatal("allowed after the node ahead's sweep: it deleted a bucket in use")
	}
	// Usage counts at the database's day, whatever day the node is in.
	u, err := ahead.Usage(t.Context(), "k1", tiny, now.Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if u.RequestsToday != 3 {
		t.Fatalf("usage %+v, want today's 3 requests", u)
	}
	// The node ahead spends part of a fresh bucket; the node behind gets
	// the rest of it.
	if d := allow(ahead, "k2", time.Hour); !d.Allowed {
		t.Fatalf("ahead: refused (%s) from a fresh bucket", d.Rule)
	}
	for i := range 2 {
		if d := allow(behind, "k2", -time.Hour); !d.Allowed {
			t.Fatalf("request %d behind: refused (%s) with %d tokens left", i, d.Rule, 2-i)
		}
	}
	if d := allow(behind, "k2", -time.Hour); d.Allowed {
		t.Fatal("a fourth request was allowed from a bucket of 3")
	}
	// Unlimited requests are counted on the database's day too: a node a
	// day ahead does not file them under tomorrow, where they would push
	// out the counts of the others.
	for _, c := range []struct {
		l    limits.Limiter
		skew time.Duration
	}{{ahead, 24 * time.Hour}, {behind, 0}, {ahead, 24 * time.Hour}} {
		if _, err := c.l.Allow(t.Context(), "k3", limits.Unlimited(), now.Add(c.skew)); err != nil {
			t.Fatal(err)
		}
		c.l.(*Limiter).flushPending(t.Context())
	}
	if u, err := behind.Usage(t.Context(), "k3", limits.Unlimited(), now); err != nil || u.RequestsToday != 3 {
		t.Fatalf("usage %+v, %v; want the 3 unlimited requests of today", u, err)
	}
}

// TestTokenFailureLimiterUsesTheDatabaseClock: with the system clock (a
// node's), failures are dated and judged at the database's clock, so a
// node whose clock runs an hour ahead neither sees the others' failures
// out of the window nor sweeps them away.
func TestTokenFailureLimiterUsesTheDatabaseClock(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	if l := a.TokenFailureLimiter(bus.SystemClock{}).(*FailureLimiter); !l.dbClock {
		t.Fatal("a node's failure limiter does not follow the database's clock")
	}
	if l := a.TokenFailureLimiter(bus.NewManualClock(t0)).(*FailureLimiter); l.dbClock {
		t.Fatal("a test clock is not followed")
	}
	real := time.Now()
	ahead := &FailureLimiter{s: a, clock: bus.NewManualClock(real.Add(time.Hour)), dbClock: true, kinds: tokenKinds}
	behind := &FailureLimiter{s: b, clock: bus.NewManualClock(real.Add(-time.Hour)), dbClock: true, kinds: tokenKinds}
	ctx := t.Context()
	for i := range auth.FailuresPerClient {
		l := behind
		if i%2 == 1 {
			l = ahead
		}
		if err := l.Failed(ctx, "conn-1", fmt.Sprintf("10.0.0.%d:1", i)); err != nil {
			t.Fatal(err)
		}
	}
	for name, l := range map[string]*FailureLimiter{"ahead": ahead, "behind": behind} {
		w, err := l.Blocked(ctx, "conn-1", "192.0.2.1:1")
		if err != nil {
			t.Fatal(err)
		}
		if w <= 0 || w > auth.FailureWindow+time.Second {
			t.Fatalf("%s: blocked for %v after %d failures, want up to a window", name, w, auth.FailuresPerClient)
		}
	}
	if _, err := ahead.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if w, err := behind.Blocked(ctx, "conn-1", "192.0.2.1:1"); err != nil || w <= 0 {
		t.Fatalf("after the sweep of the node ahead: blocked %v, %v; want still blocked", w, err)
	}
}
