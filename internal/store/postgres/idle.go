package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sombus/sombus/internal/bus"
)

// idleQueues remembers the queues whose latest claim on this node took
// nothing, or fewer stories than it asked for (all it saw ready and
// unlocked) at a visibility ahead, until a wake-up of the queue (a change
// committed by this node or heard from another), a claim that takes as
// many as it asked for or at a visibility of zero, or a check that finds a
// story visible or the queue gone forgets them.
//
// It is only a hint of which receive to try first, never an answer: a
// receive of a remembered queue reads, in one small statement, whether any
// story of the queue is visible now (idleCheckSQL), and runs the claim
// only when one is. Long polls come back to queues that have nothing, 10,000
// at once when they were opened together; the claim (its transaction
// block, the locking scan and the UPDATE it sets up even when it takes
// nothing) cost PostgreSQL 150-200 us of CPU a receive in such a wave, and
// the node's re-issue wave queued the publishes behind it; the checks,
// gathered (idleChecks), cost it about 9 us a receive. A stale hint (a
// wake-up that crossed a claim still under way, a change whose wake-up was
// lost or not sent to this node, a story the claim skipped while another
// transaction held it) costs one extra round trip, the check, before the
// claim.
type idleQueues struct {
	mu sync.Mutex
	m  map[string]struct{}
	// answered counts the receives the check answered (tests read it).
	answered atomic.Int64
}

// maxIdleQueues bounds the hints (a queue id is a few dozen bytes); past
// it they start again from none, which only costs each queue's next
// receive the claim statement.
const maxIdleQueues = 1 << 17

func (h *idleQueues) has(queueID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.m[queueID]
	return ok
}

// mark remembers that a claim of queueID took nothing, or all it saw.
func (h *idleQueues) mark(queueID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxIdleQueues {
		h.m = make(map[string]struct{})
	}
	h.m[queueID] = struct{}{}
}

// forget drops the hints of queueIDs.
func (h *idleQueues) forget(queueIDs ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, q := range queueIDs {
		delete(h.m, q)
	}
}

// idleCheckSQL is what a receive of a queue with the hint reads first,
// for each queue of $1: whether the queue's connection exists (as
// quickReceiveSQL's lim does) and the earliest visible_at of its stories.
// When that is later than now (or there is no story), nothing is ready and
// no head is exhausted (an exhausted head waiting for the dead-letter move
// is visible too), so the claim would take nothing, move nothing and report
// that visible_at as the next: the receive answers that without running
// it. Concurrent checks share one statement (idleChecks): a wave of
// re-issued polls takes a few pool connections, not all of them, and the
// publishes and acks that come meanwhile find one free.
const idleCheckSQL = `SELECT q.id, EXISTS (SELECT 1 FROM connections c WHERE c.id = q.id),
		(SELECT min(s.visible_at) FROM stories s WHERE s.queue_id = q.id)
	FROM unnest($1::text[]) AS q(id)`

// idleCall is one receive's check waiting in the idle check gatherer.
type idleCall struct {
	ctx     context.Context
	queueID string
	exists  bool
	first   *int64
	err     error
}

// Gathering of the checks: one statement at a time, of at most
// idleCheckMax queues; the checks that come while it runs wait for it and
// go together in the next. With two statements under way, as before, the
// groups were half as large: BenchmarkIdleReceive (64 callers over 256
// empty queues, 20000x, three alternated pairs) took 6.5-8.9 µs of the
// database's CPU and 3.5-5.1 µs of the node's a receive against 4.3-5.7
// and 3.7-4.2 with one, in the same time a receive (7.5-8.2 µs against
// 7.7-8.1).
const (
	idleChecksInFlight = 1
	idleCheckMax       = 256
)

func newIdleGatherer() *gatherer[idleCall] {
	return &gatherer[idleCall]{inFlight: idleChecksInFlight, maxSize: idleCheckMax, maxCall: 1}
}

// runIdleChecks runs a group of checks in one statement, on the first
// call's context (without its cancellation when others wait on it too).
func (s *Store) runIdleChecks(calls []*idleCall) {
	ctx := calls[0].ctx
	if len(calls) > 1 {
		ctx = context.WithoutCancel(ctx)
	}
	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = c.queueID
	}
	type found struct {
		exists bool
		first  *int64
	}
	byID := make(map[string]found, len(calls))
	err := func() error {
		rows, err := s.pool.Query(ctx, idleCheckSQL, ids)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var f found
			if err := rows.Scan(&id, &f.exists, &f.first); err != nil {
				return err
			}
			byID[id] = f
		}
		return rows.Err()
	}()
	for _, c := range calls {
		f, ok := byID[c.queueID]
		switch {
		case err != nil:
			c.err = interpretError(err)
		case !ok:
			c.err = fmt.Errorf("idle check: no row for queue %s", c.queueID)
		default:
			c.exists, c.first = f.exists, f.first
		}
	}
}

// idleReceive answers a receive without an attempt id from the hint: done
// is true, with res the empty answer, when the queue's stories show
// nothing visible at p.Now; false when the claim must run (then the hint is
// dropped).
func (s *Store) idleReceive(ctx context.Context, p *bus.ReceiveParams) (res *bus.ReceiveResult, done bool, err error) {
	if !s.idle.has(p.QueueID) {
		return nil, false, nil
	}
	c := &idleCall{ctx: ctx, queueID: p.QueueID}
	s.idleChecks.do("", c, 1, s.runIdleChecks)
	if c.err != nil {
		return nil, false, c.err
	}
	if !c.exists {
		s.idle.forget(p.QueueID)
		return nil, false, fmt.Errorf("%w: queue %s", bus.ErrNotFound, p.QueueID)
	}
	if c.first != nil && *c.first <= ms(p.Now) {
		s.idle.forget(p.QueueID)
		return nil, false, nil
	}
	s.idle.answered.Add(1)
	res = &bus.ReceiveResult{}
	if c.first != nil {
		res.NextVisibleAt = fromMS(*c.first)
	}
	return res, true, nil
}
