package limits

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// Limiter decides whether a key (a connection id) may make another request
// now, and reports its quota use. The tier is passed on every call, so a
// tier change takes effect on the next call (see Take for how the state
// carries over). Implementations are safe for concurrent use.
type Limiter interface {
	// Allow decides one request and, when allowed, counts it. A refusal is a
	// Decision with Allowed false, not an error; errors are for a tier that
	// fails Validate or a store that cannot be reached.
	Allow(ctx context.Context, key string, tier Tier, now time.Time) (Decision, error)
	// Usage reports the key's quota use today without counting a request.
	Usage(ctx context.Context, key string, tier Tier, now time.Time) (Usage, error)
}

// Options configure NewMemory.
type Options struct {
	// Shards is the number of maps keys are spread over (rounded up to a
	// power of two); default 256.
	Shards int
	// SweepEvery is how often (in the `now` passed to Allow) each shard drops
	// its idle states; default one minute; negative: only when Sweep is called.
	SweepEvery time.Duration
}

// Memory is the in-process Limiter for a server on one node.
//
// Keys are spread over shards by hash. A shard's mutex is held only to find
// or insert a key's entry; the decision runs under that entry's own mutex,
// so a busy or limited key never waits on, nor slows, another key beyond a
// map lookup. Memory stays bounded: each shard, at most once per
// SweepEvery, drops the entries whose state is idle (bucket full again and
// nothing counted today), so what is kept is the keys active today.
type Memory struct {
	shards     []memShard
	mask       uint64
	seed       maphash.Seed
	sweepEvery time.Duration
}

type memShard struct {
	mu        sync.Mutex
	m         map[string]*memEntry
	nextSweep time.Time
	_         [64]byte // keep shards' mutexes on separate cache lines
}

type memEntry struct {
	mu    sync.Mutex
	state State
	dead  bool // dropped from its shard by a sweep: look the key up again
}

// NewMemory returns an empty in-process Limiter.
func NewMemory(opts Options) *Memory {
	n := 256
	if opts.Shards > 0 {
		n = 1
		for n < opts.Shards {
			n <<= 1
		}
	}
	if opts.SweepEvery == 0 {
		opts.SweepEvery = time.Minute
	}
	m := &Memory{shards: make([]memShard, n), mask: uint64(n - 1), seed: maphash.MakeSeed(), sweepEvery: opts.SweepEvery}
	for i := range m.shards {
		m.shards[i].m = make(map[string]*memEntry)
	}
	return m
}

var _ Limiter = (*Memory)(nil)

// Allow implements Limiter. ctx is not used: nothing here waits.
func (m *Memory) Allow(_ context.Context, key string, tier Tier, now time.Time) (Decision, error) {
	if err := tier.Validate(); err != nil {
		return Decision{}, err
	}
	for {
		e := m.entry(key, now)
		e.mu.Lock()
		if e.dead {
			e.mu.Unlock()
			continue
		}
		var d Decision
		e.state = afterClockStep(e.state, tier, now)
		e.state, d = Take(e.state, tier, now)
		e.mu.Unlock()
		return d, nil
	}
}

// Usage implements Limiter.
func (m *Memory) Usage(_ context.Context, key string, tier Tier, now time.Time) (Usage, error) {
	if err := tier.Validate(); err != nil {
		return Usage{}, err
	}
	sh := m.shard(key)
	sh.mu.Lock()
	e := sh.m[key]
	sh.mu.Unlock()
	var s State
	if e != nil {
		e.mu.Lock()
		if !e.dead {
			s = e.state
		}
		e.mu.Unlock()
	}
	return UsageOf(s, tier, now), nil
}

// Sweep drops every idle state at now, one shard at a time, and returns how
// many it dropped. Allow sweeps each shard on its own every SweepEvery; call
// Sweep from a ticker when SweepEvery is negative.
func (m *Memory) Sweep(now time.Time) int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += sh.sweepLocked(now)
		sh.mu.Unlock()
	}
	return n
}

// Len is the number of keys held (for metrics and tests).
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

func (m *Memory) shard(key string) *memShard {
	return &m.shards[maphash.String(m.seed, key)&m.mask]
}

// entry finds or makes key's entry, sweeping the shard when it is due.
func (m *Memory) entry(key string, now time.Time) *memEntry {
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if m.sweepEvery > 0 && !now.Before(sh.nextSweep) {
		sh.sweepLocked(now)
		sh.nextSweep = now.Add(m.sweepEvery)
	}
	e := sh.m[key]
	if e == nil {
		e = &memEntry{}
		sh.m[key] = e
	}
	return e
}

// sweepLocked drops the shard's idle entries; the shard's mutex is held.
// Entries busy in Allow are skipped (they are not idle anyway). Lock order
// is shard then entry; Allow never holds an entry while taking a shard.
func (sh *memShard) sweepLocked(now time.Time) int {
	n := 0
	for k, e := range sh.m {
		if !e.mu.TryLock() {
			continue
		}
		if e.state.Idle(now) {
			e.dead = true
			delete(sh.m, k)
			n++
		}
		e.mu.Unlock()
	}
	return n
}

// ClockStepTolerance is how far beyond its capacity a bucket's end may lie
// ahead of now before the in-process limiter takes the clock to have
// stepped back.
const ClockStepTolerance = 5 * time.Second

// afterClockStep returns s with its bucket taken as empty at now when its
// end lies more than ClockStepTolerance beyond its capacity ahead of now:
// on one node that can only be the clock stepped back (an hour, say), and
// Take, which lets a refused request change nothing, would refuse every
// request until the clock caught up with the bucket's end. So the first
// request after the step is refused and the rate comes back one interval
// later, a burst at most. The PostgreSQL limiter, shared by nodes, does not
// do this: a node whose clock runs behind would reset the bucket for all of
// them again and again.
func afterClockStep(s State, tier Tier, now time.Time) State {
	if !tier.RateLimited() {
		return s
	}
	if capacity := tier.capacity(); s.Bucket.Full.Sub(now) > capacity+ClockStepTolerance {
		s.Bucket = BucketState{Full: now.Add(capacity), Interval: tier.Interval()}
	}
	return s
}
