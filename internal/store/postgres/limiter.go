package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sombus/sombus/internal/limits"
)

// limitsSweepEvery is how often (in the `now` given to Allow) a node deletes
// the idle rows of rate_limits, as limits.Memory sweeps its shards.
const limitsSweepEvery = time.Minute

// Limiter is a limits.Limiter shared by every node of one database: the
// limits.State of each key is one row of rate_limits, and each decision is
// limits.Take run under that row's lock, so 40 requests spread over any
// number of nodes in one instant take exactly the 40 tokens of a standard
// bucket. Safe for concurrent use.
type Limiter struct {
	s *Store
	// nextSweep is the unix nanoseconds of the next sweep of idle rows.
	nextSweep atomic.Int64
}

var _ limits.Limiter = (*Limiter)(nil)

// Limiter returns the rate limiter and daily quota counter shared by every
// node on this database.
func (s *Store) Limiter() *Limiter { return &Limiter{s: s} }

// The decision is one transaction in two round trips, sent as pipelines
// without pgx.Tx (whose Begin and Commit would each be a round trip of
// their own): BEGIN, make the row if missing and lock it; then, with
// limits.Take computed in Go, the UPDATE and COMMIT. The row lock is held
// for about one round trip, so one busy connection's requests queue on
// their row briefly and no other connection's requests wait at all.
const (
	limitEnsure = `INSERT INTO rate_limits (key) VALUES ($1) ON CONFLICT (key) DO NOTHING`
	limitLock   = `SELECT bucket_full, bucket_interval, quota_day, quota_count FROM rate_limits WHERE key = $1 FOR UPDATE`
	limitSave   = `UPDATE rate_limits SET bucket_full = $2, bucket_interval = $3, quota_day = $4, quota_count = $5 WHERE key = $1`
	limitRead   = `SELECT bucket_full, bucket_interval, quota_day, quota_count FROM rate_limits WHERE key = $1`
	// limitSweep deletes the states that limits.State.Idle calls idle: the
	// bucket is full again and nothing was counted today. Under READ
	// COMMITTED a row that an Allow changed meanwhile is checked again in
	// its new version, so a state in use is never deleted.
	limitSweep = `DELETE FROM rate_limits
		WHERE (bucket_full IS NULL OR bucket_full <= $1)
		  AND (quota_count = 0 OR quota_day IS NULL OR quota_day < $2)`
)

// Allow implements limits.Limiter.
func (l *Limiter) Allow(ctx context.Context, key string, tier limits.Tier, now time.Time) (limits.Decision, error) {
	if err := tier.Validate(); err != nil {
		return limits.Decision{}, err
	}
	var d limits.Decision
	for attempt := 1; ; attempt++ {
		var found bool
		var err error
		d, found, err = l.take(ctx, key, tier, now)
		if err != nil {
			return limits.Decision{}, fmt.Errorf("postgres: limits: %w", interpretError(err))
		}
		if found {
			break
		}
		// A sweep on another node deleted the idle row between our INSERT
		// and our lock: the state was idle, so simply start again.
		if attempt == maxAttempts {
			return limits.Decision{}, errors.New("postgres: limits: state row keeps disappearing")
		}
	}
	l.maybeSweep(ctx, now)
	return d, nil
}

// take runs one decision transaction; found is false when the row vanished.
func (l *Limiter) take(ctx context.Context, key string, tier limits.Tier, now time.Time) (d limits.Decision, found bool, err error) {
	conn, err := l.s.pool.Acquire(ctx)
	if err != nil {
		return d, false, err
	}
	defer func() {
		if err != nil || !found {
			rollback(conn)
		}
		// pgxpool destroys a connection released inside a transaction.
		conn.Release()
	}()

	b := &pgx.Batch{}
	b.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED`)
	// The commit need not wait for its WAL flush: a crash may forget the
	// last few hundred milliseconds of counting (a few tokens come back
	// early), which is harmless, and it spares every request of a workspace
	// route a disk flush of its own. Atomicity and the row lock are as usual.
	b.Queue(`SET LOCAL synchronous_commit TO OFF`)
	b.Queue(limitEnsure, key)
	b.Queue(limitLock, key)
	br := conn.SendBatch(ctx, b)
	var st limits.State
	for range 3 { // BEGIN, SET LOCAL, INSERT
		if err == nil {
			_, err = br.Exec()
		}
	}
	if err == nil {
		st, err = scanState(br.QueryRow())
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return d, false, nil
	}
	if err != nil {
		return d, false, err
	}
	found = true

	st, d = limits.Take(st, tier, now)

	full, iv, day, n := stateArgs(st)
	b = &pgx.Batch{}
	b.Queue(limitSave, key, full, iv, day, n)
	b.Queue(`COMMIT`)
	br = conn.SendBatch(ctx, b)
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return d, true, err
}

// Usage implements limits.Limiter.
func (l *Limiter) Usage(ctx context.Context, key string, tier limits.Tier, now time.Time) (limits.Usage, error) {
	if err := tier.Validate(); err != nil {
		return limits.Usage{}, err
	}
	st, err := scanState(l.s.pool.QueryRow(ctx, limitRead, key))
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return limits.Usage{}, fmt.Errorf("postgres: limits: %w", interpretError(err))
	}
	return limits.UsageOf(st, tier, now), nil
}

// Sweep deletes every idle state at now (see limits.State.Idle) and returns
// how many it deleted. Allow runs it by itself about once a minute.
func (l *Limiter) Sweep(ctx context.Context, now time.Time) (int, error) {
	now = now.UTC()
	// UTC days are whole multiples of 24h since the zero time.
	today := now.Truncate(24 * time.Hour)
	tag, err := l.s.pool.Exec(ctx, limitSweep, now.UnixNano(), today.Unix())
	if err != nil {
		return 0, fmt.Errorf("postgres: limits: sweep: %w", interpretError(err))
	}
	return int(tag.RowsAffected()), nil
}

// maybeSweep sweeps when one is due; of the requests that find it due, one
// runs it. A failed sweep is logged and tried again at the next due time.
func (l *Limiter) maybeSweep(ctx context.Context, now time.Time) {
	due := l.nextSweep.Load()
	if now.UnixNano() < due || !l.nextSweep.CompareAndSwap(due, now.Add(limitsSweepEvery).UnixNano()) {
		return
	}
	if n, err := l.Sweep(ctx, now); err != nil {
		l.s.logger.WarnContext(ctx, "postgres: limits: sweep failed", "err", err)
	} else if n > 0 {
		l.s.logger.DebugContext(ctx, "postgres: limits: swept idle states", "deleted", n)
	}
}

// scanState reads a rate_limits row into a limits.State.
func scanState(row pgx.Row) (limits.State, error) {
	var full, day *int64
	var iv, n int64
	if err := row.Scan(&full, &iv, &day, &n); err != nil {
		return limits.State{}, err
	}
	var st limits.State
	if full != nil {
		st.Bucket.Full = time.Unix(0, *full).UTC()
	}
	st.Bucket.Interval = time.Duration(iv)
	if day != nil {
		st.Quota.Day = time.Unix(*day, 0).UTC()
	}
	st.Quota.Count = n
	return st, nil
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

// rollback ends whatever transaction conn may be in, so the pool can reuse
// it; when that fails the connection is closed (Release then drops it).
func rollback(conn *pgxpool.Conn) {
	if conn.Conn().IsClosed() || conn.Conn().PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
		_ = conn.Conn().Close(ctx)
	}
}
