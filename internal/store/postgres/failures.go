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
// dropped), attempts are blocked (auth.BlockedBy) while the minute before
// holds auth.FailuresPerClient (or auth.FailuresPerRemoteAddr) failures,
// until the oldest of the latest of them is a minute old, whichever node
// they reach. Each failure is a row of auth_failure_log; a sweep that a
// failure starts about once a minute deletes those a minute old, so rows
// live about two minutes at most while failures come. A failure dated
// after now (the clock went back) does not count, and goes at its key's
// next failure or the next sweep. The table needs no bound on its keys
// (the in-process limiter's 65,536): its rows cost disk, not the node's
// memory. Safe for concurrent use.
type FailureLimiter struct {
	s     *Store
	clock bus.Clock
	// dbClock: failures are dated, judged and swept at the database's
	// clock; clock then only paces the sweeps (see TokenFailureLimiter).
	dbClock bool
	// kinds: the token service's rows, or the portal's.
	kinds failureKinds
	// nextSweep is the unix nanoseconds of the next deletion of failures a
	// minute old.
	nextSweep atomic.Int64
}

var _ auth.FailureLimiter = (*FailureLimiter)(nil)

// FailureLimiter returns the token service's failure limiter shared by every
// node on this database, reading time from clock (nil: the system clock).
func (s *Store) FailureLimiter(clock bus.Clock) *FailureLimiter {
	if clock == nil {
		clock = bus.SystemClock{}
	}
	return &FailureLimiter{s: s, clock: clock, kinds: tokenKinds}
}

// failureKinds are the kinds of auth_failure_log's rows a limiter counts
// under: a client's (its id, or the portal's key of an email) and an
// address's.
type failureKinds struct{ client, addr string }

// The token service's failures and the portal's sign-in failures are
// counted apart: neither surface's failures hold back the other, and no
// client id sent to the token service can name a portal user's key.
var (
	tokenKinds  = failureKinds{client: "c", addr: "a"}
	signInKinds = failureKinds{client: "pc", addr: "pa"}
)

// Each statement decides at $3 (failureSweep: $1), or at the database's
// clock (dbNow) when that is NULL; failureRead returns the time it used.
const (
	// failureRead returns, for the client id ($1, rows of kind $7) and the
	// address ($2, kind $8), the latest failures still in the window ($6
	// long), at most the limit's number of each ($4, $5): all BlockedBy
	// needs. It returns no row when neither
	// has one.
	failureRead = `SELECT v.kind, f.failed_at, t.ns
		FROM (SELECT COALESCE($3::bigint, ` + dbNow + `) AS ns) t
		CROSS JOIN (VALUES ($7::text, $1::text, $4::int), ($8::text, $2::text, $5::int)) AS v(kind, key, lim)
		CROSS JOIN LATERAL (SELECT failed_at FROM auth_failure_log l
			WHERE l.kind = v.kind AND l.key = v.key AND l.failed_at <= t.ns AND l.failed_at > t.ns - $6
			ORDER BY l.failed_at DESC LIMIT v.lim) f`
	// failureCount records one failure of the client id and one of the
	// address ($1 and $2, rows of kinds $4 and $5), plain inserts, and
	// deletes the two keys' failures dated after now (the clock went
	// back), as auth's count drops them; after the clock went back, it
	// may wait for a sweep that holds those rows (never in a cycle: the
	// sweep skips the rows others hold).
	failureCount = `WITH t AS (SELECT COALESCE($3::bigint, ` + dbNow + `) AS ns),
		v (kind, key) AS (VALUES ($4::text, $1::text), ($5::text, $2::text)),
		ahead AS (
			DELETE FROM auth_failure_log l USING v, t
			WHERE l.kind = v.kind AND l.key = v.key AND l.failed_at > t.ns
		)
		INSERT INTO auth_failure_log (kind, key, failed_at) SELECT v.kind, v.key, t.ns FROM v, t`
	// failureSweep deletes the failures a minute old, and those dated
	// after now (the clock went back), as auth's sweep drops them. It skips
	// rows a count is deleting (a key's future failures): it never waits
	// on a count, so the two never wait on each other in a cycle.
	failureSweep = `WITH t AS (SELECT COALESCE($1::bigint, ` + dbNow + `) AS ns)
		DELETE FROM auth_failure_log WHERE ctid = ANY (ARRAY(
			SELECT l.ctid FROM auth_failure_log l, t
			WHERE l.failed_at <= t.ns - $2 OR l.failed_at > t.ns
			FOR UPDATE OF l SKIP LOCKED))`
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
	rows, err := l.s.pool.Query(ctx, failureRead, auth.LimiterKey(clientID), edge.AddrKey(remoteAddr), l.nowArg(),
		auth.FailuresPerClient, auth.FailuresPerRemoteAddr, int64(auth.FailureWindow), l.kinds.client, l.kinds.addr)
	if err != nil {
		return 0, fmt.Errorf("postgres: auth failures: %w", interpretError(err))
	}
	defer rows.Close()
	var client, addr []int64
	var now int64
	for rows.Next() {
		var kind string
		var at int64
		if err := rows.Scan(&kind, &at, &now); err != nil {
			return 0, fmt.Errorf("postgres: auth failures: %w", interpretError(err))
		}
		if kind == l.kinds.addr {
			addr = append(addr, at)
		} else {
			client = append(client, at)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("postgres: auth failures: %w", interpretError(err))
	}
	if client == nil && addr == nil {
		return 0, nil
	}
	t := time.Unix(0, now)
	return max(auth.BlockedBy(client, auth.FailuresPerClient, t), auth.BlockedBy(addr, auth.FailuresPerRemoteAddr, t)), nil
}

// Failed implements auth.FailureLimiter.
func (l *FailureLimiter) Failed(ctx context.Context, clientID, remoteAddr string) error {
	now := l.clock.Now()
	if _, err := l.s.pool.Exec(ctx, failureCount, auth.LimiterKey(clientID), edge.AddrKey(remoteAddr), l.nowArg(),
		l.kinds.client, l.kinds.addr); err != nil {
		return fmt.Errorf("postgres: auth failures: %w", interpretError(err))
	}
	if sweepDue(&l.nextSweep, now, auth.FailureWindow) {
		// Beside the refusal, not in it: a burst of failures (many
		// clients, many addresses) is many rows to delete.
		l.s.goBackground(func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limitsSweepTimeout)
			defer cancel()
			// At the time it runs (the database's, on a node): a time
			// read before would find the failures counted since dated
			// after it, and delete them.
			if _, err := l.Sweep(ctx); err != nil {
				l.s.logger.WarnContext(ctx, "postgres: auth failures: sweep failed", "err", err)
			}
		})
	}
	return nil
}

// Sweep deletes the failures that left the window and returns how many it
// deleted. Failed runs it by itself about once a window, beside the call
// that finds it due.
func (l *FailureLimiter) Sweep(ctx context.Context) (int, error) {
	tag, err := l.s.pool.Exec(ctx, failureSweep, l.nowArg(), int64(auth.FailureWindow))
	if err != nil {
		return 0, fmt.Errorf("postgres: auth failures: sweep: %w", interpretError(err))
	}
	return int(tag.RowsAffected()), nil
}
