package limits

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// DefaultLongPolls is the suggested number of long polls one connection may
// have waiting at once on one node.
const DefaultLongPolls = 10

// LongPollGate caps the long polls waiting at once per key (connection) on
// this node, so one connection cannot hold an unbounded number of the
// server's goroutines and sockets. The zero value is ready to use and safe
// for concurrent use; memory is held only for keys with a poll waiting.
//
// Past the cap a long poll is not queued and does not wait: Acquire answers
// false at once and the caller answers 429 rate.limited with Retry-After 1
// (LongPollRefusal), with the RateLimit-* headers of the request's Decision
// as on every answer. Order: Allow first (the refused poll is a request and
// counts like any other), then Acquire. Polls with wait=0 return at once and
// need not pass the gate.
type LongPollGate struct {
	once   sync.Once
	seed   maphash.Seed
	shards [64]gateShard
}

type gateShard struct {
	mu sync.Mutex
	n  map[string]int
}

// Acquire takes one of key's max places. It returns a release function to
// call (once; later calls do nothing) when the poll answers, and true; or,
// when max polls of key are already waiting, nil and false. max ≤ 0 means
// no cap.
func (g *LongPollGate) Acquire(key string, max int) (release func(), ok bool) {
	sh := g.shard(key)
	sh.mu.Lock()
	if sh.n == nil {
		sh.n = make(map[string]int)
	}
	if max > 0 && sh.n[key] >= max {
		sh.mu.Unlock()
		return nil, false
	}
	sh.n[key]++
	sh.mu.Unlock()
	var done atomic.Bool
	return func() {
		if done.Swap(true) {
			return
		}
		sh.mu.Lock()
		if sh.n[key] <= 1 {
			delete(sh.n, key)
		} else {
			sh.n[key]--
		}
		sh.mu.Unlock()
	}, true
}

// Active is the number of key's polls holding a place.
func (g *LongPollGate) Active(key string) int {
	sh := g.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.n[key]
}

func (g *LongPollGate) shard(key string) *gateShard {
	g.once.Do(func() { g.seed = maphash.MakeSeed() })
	return &g.shards[maphash.String(g.seed, key)%uint64(len(g.shards))]
}

// LongPollRefusal is the 429 answer to a long poll refused by the gate:
// rule rate.limited, Retry-After one second.
func LongPollRefusal(max int) *bus.Error {
	e := bus.Errorf(bus.RuleRateLimited,
		"At most %d long polls may wait at once on this connection; answer or cancel one, or retry after 1s.", max)
	e.RetryAfter = time.Second
	return e
}
