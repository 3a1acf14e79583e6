package bus

import (
	"slices"
	"strings"
	"sync"
)

// RouteConsumer is a consumer connection as routing sees it: its id (the
// id of its queue) and its subscriptions.
type RouteConsumer struct {
	ID            string
	Subscriptions []Subscription
}

// Router is the compiled routing of one workspace: which consumer queues
// take a message of a topic from a producer. It answers as a loop of
// Matches over every consumer would, in the order the consumers were
// given, but its work grows with the subscriptions that match and the
// topic's length, not with the number of consumers: the subscription
// patterns are kept in a tree of segments, in which a topic follows only
// its own segments and the "*" and ">" branches. A Router is never
// changed once built, so any number of goroutines may use it.
type Router struct {
	ids  []string
	root routeNode
	subs int // how many subscriptions it holds (its weight in a RouteCache)
}

// routeNode is where the patterns stand after some segments.
type routeNode struct {
	next map[string]*routeNode // a literal segment
	star *routeNode            // "*": any one segment
	rest []routeEntry          // patterns with ">" here: one or more segments more
	end  []routeEntry          // patterns that end here
}

// routeEntry is one subscription of a consumer at the node of its pattern.
type routeEntry struct {
	consumer  int32    // index into Router.ids
	producers []string // empty: every producer
}

// accepts reports whether the entry takes messages from producerID.
func (e *routeEntry) accepts(producerID string) bool {
	return len(e.producers) == 0 || slices.Contains(e.producers, producerID)
}

// NewRouter compiles the routing of consumers, given in the order their
// queues are to be listed.
func NewRouter(consumers []RouteConsumer) *Router {
	r := &Router{ids: make([]string, len(consumers))}
	for i, c := range consumers {
		r.ids[i] = c.ID
		for _, s := range c.Subscriptions {
			r.add(int32(i), s)
			r.subs++
		}
	}
	return r
}

// add puts one subscription of consumer i in the tree, reading its pattern
// as MatchTopic does: segments split at ".", "*" for one segment, and ">"
// for one or more, ending the pattern wherever it stands.
func (r *Router) add(i int32, s Subscription) {
	e := routeEntry{consumer: i, producers: s.Producers}
	n := &r.root
	for _, seg := range strings.Split(s.Topic, ".") {
		switch seg {
		case ">":
			n.rest = append(n.rest, e)
			return
		case "*":
			if n.star == nil {
				n.star = &routeNode{}
			}
			n = n.star
		default:
			child := n.next[seg]
			if child == nil {
				if n.next == nil {
					n.next = map[string]*routeNode{}
				}
				child = &routeNode{}
				n.next[seg] = child
			}
			n = child
		}
	}
	n.end = append(n.end, e)
}

// Consumers is how many consumers the router was built from.
func (r *Router) Consumers() int { return len(r.ids) }

// Route returns the ids of the consumer queues that take a message with
// topic from producerID, in the order the consumers were given; nil when
// none does. The caller owns the slice.
func (r *Router) Route(topic, producerID string) []string {
	var buf [16]int32
	hits := r.root.collect(topic, producerID, buf[:0])
	if len(hits) == 0 {
		return nil
	}
	slices.Sort(hits)
	hits = slices.Compact(hits)
	out := make([]string, len(hits))
	for k, i := range hits {
		out[k] = r.ids[i]
	}
	return out
}

// collect appends the consumers of the entries that match topic (the
// segments not yet matched, at least one) from node n on.
func (n *routeNode) collect(topic, producerID string, hits []int32) []int32 {
	for {
		seg, tail, more := strings.Cut(topic, ".")
		// At least one segment is left, which is what ">" needs.
		hits = appendAccepted(hits, n.rest, producerID)
		if n.star != nil {
			if more {
				hits = n.star.collect(tail, producerID, hits)
			} else {
				hits = appendAccepted(hits, n.star.end, producerID)
			}
		}
		child := n.next[seg]
		if child == nil {
			return hits
		}
		if !more {
			return appendAccepted(hits, child.end, producerID)
		}
		n, topic = child, tail
	}
}

// appendAccepted appends the consumers of the entries that accept
// producerID.
func appendAccepted(hits []int32, es []routeEntry, producerID string) []int32 {
	for k := range es {
		if es[k].accepts(producerID) {
			hits = append(hits, es[k].consumer)
		}
	}
	return hits
}

// DefaultRouteCacheWeight is the number of subscriptions a zero RouteCache
// keeps routers for, over all its workspaces.
const DefaultRouteCacheWeight = 100_000

// RouteCache keeps the routers of recently used workspaces, each with the
// routing version of the workspace it was built from. A store bumps a
// workspace's routing version in the transaction of every change to the
// set of its consumers or their subscriptions, so a router found under the
// version a transaction reads is the routing that transaction would
// compute from the consumers themselves. The zero value is ready to use;
// it is safe for concurrent use.
type RouteCache struct {
	// MaxWeight bounds the subscriptions held over all routers (0 for
	// DefaultRouteCacheWeight); a router heavier than that alone is still
	// kept, alone.
	MaxWeight int

	mu     sync.Mutex
	m      map[string]routeCacheEntry
	weight int
}

type routeCacheEntry struct {
	version int64
	router  *Router
}

// Get returns the router of workspace built at version, or nil.
func (c *RouteCache) Get(workspaceID string, version int64) *Router {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[workspaceID]; ok && e.version == version {
		return e.router
	}
	return nil
}

// Latest returns the router kept for workspace and the routing version it
// was built at, whichever that is; ok is false when none is kept. A caller
// that uses it must check, in the same statement as its writes, that the
// workspace is still at that version.
func (c *RouteCache) Latest(workspaceID string) (r *Router, version int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[workspaceID]
	return e.router, e.version, ok
}

// Put keeps r as the router of workspace at version, in place of any
// other, dropping routers of other workspaces while the cache holds more
// subscriptions than its bound.
func (c *RouteCache) Put(workspaceID string, version int64, r *Router) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]routeCacheEntry{}
	}
	if old, ok := c.m[workspaceID]; ok {
		c.weight -= old.router.weight()
	}
	c.m[workspaceID] = routeCacheEntry{version: version, router: r}
	c.weight += r.weight()
	limit := c.MaxWeight
	if limit <= 0 {
		limit = DefaultRouteCacheWeight
	}
	for id, e := range c.m { // map order: an arbitrary victim each time
		if c.weight <= limit {
			break
		}
		if id != workspaceID {
			delete(c.m, id)
			c.weight -= e.router.weight()
		}
	}
}

// Len is how many workspaces the cache holds routers for.
func (c *RouteCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// weight is what r counts for in a RouteCache: its subscriptions, and one
// for the router itself, so that routers without any still count.
func (r *Router) weight() int { return r.subs + 1 }
