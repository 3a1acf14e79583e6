package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sombus/sombus/internal/auth"
	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/edge"
)

// FailureLimiter is an auth.FailureLimiter shared by every node of one
// database, with the semantics of auth.MemoryFailureLimiter: per client id
// and per remote address (edge.AddrKey: IPv4 address, IPv6 /64, port
// dropped) a window of auth.FailureWindow opens at the first failure; once
// it holds auth.FailuresPerClient (or auth.FailuresPerRemoteAddr) failures,
// attempts are blocked (auth.BlockedFor) until it ends, whichever node they
// reach. The windows are rows
// of auth_failures; ended ones are deleted about once a window. The table
// needs no bound on its keys (the in-process limiter's 65,536): rows live
// at most a minute and cost disk, not the node's memory. Safe for
// concurrent use.
type FailureLimiter struct {
	s     *Store
	clock bus.Clock
	// dbClock: windows open, end and are swept at the database's clock;
	// clock then only paces the sweeps (see TokenFailureLimiter).
	dbClock bool
	// nextSweep is the unix nanoseconds of the next deletion of ended windows.
	nextSweep atomic.Int64
}

var _ auth.FailureLimiter = (*FailureLimiter)(nil)

// FailureLimiter returns the token service's failure limiter shared by every
// node on this database, reading time from clock (nil: the system clock).
func (s *Store) FailureLimiter(clock bus.Clock) *FailureLimiter {
	if clock == nil {
		clock = bus.SystemClock{}
	}
	return &FailureLimiter{s: s, clock: clock}
}

const (
	kindClient = "c"
	kindAddr   = "a"
)

// Each statement decides at $3 (failureSweep: $1), or at the database's
// clock (dbNow) when that is NULL; failureRead returns the time it used.
const (
	failureRead = `SELECT f.kind, f.window_start, f.failures, t.ns
		FROM (SELECT COALESCE($3::bigint, ` + dbNow + `) AS ns) t
		JOIN auth_failures f ON (f.kind = 'c' AND f.key = $1) OR (f.kind = 'a' AND f.key = $2)`
	// failureCount adds one failure to each of the two windows in one
	// statement, opening a new window where the last one ended (or lies in
	// the future: the clock went back), as auth's count does. Rows are
	// locked in the order of VALUES, client before address in every
	// statement, so two of them never wait on each other in a cycle.
	failureCount = `INSERT INTO auth_failures AS f (kind, key, window_start, failures)
		SELECT v.kind, v.key, t.ns, 1
		FROM (SELECT COALESCE($3::bigint, ` + dbNow + `) AS ns) t,
		     (VALUES (1, 'c', $1::text), (2, 'a', $2::text)) AS v(ord, kind, key)
		ORDER BY v.ord
		ON CONFLICT (kind, key) DO UPDATE SET
			window_start = CASE WHEN f.window_start <= EXCLUDED.window_start AND EXCLUDED.window_start - f.window_start < $4
				THEN f.window_start ELSE EXCLUDED.window_start END,
			failures = CASE WHEN f.window_start <= EXCLUDED.window_start AND EXCLUDED.window_start - f.window_start < $4
				THEN f.failures + 1 ELSE 1 END`
	// failureSweep deletes the windows that are no longer live.
	failureSweep = `WITH t AS (SELECT COALESCE($1::bigint, ` + dbNow + `) AS ns)
		DELETE FROM auth_failures WHERE window_start > (SELECT ns FROM t) OR (SELECT ns FROM t) - window_start >= $2`
)

// nowArg is the time a statement decides at: the clock's, or nil (the
// database's clock) on dbClock.
func (l *FailureLimiter) nowArg() *int64 {
	if l.dbClock {
		return nil // the clock is not read
	}
	return decideAt(false, l.clock.Now())
}

// Blocked implements auth.FailureLimiter.
func (l *FailureLimiter) Blocked(ctx context.Context, clientID, remoteAddr string) (time.Duration, error) {
	rows, err := l.s.pool.Query(ctx, failureRead, auth.LimiterKey(clientID), edge.AddrKey(remoteAddr), l.nowArg())
	if err != nil {
		return 0, fmt.Errorf("postgres: auth failures: %w", interpretError(err))
	}
	defer rows.Close()
	var wait time.Duration
	for rows.Next() {
		var kind string
		var start, now int64
		var n int
		if err := rows.Scan(&kind, &start, &n, &now); err != nil {
			return 0, fmt.Errorf("postgres: auth failures: %w", interpretError(err))
		}
		limit := auth.FailuresPerClient
		if kind == kindAddr {
			limit = auth.FailuresPerRemoteAddr
		}
		wait = max(wait, auth.BlockedFor(time.Unix(0, start), n, limit, time.Unix(0, now)))
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("postgres: auth failures: %w", interpretError(err))
	}
	return wait, nil
}

// Failed implements auth.FailureLimiter.
func (l *FailureLimiter) Failed(ctx context.Context, clientID, remoteAddr string) error {
	now := l.clock.Now()
	if _, err := l.s.pool.Exec(ctx, failureCount, auth.LimiterKey(clientID), edge.AddrKey(remoteAddr), l.nowArg(), int64(auth.FailureWindow)); err != nil {
		return fmt.Errorf("postgres: auth failures: %w", interpretError(err))
	}
	due := l.nextSweep.Load()
	if now.UnixNano() >= due && l.nextSweep.CompareAndSwap(due, now.Add(auth.FailureWindow).UnixNano()) {
		// Beside the refusal, not in it: the windows of a burst of
		// failures (many clients, many addresses) are many rows, and
		// their deletion may wait for the row locks of counts under way.
		l.s.goBackground(func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limitsSweepTimeout)
			defer cancel()
			if _, err := l.Sweep(ctx); err != nil {
				l.s.logger.WarnContext(ctx, "postgres: auth failures: sweep failed", "err", err)
			}
		})
	}
	return nil
}

// Sweep deletes the ended windows and returns how many it deleted. Failed
// runs it by itself about once a window, beside the call that finds it due.
func (l *FailureLimiter) Sweep(ctx context.Context) (int, error) {
	tag, err := l.s.pool.Exec(ctx, failureSweep, l.nowArg(), int64(auth.FailureWindow))
	if err != nil {
		return 0, fmt.Errorf("postgres: auth failures: sweep: %w", interpretError(err))
	}
	return int(tag.RowsAffected()), nil
}
