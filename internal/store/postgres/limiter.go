package postgres

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sombus/sombus/internal/limits"
)

// limitsSweepEvery is how often (in the `now` given to Allow) a node deletes
// the idle rows of rate_limits.
const limitsSweepEvery = time.Minute

// Limiter is a limits.Limiter shared by every node of one database: the
// limits.State of each key is one row of rate_limits, and each decision is
// limits.Take run under that row's lock, so 40 requests spread over any
// number of nodes in one instant take exactly the 40 tokens of a standard
// bucket. Safe for concurrent use.
type Limiter struct {
	s *Store
	// dbClock: decide at the database's clock, not at the now Allow,
	// Usage and Sweep are given (see RateLimiter).
	dbClock bool
	// nextSweep is the unix nanoseconds of the next sweep of idle rows.
	nextSweep atomic.Int64

	// The unlimited tier's decisions do not depend on any state: its
	// requests are only counted (for the usage route), so they are counted
	// here and written at most once a second per node instead of costing a
	// round trip each. Usage of an unlimited connection may lag by that
	// much, and a node that stops loses at most its last second of counts.
	// The write runs beside the request that found it due, not in it: a
	// node's batch holds a row for every key its requests touched
	// (thousands, with many consumers polling), and the request would wait
	// for all of them.
	mu        sync.Mutex
	pending   map[pendingCount]int64
	nextFlush int64         // unix nanoseconds
	flushing  chan struct{} // closed when the write under way ends; nil: none
}

// pendingCount is a key's count of one UTC day (unix seconds) not yet written.
type pendingCount struct {
	key string
	day int64
}

// limitAddCounts adds counted requests to their keys' rows, one row of the
// arrays ($1 keys, $2 UTC days in unix seconds, 0 for the database's
// today, $3 counts) each, in the arrays' order: a row of an older day
// starts again at the count, one of a newer day is left alone. A key
// appears at most once (ON CONFLICT cannot change a row twice in one
// statement).
const limitAddCounts = `INSERT INTO rate_limits AS r (key, quota_day, quota_count)
	SELECT t.k, CASE WHEN t.d = 0 THEN c.ns / 86400000000000 * 86400 ELSE t.d END, t.n
	FROM (SELECT ` + dbNow + ` AS ns) c, unnest($1::text[], $2::bigint[], $3::bigint[]) WITH ORDINALITY AS t(k, d, n, ord)
	ORDER BY t.ord
	ON CONFLICT (key) DO UPDATE SET
		quota_count = CASE WHEN r.quota_day = EXCLUDED.quota_day THEN r.quota_count + EXCLUDED.quota_count
		                   WHEN r.quota_day > EXCLUDED.quota_day THEN r.quota_count
		                   ELSE EXCLUDED.quota_count END,
		quota_day = GREATEST(r.quota_day, EXCLUDED.quota_day)`

// countUnlimited counts a request of an unlimited key and, when a second
// has passed since the last write and none is under way, starts writing
// the pending counts in a goroutine of their own.
func (l *Limiter) countUnlimited(ctx context.Context, key string, now time.Time) {
	now = now.UTC()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		l.pending = make(map[pendingCount]int64)
	}
	day := now.Truncate(24 * time.Hour).Unix()
	if l.dbClock {
		day = 0 // the database's today, when written
	}
	l.pending[pendingCount{key, day}]++
	if now.UnixNano() < l.nextFlush || l.flushing != nil {
		return
	}
	batch := l.pending
	l.pending = nil
	l.nextFlush = now.Add(time.Second).UnixNano()
	done := make(chan struct{})
	started := l.s.goBackground(func() {
		defer func() {
			l.mu.Lock()
			l.flushing = nil
			l.mu.Unlock()
			close(done)
		}()
		l.flush(context.WithoutCancel(ctx), batch)
	})
	if started {
		l.flushing = done
	}
	// Else the store is closing: the counts are dropped, as those of a
	// node that stops are.
}

// flushPending writes every pending count now, after the write under way
// (if any) has ended.
func (l *Limiter) flushPending(ctx context.Context) {
	l.mu.Lock()
	batch := l.pending
	l.pending = nil
	under := l.flushing
	l.mu.Unlock()
	if under != nil {
		select {
		case <-under:
		case <-ctx.Done():
		}
	}
	if len(batch) > 0 {
		l.flush(ctx, batch)
	}
}

// flush writes counts in one round trip; a failure is logged (the counts
// only feed the usage route).
func (l *Limiter) flush(ctx context.Context, batch map[pendingCount]int64) {
	if err := l.writeCounts(ctx, batch); err != nil {
		l.s.logger.WarnContext(ctx, "postgres: limits: write unlimited counts", "err", err, "keys", len(batch))
	}
}

// writeCounts adds the counts of batch to their rows in one statement, the
// rows in key order. The order matters: every node flushes the counts of
// the keys its requests touched, and two nodes whose batches share keys
// would otherwise lock those rows in the orders of their maps, wait for
// each other, and stay so until the deadlock check (a second) ended one of
// them; meanwhile every request of those keys on a limited tier, and every
// publish of a producer among them, waited behind the rows' locks
// (publishes of 1 to 5 s were seen with two nodes and 10,000 unlimited
// consumers' polls). In one order, a flush only waits for another to
// commit. One statement, not one per key: a node holding 10,000 polls
// flushes about that many keys a second, and a statement each cost the
// database as much as the polls' own reads.
//
// A key counted on two days (a batch across midnight UTC) keeps only its
// newest day's count: applied one after the other, the older day's count
// would be replaced by the newer one's anyway.
func (l *Limiter) writeCounts(ctx context.Context, batch map[pendingCount]int64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	keys := make([]pendingCount, 0, len(batch))
	for k := range batch {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b pendingCount) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Compare(a.day, b.day)
	})
	names := make([]string, 0, len(keys))
	days := make([]int64, 0, len(keys))
	counts := make([]int64, 0, len(keys))
	for i, k := range keys {
		if i+1 < len(keys) && keys[i+1].key == k.key {
			continue // a newer day of the same key follows
		}
		names = append(names, k.key)
		days = append(days, k.day)
		counts = append(counts, batch[k])
	}
	_, err := l.s.pool.Exec(ctx, limitAddCounts, names, days, counts)
	return err
}

var _ limits.Limiter = (*Limiter)(nil)

// Limiter returns the rate limiter and daily quota counter shared by every
// node on this database, deciding at the times it is given (tests drive it
// through a day in a second). A node uses RateLimiter's, which reads the
// time from the database.
func (s *Store) Limiter() *Limiter { return &Limiter{s: s} }

// dbNow is the database's clock in unix nanoseconds (microsecond steps).
const dbNow = `(extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000`

// nowArg is the now a statement decides at: nil, the database's clock
// (dbNow), for a limiter on dbClock.
func (l *Limiter) nowArg(now time.Time) *int64 { return decideAt(l.dbClock, now) }

// decideAt is the time argument of a limit statement: now in unix
// nanoseconds, or nil (the database's clock, dbNow) when dbClock.
func decideAt(dbClock bool, now time.Time) *int64 {
	if dbClock {
		return nil
	}
	v := now.UnixNano()
	return &v
}

// The decision is one statement, so one round trip: sombus_limit_take
// (migration 0003) locks the key's row, applies limits.Take's arithmetic,
// stores the next state and returns the state it found and the one it
// stored. The Decision is then computed here by limits.Take on the state
// found, and the state Take wants kept is checked against the one stored.
// The row lock is held from the statement to its own commit, which does
// not wait for the disk (see the migration), with no round trip in
// between, so requests on one key queue on it only for microseconds.
const (
	// Each statement decides at $2 (limitSweep: $1), or at the
	// database's clock when that is NULL, and limitTake and limitRead
	// return the time they used. The UTC day of a time is its whole
	// multiples of 24 h since the epoch, as time.Truncate makes it.
	limitTake = `SELECT l.old_full, l.old_iv, l.old_day, l.old_count, l.new_full, l.new_iv, l.new_day, l.new_count, t.ns
		FROM (SELECT COALESCE($2::bigint, ` + dbNow + `) AS ns) t,
		     sombus_limit_take($1, t.ns, t.ns / 86400000000000 * 86400, $3, $4, $5) l`
	limitRead = `SELECT r.bucket_full, r.bucket_interval, r.quota_day, r.quota_count, t.ns
		FROM (SELECT COALESCE($2::bigint, ` + dbNow + `) AS ns) t LEFT JOIN rate_limits r ON r.key = $1`
	// limitSweep deletes the states that limits.State.Idle calls idle: the
	// bucket is full again and nothing was counted today. Under READ
	// COMMITTED a row that an Allow changed meanwhile is checked again in
	// its new version, so a state in use is never deleted.
	limitSweep = `WITH t AS (SELECT COALESCE($1::bigint, ` + dbNow + `) AS ns)
		DELETE FROM rate_limits
		WHERE (bucket_full IS NULL OR bucket_full <= (SELECT ns FROM t))
		  AND (quota_count = 0 OR quota_day IS NULL OR quota_day < (SELECT ns / 86400000000000 * 86400 FROM t))`
)

// Allow implements limits.Limiter.
func (l *Limiter) Allow(ctx context.Context, key string, tier limits.Tier, now time.Time) (limits.Decision, error) {
	if err := tier.Validate(); err != nil {
		return limits.Decision{}, err
	}
	if tier.IsUnlimited() {
		_, d := limits.Take(limits.State{}, tier, now)
		l.countUnlimited(ctx, key, now)
		return d, nil
	}
	old, stored, now, err := l.take(ctx, key, tier, now)
	if err != nil {
		return limits.Decision{}, fmt.Errorf("postgres: limits: %w", interpretError(err))
	}
	next, d := limits.Take(old, tier, now)
	if want := newRowState(next); !want.equal(stored) {
		// The two copies of the arithmetic disagree: the decision stands
		// (it is limits.Take's), the stored state is the database's.
		l.s.logger.ErrorContext(ctx, "postgres: limits: sombus_limit_take stored another state than limits.Take",
			"key", key, "tier", tier.Name, "stored", stored, "want", want)
	}
	l.maybeSweep(ctx, now)
	return d, nil
}

// rowState is a rate_limits row's state columns (nil: NULL).
type rowState struct {
	full, day *int64
	iv, n     int64
}

// equal compares two row states by value.
func (a rowState) equal(b rowState) bool {
	eq := func(x, y *int64) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return eq(a.full, b.full) && eq(a.day, b.day) && a.iv == b.iv && a.n == b.n
}

// String shows a row state in logs.
func (a rowState) String() string {
	v := func(p *int64) string {
		if p == nil {
			return "NULL"
		}
		return strconv.FormatInt(*p, 10)
	}
	return fmt.Sprintf("full=%s iv=%d day=%s count=%d", v(a.full), a.iv, v(a.day), a.n)
}

// newRowState is a limits.State as its row stores it.
func newRowState(st limits.State) rowState {
	full, iv, day, n := stateArgs(st)
	return rowState{full: full, iv: iv, day: day, n: n}
}

// toState reads a row state into a limits.State.
func (a rowState) toState() limits.State {
	var st limits.State
	if a.full != nil {
		st.Bucket.Full = time.Unix(0, *a.full).UTC()
	}
	st.Bucket.Interval = time.Duration(a.iv)
	if a.day != nil {
		st.Quota.Day = time.Unix(*a.day, 0).UTC()
	}
	st.Quota.Count = a.n
	return st
}

// take runs sombus_limit_take: the state it found for key (as a
// limits.State), the row state it stored, and the time it decided at.
func (l *Limiter) take(ctx context.Context, key string, tier limits.Tier, now time.Time) (limits.State, rowState, time.Time, error) {
	var iv, burst, quota int64
	if tier.RateLimited() {
		iv, burst = int64(tier.Interval()), int64(tier.Burst)
	}
	if tier.HasQuota() {
		quota = tier.DailyQuota
	}
	var old, stored rowState
	var at int64
	err := l.s.pool.QueryRow(ctx, limitTake, key, l.nowArg(now), iv, burst, quota).Scan(
		&old.full, &old.iv, &old.day, &old.n, &stored.full, &stored.iv, &stored.day, &stored.n, &at)
	if err != nil {
		return limits.State{}, rowState{}, time.Time{}, err
	}
	return old.toState(), stored, time.Unix(0, at).UTC(), nil
}

// Usage implements limits.Limiter.
func (l *Limiter) Usage(ctx context.Context, key string, tier limits.Tier, now time.Time) (limits.Usage, error) {
	if err := tier.Validate(); err != nil {
		return limits.Usage{}, err
	}
	l.flushPending(ctx) // this node's unlimited counts, so usage shows them
	var r struct{ full, iv, day, n *int64 }
	var at int64
	err := l.s.pool.QueryRow(ctx, limitRead, key, l.nowArg(now)).Scan(&r.full, &r.iv, &r.day, &r.n, &at)
	if err != nil {
		return limits.Usage{}, fmt.Errorf("postgres: limits: %w", interpretError(err))
	}
	st := rowState{full: r.full, day: r.day} // no row: the zero state
	if r.iv != nil {
		st.iv = *r.iv
	}
	if r.n != nil {
		st.n = *r.n
	}
	return limits.UsageOf(st.toState(), tier, time.Unix(0, at).UTC()), nil
}

// Sweep deletes every idle state at now (see limits.State.Idle) and returns
// how many it deleted. Allow runs it by itself about once a minute.
func (l *Limiter) Sweep(ctx context.Context, now time.Time) (int, error) {
	tag, err := l.s.pool.Exec(ctx, limitSweep, l.nowArg(now))
	if err != nil {
		return 0, fmt.Errorf("postgres: limits: sweep: %w", interpretError(err))
	}
	return int(tag.RowsAffected()), nil
}

// sweepDue reports whether a sweep paced every every, next due at the unix
// nanoseconds in next, is due at now, and if so moves next on (of callers
// at once, one is told). It is also due when now is more than
// limits.ClockStepTolerance behind the last sweep: the clock went back,
// and would otherwise hold the sweeps off until it was back where it had
// been. (Callers whose now was read a little before the last sweep's, as
// requests in flight together are, are not a clock that went back.) A next
// of sweepNever is never due (tests that sweep by themselves).
func sweepDue(next *atomic.Int64, now time.Time, every time.Duration) bool {
	due := next.Load()
	if n := now.UnixNano(); due == sweepNever || (n < due && due-n <= int64(every+limits.ClockStepTolerance)) {
		return false
	}
	return next.CompareAndSwap(due, now.Add(every).UnixNano())
}

// sweepNever, as the next sweep's time, stops the sweeps.
const sweepNever = math.MaxInt64

// limitsSweepTimeout bounds one sweep.
const limitsSweepTimeout = 30 * time.Second

// maybeSweep starts a sweep when one is due; of the requests that find it
// due, one starts it, in a goroutine of its own (the request does not wait
// for a delete over every idle key). A failed sweep is logged and tried
// again at the next due time.
func (l *Limiter) maybeSweep(ctx context.Context, now time.Time) {
	if !sweepDue(&l.nextSweep, now, limitsSweepEvery) {
		return
	}
	l.s.goBackground(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limitsSweepTimeout)
		defer cancel()
		if n, err := l.Sweep(ctx, now); err != nil {
			l.s.logger.WarnContext(ctx, "postgres: limits: sweep failed", "err", err)
		} else if n > 0 {
			l.s.logger.DebugContext(ctx, "postgres: limits: swept idle states", "deleted", n)
		}
	})
}

// stateArgs are a limits.State's column values (NULL for zero times, which
// have no unix nanoseconds).
func stateArgs(st limits.State) (full *int64, iv int64, day *int64, n int64) {
	if !st.Bucket.Full.IsZero() {
		v := st.Bucket.Full.UnixNano()
		full = &v
	}
	if !st.Quota.Day.IsZero() {
		v := st.Quota.Day.Unix()
		day = &v
	}
	return full, int64(st.Bucket.Interval), day, st.Quota.Count
}
