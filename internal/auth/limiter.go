package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/edge"
)

// Failure limits of the token service (the token endpoint's documented limits).
const (
	FailureWindow         = time.Minute
	FailuresPerClient     = 20
	FailuresPerRemoteAddr = 100
	// maxLimiterKeys bounds each of the limiter's two tables.
	maxLimiterKeys = 65_536
)

// FailureLimiter counts failed authentications at the token service and says
// when further attempts must wait. The in-process MemoryFailureLimiter is
// enough for one node; a store-shared one can implement the same interface.
type FailureLimiter interface {
	// Blocked returns how long attempts for clientID or from remoteAddr
	// must still wait, or 0 when they may go ahead.
	Blocked(ctx context.Context, clientID, remoteAddr string) (time.Duration, error)
	// Failed records one failed authentication.
	Failed(ctx context.Context, clientID, remoteAddr string) error
}

// MaxLimiterKey is the longest key, in bytes, a failure limiter keeps as
// it is; see LimiterKey.
const MaxLimiterKey = 256

// LimiterKey is the key under which a limiter counts the failures of
// clientID (a client id as sent, or the portal's key of an email): the
// text itself when it is plain text of at most MaxLimiterKey bytes; else
// its quoted form, or, when that is longer, a SHA-256 digest of it, both
// under names no connection id can have. The key is kept (in a map, or in
// a PostgreSQL primary key, whose entries have a size limit), so neither
// its size nor its bytes may be the request's choice. Both limiters apply
// it, so both stores count the same text under the same key.
func LimiterKey(clientID string) string {
	if len(clientID) <= MaxLimiterKey {
		if bus.PlainText(clientID) {
			return clientID
		}
		if q := strconv.QuoteToASCII(clientID); len(q) <= MaxLimiterKey {
			return q
		}
	}
	sum := sha256.Sum256([]byte(clientID))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// failureLog is a key's latest failures, oldest first, as unix
// nanoseconds: those in the window when the key last failed, at most the
// limit's number (an older one can no longer decide anything; see
// BlockedBy). Its capacity never exceeds the limit.
type failureLog []int64

// MemoryFailureLimiter is a FailureLimiter kept in this process: per client
// id and per remote address (edge.AddrKey: an IPv4 address, an IPv6 /64),
// attempts are blocked while the minute before holds the limit's number of
// failures (a sliding window), until the oldest of the latest of them is a
// minute old. A failure dated after now (the clock went back) does not
// count, and goes at the key's next failure or the next sweep, as on
// PostgreSQL. (After the clock went back the two may still differ for a
// minute: this one keeps a key's latest failures only, PostgreSQL every
// failure until its sweep, and their sweeps come at different times.)
// Memory is bounded: a key keeps at most its limit's number of times, 8
// bytes each (with both tables full, 60 MiB of times, and the keys of up
// to 256 bytes besides: about 100 MiB at the very worst), keys without a
// failure in the window are swept, and when a table is full of live keys a
// new key is not tracked (its attempts still count against their remote
// address). Safe for concurrent use.
type MemoryFailureLimiter struct {
	clock     bus.Clock
	perClient int
	perAddr   int
	mu        sync.Mutex
	clients   map[string]failureLog
	addrs     map[string]failureLog
	lastSweep time.Time
}

// NewMemoryFailureLimiter returns a limiter with the token endpoint's documented limits: 20
// failures a minute per client id, 100 per remote address.
func NewMemoryFailureLimiter(clock bus.Clock) *MemoryFailureLimiter {
	return &MemoryFailureLimiter{
		clock: clock, perClient: FailuresPerClient, perAddr: FailuresPerRemoteAddr,
		clients: make(map[string]failureLog), addrs: make(map[string]failureLog),
	}
}

// Blocked implements FailureLimiter.
func (l *MemoryFailureLimiter) Blocked(_ context.Context, clientID, remoteAddr string) (time.Duration, error) {
	now := l.clock.Now()
	addr := edge.AddrKey(remoteAddr)
	key := LimiterKey(clientID)
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(BlockedBy(l.clients[key], l.perClient, now), BlockedBy(l.addrs[addr], l.perAddr, now)), nil
}

// Failed implements FailureLimiter.
func (l *MemoryFailureLimiter) Failed(_ context.Context, clientID, remoteAddr string) error {
	addr, key := edge.AddrKey(remoteAddr), LimiterKey(clientID)
	l.mu.Lock()
	defer l.mu.Unlock()
	// Read under the lock: failures are counted and swept in the order of
	// their times, so a call that read the clock before another but came
	// after it neither takes the other's failure for one dated after now
	// (and drops it) nor sweeps again as if the clock had gone back.
	now := l.clock.Now()
	full := len(l.clients) >= maxLimiterKeys || len(l.addrs) >= maxLimiterKeys
	if now.Sub(l.lastSweep) >= FailureWindow || now.Before(l.lastSweep) ||
		(full && now.Sub(l.lastSweep) >= fullSweepEvery) {
		// Sweep keys without a live failure about once a window
		// (amortised O(1) a call), and, at most every fullSweepEvery,
		// before refusing to track a new key in a full table: not on
		// every failure, which would scan both tables each time while
		// they stay full.
		l.sweepLocked(now)
	}
	count(l.clients, key, l.perClient, now)
	count(l.addrs, addr, l.perAddr, now)
	return nil
}

// fullSweepEvery is how often a full table is swept at most.
const fullSweepEvery = time.Second

// sweepLocked drops from every key the failures no longer in the window
// (or dated after now), and the keys left without one.
func (l *MemoryFailureLimiter) sweepLocked(now time.Time) {
	at := now.UnixNano()
	for _, m := range []map[string]failureLog{l.clients, l.addrs} {
		for k, f := range m {
			if f = f.live(at); len(f) == 0 {
				delete(m, k)
			} else {
				m[k] = f
			}
		}
	}
	l.lastSweep = now
}

// live keeps, in place, the failures in the window at now.
func (f failureLog) live(now int64) failureLog {
	out := f[:0]
	for _, t := range f {
		if liveAt(t, now) {
			out = append(out, t)
		}
	}
	return out
}

// liveAt reports whether a failure at unix nanoseconds at is still in the
// window at now (one in the future, after the clock went back, is not).
func liveAt(at, now int64) bool {
	return at <= now && now-at < int64(FailureWindow)
}

// count adds a failure for key at now, keeping of its log the failures
// still in the window, and of those at most limit, the latest.
func count(m map[string]failureLog, key string, limit int, now time.Time) {
	f, ok := m[key]
	if !ok && len(m) >= maxLimiterKeys {
		return // full of live keys: do not grow (see the type's comment)
	}
	if limit <= 0 {
		return
	}
	at := now.UnixNano()
	live := f.live(at) // oldest first, all at or before now
	if len(live) >= limit {
		live = live[:copy(live, live[len(live)-limit+1:])] // the latest limit-1
	}
	if len(live) == cap(live) {
		grown := make(failureLog, len(live), min(limit, max(4, 2*cap(live))))
		copy(grown, live)
		live = grown
	}
	m[key] = append(live, at)
}

// BlockedBy is how long attempts of a key whose failures were at times
// (unix nanoseconds, in any order) must still wait at now, for a limit of
// limit failures a window: while limit of them fall in the window that
// ends at now, until the oldest of the latest limit leaves it; rounded up
// to whole seconds (Retry-After is whole seconds), or 0. Failures in the
// future (the clock went back) do not count. Every FailureLimiter decides
// with it, so that they all block alike.
func BlockedBy(times []int64, limit int, now time.Time) time.Duration {
	at := now.UnixNano()
	live := make([]int64, 0, len(times))
	for _, t := range times {
		if liveAt(t, at) {
			live = append(live, t)
		}
	}
	if limit <= 0 || len(live) < limit {
		return 0
	}
	slices.Sort(live)
	oldest := live[len(live)-limit]
	return (time.Duration(oldest+int64(FailureWindow)-at) + time.Second - 1).Truncate(time.Second)
}
