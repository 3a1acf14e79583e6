package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// gatherer runs concurrent calls that share a key in fewer transactions,
// as the SQLite writer's group commit does: a call whose key has fewer than
// inFlight runs under way runs at once, by itself; the calls that come
// while inFlight are under way wait together in one group, which runs as
// one call (one transaction, one commit, one WAL flush) as soon as one of
// the runs ends. Calls that arrive together share a commit instead of
// queueing for the WAL flush one after another.
//
// A gatherer with a hold also waits a little for the callers of the run
// that just ended: a group that gets its place, or a call that finds no run
// under way less than a hold after a run of several calls ended, waits
// until it has as many calls as that run had, or for a hold, but never
// longer than that run took. Callers that each wait for their answer
// before sending the next call (8 publishers of single messages) come back
// a few hundred microseconds after their run ends, just after the next
// run started without them; without the hold they alternate in two halves,
// each waiting for the other's run, and every run carries half of them
// (docs/benchmarks.md, the thirteenth round). It holds only while calls
// usually come back within the hold after a run ends (a moving average of
// the time from the latest run's end to each call): callers that come back
// later would make every hold run out for nothing. A call that comes by
// itself, when no run of several ended just before, is never delayed.
//
// Nothing here is a lock of the data: a group's run is an ordinary store
// transaction, bound by the same row locks as any other, so several nodes
// (each with its own gatherer) stay correct. A group whose run fails leaves
// each of its calls to run by itself (see run), so a call that would fail a
// shared transaction (a duplicate, a stale router) fails only its own.
// A group runs on its first call's context without its cancellation: the
// other calls wait for that run too, and a client that goes away must not
// fail, and so repeat, their work. The run's statements end as any
// statement does (row locks are held only by transactions that end).
type gatherer[C any] struct {
	// inFlight is how many runs of one key may be under way at once;
	// maxSize is the most items (messages, handles) a group carries; a
	// call of more than maxCall items is not gathered.
	inFlight, maxSize, maxCall int
	// join reports whether c may go into the group calls (no two of its
	// items may conflict with theirs); nil lets every call join.
	join func(calls []*C, c *C) bool
	// hold bounds how long a group waits for the callers of the run before
	// it (zero: never).
	hold time.Duration

	mu   sync.Mutex
	keys map[string]*gatherKey[C]
	// swept is when keys last lost the keys kept only for their latest
	// run (see finish).
	swept time.Time
}

// gatherKey is a key's state: its runs under way and the group waiting,
// and when its latest run ended, how long it took and how many calls it
// had (for the hold).
type gatherKey[C any] struct {
	running int
	next    *gatherGroup[C]

	lastEnd    time.Time
	lastTook   time.Duration
	lastServed int
	// comeBack is the moving average of the time from the latest run's
	// end to each call (zero until a run ended).
	comeBack time.Duration
}

// gatherGroup is calls waiting to run together. ready is closed when the
// group gets its place (placed: a run ended and handed it on, or the group
// took a free one to hold); done when the group's run ended. A group that
// holds (target > 0) still takes calls once it has its place, until it has
// target calls or its items fill it (full is closed then), or its hold
// runs out.
type gatherGroup[C any] struct {
	calls       []*C
	size        int
	ready, done chan struct{}
	placed      bool
	target      int
	hold        time.Duration
	full        chan struct{}
}

// fill closes full once the group has its target of calls, or as many
// items as a group may carry. Called under g.mu.
func (g *gatherer[C]) fill(grp *gatherGroup[C]) {
	if grp.target == 0 || (len(grp.calls) < grp.target && grp.size < g.maxSize) {
		return
	}
	select {
	case <-grp.full:
	default:
		close(grp.full)
	}
}

// holdFor returns how long a group may wait for the callers of k's latest
// run at now, and how many calls it waits for; zero when it must not wait.
func (g *gatherer[C]) holdFor(k *gatherKey[C], now time.Time) (time.Duration, int) {
	if g.hold <= 0 || k.lastServed < 2 {
		return 0, 0
	}
	// Whether calls come back soon enough is judged against the hold, not
	// against the latest run: runs without the callers are shorter, and
	// judged against those, callers that come back a little later than a
	// short run would keep the key from ever holding again.
	d := min(g.hold, k.lastTook)
	if now.Sub(k.lastEnd) >= d || k.comeBack >= g.hold {
		return 0, 0
	}
	return d, min(k.lastServed, g.maxSize)
}

// do runs c, of size items, with the calls of its key that come meanwhile:
// alone, when fewer than inFlight runs of key are under way, or else in a
// group. run gets the calls of one run (c alone, or a group, c among them)
// and must settle every one of them, as the caller reads c's result once do
// returns. A call of more than maxCall items runs alone at once.
func (g *gatherer[C]) do(key string, c *C, size int, run func(calls []*C)) {
	if size > g.maxCall {
		run([]*C{c})
		return
	}
	g.mu.Lock()
	if g.keys == nil {
		g.keys = map[string]*gatherKey[C]{}
	}
	k := g.keys[key]
	if k == nil {
		k = &gatherKey[C]{}
		g.keys[key] = k
	}
	var now time.Time // read only by a gatherer that holds
	if g.hold > 0 {
		now = time.Now()
	}
	if g.hold > 0 && !k.lastEnd.IsZero() {
		// Capped: past the hold a call says only that it came late, and a
		// key idle for an hour must not need dozens of calls to hold again.
		since := min(now.Sub(k.lastEnd), 2*g.hold)
		if k.comeBack == 0 {
			k.comeBack = since
		} else {
			k.comeBack += (since - k.comeBack) / 4
		}
	}
	if k.running < g.inFlight && k.next == nil {
		k.running++
		if hold, target := g.holdFor(k, now); hold > 0 {
			// A run of several just ended: its callers are likely on
			// their way back. c waits for them, in a group of its own
			// that already has the place.
			grp := &gatherGroup[C]{calls: []*C{c}, size: size, ready: make(chan struct{}), done: make(chan struct{}),
				placed: true, target: target, hold: hold, full: make(chan struct{})}
			close(grp.ready)
			g.fill(grp)
			k.next = grp
			g.mu.Unlock()
			g.runGroup(key, k, grp, run)
			return
		}
		g.mu.Unlock()
		// Deferred, as below: a run that panics (net/http recovers a
		// handler's panic) must still hand its place on, or the key's
		// later calls would wait for ever.
		started := time.Now()
		defer func() { g.finish(key, k, 1, started) }()
		run([]*C{c})
		return
	}
	if grp := k.next; grp != nil {
		if grp.size+size <= g.maxSize && (g.join == nil || g.join(grp.calls, c)) {
			grp.calls = append(grp.calls, c)
			grp.size += size
			g.fill(grp)
			g.mu.Unlock()
			<-grp.done
			return
		}
		// It cannot share the waiting group's transaction: it runs by
		// itself now, beside the runs under way, as it would without the
		// gatherer.
		g.mu.Unlock()
		run([]*C{c})
		return
	}
	grp := &gatherGroup[C]{calls: []*C{c}, size: size, ready: make(chan struct{}), done: make(chan struct{})}
	k.next = grp
	g.mu.Unlock()
	g.runGroup(key, k, grp, run)
}

// runGroup waits for grp's place (and, when it holds, for its calls or its
// hold), takes it off the key and runs it.
func (g *gatherer[C]) runGroup(key string, k *gatherKey[C], grp *gatherGroup[C], run func(calls []*C)) {
	<-grp.ready
	if grp.target > 0 { // set before ready was closed
		t := time.NewTimer(grp.hold)
		select {
		case <-grp.full:
		case <-t.C:
		}
		t.Stop()
	}
	g.mu.Lock()
	if k.next == grp {
		k.next = nil // it takes no more calls from now on
	}
	calls := grp.calls
	g.mu.Unlock()
	started := time.Now()
	defer close(grp.done)
	defer func() { g.finish(key, k, len(calls), started) }()
	run(calls)
}

// finish ends a run of key, of served calls, started at started: the group
// waiting, if any, takes its place (holding for the run's callers when the
// gatherer holds), or else the key has one run fewer. A key with no run
// and no group is kept while a call may still hold for its latest run's
// callers, and dropped at a later sweep.
func (g *gatherer[C]) finish(key string, k *gatherKey[C], served int, started time.Time) {
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	k.lastEnd, k.lastTook, k.lastServed = now, now.Sub(started), served
	// A group that already has a place (it holds, beside this run when
	// inFlight > 1) is not handed another.
	if grp := k.next; grp != nil && !grp.placed {
		if hold, _ := g.holdFor(k, now); hold > 0 {
			// The callers of the run that ended come back to this group.
			grp.hold, grp.full = hold, make(chan struct{})
			grp.target = min(len(grp.calls)+served, g.maxSize)
			g.fill(grp)
		} else {
			k.next = nil // it takes no more calls from now on
		}
		grp.placed = true
		close(grp.ready)
		return
	}
	k.running--
	if k.running == 0 && g.hold <= 0 {
		delete(g.keys, key)
	}
	if g.hold > 0 && now.Sub(g.swept) > time.Second {
		g.swept = now
		for key, k := range g.keys {
			if k.running == 0 && k.next == nil && now.Sub(k.lastEnd) > g.hold {
				delete(g.keys, key)
			}
		}
	}
}

// Gathering of the usual publishes and acks (quickPublish, quickAck).
// Measured on the comparison's workload (8 publishers of one message, 8
// receivers acknowledging 10 at a time; docs/benchmarks.md): each such call
// is a transaction whose commit waits for a WAL flush, and the flush, not
// the statements, bounded the rate.
const (
	// gatherInFlight is how many gathered runs of one queue's receives or
	// acks may be under way at once on a node; the calls that come
	// meanwhile wait together for the run to end and then run as one
	// group. One, like the publishes (gatherPublishesInFlight): with two,
	// the second run started while the first waited for its WAL flush,
	// but the groups were half as large and the database spent a quarter
	// more CPU a message drained (105 against 83 µs; one node drained 8%
	// more with one, two nodes 4% more, alternated runs of the
	// comparison's drain in docs/benchmarks.md, the eleventh round).
	// Publishes gather behind one run too, which made groups twice as
	// large and single publishes faster than two did.
	gatherInFlight          = 1
	gatherPublishesInFlight = 1
	// gatherPublishHold bounds how long a group of publishes waits for
	// the callers of the run before it (the gatherer's hold; never longer
	// than that run took). 8 publishers of single messages, one node:
	// 4,938 and 5,119 msg/s without a hold, 6,191 and 6,339 with 300 µs,
	// 6,544 and 6,355 with 600 µs, 6,485 and 6,676 with 1 ms, 6,556 and
	// 6,706 with 2 ms (docs/benchmarks.md, the thirteenth round). Receives
	// and acks do not hold: the drain, bound by the CPU, was no faster
	// with a hold of acks and slower with one of receives.
	gatherPublishHold = time.Millisecond
	// gatherMaxMessages and gatherMaxHandles bound a group, so that its
	// transaction holds its row locks no longer than a batch publish's
	// does. An ack of more than gatherMaxCall handles (a receive of more
	// messages) already shares its commit among them: it runs by itself,
	// at once, never waiting for a group. Only publishes of one message
	// are gathered: gathering those of 10 too made two nodes slower on
	// BenchmarkMessagePath (publishes of 10 beside the drain) in two
	// sittings (docs/benchmarks.md).
	gatherMaxMessages = 100
	gatherMaxHandles  = 100
	gatherMaxCall     = 10
)

// publishCall is one MessagePublish waiting in the publish gatherer. ids are
// its message ids (the quick publish needs them distinct in a group, as in
// a call). retry: the group it was in failed; it runs by itself.
type publishCall struct {
	ctx   context.Context
	p     *bus.PublishParams
	ids   map[string]bool
	out   []bus.PublishOutcome
	ok    bool
	err   error
	retry bool
}

func newPublishGatherer() *gatherer[publishCall] {
	return &gatherer[publishCall]{inFlight: gatherPublishesInFlight, maxSize: gatherMaxMessages, maxCall: 1, hold: gatherPublishHold,
		join: func(calls []*publishCall, c *publishCall) bool {
			for _, o := range calls {
				for id := range c.ids {
					if o.ids[id] {
						return false
					}
				}
			}
			return true
		}}
}

// groupContext is the context of a group's run: the first call's values,
// and not ended by any one caller, since the others wait for the same run;
// but once every caller's context has ended (each went away, or reached
// the node's deadline for a store that does not answer), nobody waits for
// the run any more and it ends too, with the last one's cause. done
// releases it when the run is over.
func groupContext[C any](calls []*C, ctxOf func(*C) context.Context) (ctx context.Context, done func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(ctxOf(calls[0])))
	over := make(chan struct{})
	go func() {
		var last context.Context
		for _, c := range calls {
			last = ctxOf(c)
			select {
			case <-last.Done():
			case <-over:
				return
			}
		}
		cancel(context.Cause(last))
	}()
	return ctx, func() { close(over); cancel(nil) }
}

// gatheredPublish is quickPublish for p, in one transaction with the
// concurrent publishes of the same workspace and producer when there are
// any. ok is false, with nothing done, as for quickPublish.
func (s *Store) gatheredPublish(ctx context.Context, p *bus.PublishParams) ([]bus.PublishOutcome, bool, error) {
	ids := make(map[string]bool, len(p.Messages))
	for _, m := range p.Messages {
		if ids[m.MessageID] {
			return nil, false, nil // the full publish's case
		}
		ids[m.MessageID] = true
	}
	if len(ids) == 0 {
		return nil, false, nil
	}
	c := &publishCall{ctx: ctx, p: p, ids: ids}
	s.publishes.do(p.WorkspaceID+"\x00"+p.ProducerID, c, len(p.Messages), s.runPublishes)
	if c.retry {
		return s.quickPublish(ctx, p)
	}
	return c.out, c.ok, c.err
}

// runPublishes runs a publish gatherer's group: one call as quickPublish,
// several as one quickPublish of all their messages (call after call, each
// call's in its order; stories get them in that order), stamped with the
// latest of their times. When that fails, every call runs by itself.
func (s *Store) runPublishes(calls []*publishCall) {
	if len(calls) == 1 {
		c := calls[0]
		c.out, c.ok, c.err = s.quickPublish(c.ctx, c.p)
		return
	}
	first := calls[0].p
	all := &bus.PublishParams{WorkspaceID: first.WorkspaceID, ProducerID: first.ProducerID,
		Now: first.Now, DedupWindow: first.DedupWindow}
	for _, c := range calls {
		all.Messages = append(all.Messages, c.p.Messages...)
		if c.p.Now.After(all.Now) {
			all.Now = c.p.Now
		}
	}
	ctx, done := groupContext(calls, func(c *publishCall) context.Context { return c.ctx })
	defer done()
	out, ok, err := s.quickPublish(ctx, all)
	if err != nil || !ok {
		for _, c := range calls {
			c.retry = true
		}
		return
	}
	for _, c := range calls {
		n := len(c.p.Messages)
		c.out, c.ok, out = out[:n:n], true, out[n:]
	}
}

// ackCall is one MessageAck waiting in the ack gatherer; stories are its
// handles' stories (distinct within a group, as quickAck needs them).
type ackCall struct {
	ctx     context.Context
	p       *bus.SettleParams
	stories map[int64]bool
	out     []bus.SettleResult
	ok      bool
	err     error
	retry   bool
}

func newAckGatherer() *gatherer[ackCall] {
	return &gatherer[ackCall]{inFlight: gatherInFlight, maxSize: gatherMaxHandles, maxCall: gatherMaxCall,
		join: func(calls []*ackCall, c *ackCall) bool {
			for _, o := range calls {
				for id := range c.stories {
					if o.stories[id] {
						return false
					}
				}
			}
			return true
		}}
}

// gatheredAck is quickAck for p, in one transaction with the concurrent
// acks of the same queue when there are any. ok is false, with nothing
// done, as for quickAck.
func (s *Store) gatheredAck(ctx context.Context, p *bus.SettleParams) ([]bus.SettleResult, bool, error) {
	stories := make(map[int64]bool, len(p.Handles))
	for _, h := range p.Handles {
		if h.QueueID != p.QueueID || stories[h.StoryID] {
			return nil, false, nil // the full ack's case
		}
		stories[h.StoryID] = true
	}
	if len(stories) == 0 {
		return nil, false, nil
	}
	c := &ackCall{ctx: ctx, p: p, stories: stories}
	s.acks.do(p.QueueID, c, len(p.Handles), s.runAcks)
	if c.retry {
		return s.quickAck(ctx, p)
	}
	return c.out, c.ok, c.err
}

// runAcks runs an ack gatherer's group: one call as quickAck, several as
// one quickAck of all their handles, stamped with the latest of their
// times. When that fails, every call runs by itself (acks are idempotent:
// a handle the failed run did acknowledge is acknowledged again).
func (s *Store) runAcks(calls []*ackCall) {
	if len(calls) == 1 {
		c := calls[0]
		c.out, c.ok, c.err = s.quickAck(c.ctx, c.p)
		return
	}
	first := calls[0].p
	all := &bus.SettleParams{QueueID: first.QueueID, Now: first.Now}
	for _, c := range calls {
		all.Handles = append(all.Handles, c.p.Handles...)
		if c.p.Now.After(all.Now) {
			all.Now = c.p.Now
		}
	}
	ctx, done := groupContext(calls, func(c *ackCall) context.Context { return c.ctx })
	defer done()
	out, ok, err := s.quickAck(ctx, all)
	if err != nil || !ok {
		for _, c := range calls {
			c.retry = true
		}
		return
	}
	for _, c := range calls {
		n := len(c.p.Handles)
		c.out, c.ok, out = out[:n:n], true, out[n:]
	}
}

// receiveCall is one MessageReceive (without an attempt id) waiting in the
// receive gatherer.
type receiveCall struct {
	ctx   context.Context
	p     *bus.ReceiveParams
	res   *bus.ReceiveResult
	ok    bool
	err   error
	retry bool
}

func newReceiveGatherer() *gatherer[receiveCall] {
	return &gatherer[receiveCall]{inFlight: gatherInFlight, maxSize: gatherMaxClaim, maxCall: gatherMaxCall}
}

// gatherMaxClaim bounds the messages a group of receives claims at once.
const gatherMaxClaim = 100

// gatheredReceive is quickReceive for p, in one statement with the
// concurrent receives of the same queue and visibility when there are any:
// it claims up to their Max together and hands the deliveries out in
// order, each call up to its Max. Concurrent receivers of one queue
// otherwise all scan the same ready stories and skip each other's locks.
// ok is false, with nothing done, as for quickReceive.
func (s *Store) gatheredReceive(ctx context.Context, p *bus.ReceiveParams) (*bus.ReceiveResult, bool, error) {
	if p.Max < 1 {
		return s.quickReceive(ctx, p)
	}
	c := &receiveCall{ctx: ctx, p: p}
	s.receives.do(fmt.Sprint(p.QueueID, "\x00", int64(p.Visibility)), c, p.Max, s.runReceives)
	if c.retry {
		return s.quickReceive(ctx, p)
	}
	return c.res, c.ok, c.err
}

// runReceives runs a receive gatherer's group: one call as quickReceive,
// several as one quickReceive of the sum of their Max at the latest of
// their times, whose deliveries go to the calls in turn (the first call
// gets the first up to its Max, and so on; a call may get none when fewer
// were ready). Each gets the same NextVisibleAt. When the claim fails, or
// finds exhausted heads to move first, every call runs by itself.
func (s *Store) runReceives(calls []*receiveCall) {
	if len(calls) == 1 {
		c := calls[0]
		c.res, c.ok, c.err = s.quickReceive(c.ctx, c.p)
		return
	}
	first := calls[0].p
	all := &bus.ReceiveParams{QueueID: first.QueueID, Visibility: first.Visibility, Now: first.Now}
	for _, c := range calls {
		all.Max += c.p.Max
		if c.p.Now.After(all.Now) {
			all.Now = c.p.Now
		}
	}
	ctx, done := groupContext(calls, func(c *receiveCall) context.Context { return c.ctx })
	defer done()
	res, ok, err := s.quickReceive(ctx, all)
	if err != nil || !ok {
		for _, c := range calls {
			c.retry = true
		}
		return
	}
	ds := res.Deliveries
	for _, c := range calls {
		n := min(c.p.Max, len(ds))
		r := &bus.ReceiveResult{NextVisibleAt: res.NextVisibleAt}
		if n > 0 {
			r.Deliveries = ds[:n:n]
		}
		ds = ds[n:]
		c.res, c.ok = r, true
	}
}
