package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// window is a fixed window that starts at its first failure.
type window struct {
	start time.Time
	count int
}

// MemoryFailureLimiter is a FailureLimiter kept in this process: per client
// id and per remote address (edge.AddrKey: an IPv4 address, an IPv6 /64), a
// one-minute window opens at the first failure;
// once it holds the limit's number of failures, attempts are blocked until
// it ends. Memory is bounded: ended windows are swept, and when a table is
// full of live windows a new key is not tracked (its attempts still count
// against their remote address). Safe for concurrent use.
type MemoryFailureLimiter struct {
	clock     bus.Clock
	perClient int
	perAddr   int
	mu        sync.Mutex
	clients   map[string]window
	addrs     map[string]window
	lastSweep time.Time
}

// NewMemoryFailureLimiter returns a limiter with the token endpoint's documented limits: 20
// failures a minute per client id, 100 per remote address.
func NewMemoryFailureLimiter(clock bus.Clock) *MemoryFailureLimiter {
	return &MemoryFailureLimiter{
		clock: clock, perClient: FailuresPerClient, perAddr: FailuresPerRemoteAddr,
		clients: make(map[string]window), addrs: make(map[string]window),
	}
}

// Blocked implements FailureLimiter.
func (l *MemoryFailureLimiter) Blocked(_ context.Context, clientID, remoteAddr string) (time.Duration, error) {
	now := l.clock.Now()
	addr := edge.AddrKey(remoteAddr)
	key := LimiterKey(clientID)
	l.mu.Lock()
	defer l.mu.Unlock()
	c, a := l.clients[key], l.addrs[addr]
	return max(BlockedFor(c.start, c.count, l.perClient, now), BlockedFor(a.start, a.count, l.perAddr, now)), nil
}

// Failed implements FailureLimiter.
func (l *MemoryFailureLimiter) Failed(_ context.Context, clientID, remoteAddr string) error {
	now := l.clock.Now()
	addr, key := edge.AddrKey(remoteAddr), LimiterKey(clientID)
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) >= FailureWindow || now.Before(l.lastSweep) ||
		len(l.clients) >= maxLimiterKeys || len(l.addrs) >= maxLimiterKeys {
		// Sweep ended windows about once a window (amortised O(1) a call),
		// and before refusing to track a new key in a full table.
		l.sweepLocked(now)
	}
	count(l.clients, key, now)
	count(l.addrs, addr, now)
	return nil
}

func (l *MemoryFailureLimiter) sweepLocked(now time.Time) {
	for k, w := range l.clients {
		if !live(w, now) {
			delete(l.clients, k)
		}
	}
	for k, w := range l.addrs {
		if !live(w, now) {
			delete(l.addrs, k)
		}
	}
	l.lastSweep = now
}

// live reports whether w is still open at now.
func live(w window, now time.Time) bool {
	return !w.start.IsZero() && liveAt(w.start, now)
}

// liveAt reports whether a window that started at start is still open at now
// (a start in the future, after the clock went back, is not).
func liveAt(start, now time.Time) bool {
	return !now.Before(start) && now.Sub(start) < FailureWindow
}

// count adds a failure for key, opening a new window when its last one ended.
func count(m map[string]window, key string, now time.Time) {
	w, ok := m[key]
	if !ok || !live(w, now) {
		if !ok && len(m) >= maxLimiterKeys {
			return // full of live windows: do not grow (see the type's comment)
		}
		w = window{start: now}
	}
	w.count++
	m[key] = w
}

// BlockedFor is how long a failure window that started at start and holds
// failures still blocks at now, for a limit of limit failures a window,
// rounded up to whole seconds (Retry-After is whole seconds), or 0. Every
// FailureLimiter decides with it, so that they all block alike.
func BlockedFor(start time.Time, failures, limit int, now time.Time) time.Duration {
	if failures < limit || !liveAt(start, now) {
		return 0
	}
	return (start.Add(FailureWindow).Sub(now) + time.Second - 1).Truncate(time.Second)
}
