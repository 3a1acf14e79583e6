package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
)

// idleQueues remembers the queues whose latest claim on this node took
// nothing, until a wake-up of the queue (a change committed by this node
// or heard from another) or a claim that takes something forgets them.
//
// It is only a hint of which receive to try first, never an answer: a
// receive of a remembered queue reads, in one small statement, whether any
// story of the queue is visible now (idleCheckSQL), and runs the claim
// only when one is. Long polls come back to queues that have nothing, 10,000
// at once when they were opened together; the claim's statement (its
// transaction block, the locking scan and the UPDATE it sets up even when
// it takes nothing) cost PostgreSQL about two and a half times the CPU of
// the check on an empty queue, and a node's re-issue wave queued the
// publishes behind it. A stale hint (a wake-up that crossed a claim still
// under way, a change whose wake-up was lost) costs one extra round trip,
// the check, before the claim.
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

// mark remembers that a claim of queueID took nothing.
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

// idleCheckSQL is what a receive of a queue that had nothing reads first:
// whether the queue's connection exists (as quickReceiveSQL's lim does) and
// the earliest visible_at of its stories. When that is later than now (or
// there is no story), nothing is ready and no head is exhausted (an
// exhausted head waiting for the dead-letter move is visible too), so the
// claim would take nothing, move nothing and report that visible_at as the
// next: the receive answers that without running it.
const idleCheckSQL = `SELECT EXISTS (SELECT 1 FROM connections WHERE id = $1),
	(SELECT min(visible_at) FROM stories WHERE queue_id = $1)`

// idleReceive answers a receive without an attempt id from the hint: done
// is true, with res the empty answer, when the queue's stories show
// nothing visible at p.Now; false when the claim must run (then the hint is
// dropped).
func (s *Store) idleReceive(ctx context.Context, p *bus.ReceiveParams) (res *bus.ReceiveResult, done bool, err error) {
	if !s.idle.has(p.QueueID) {
		return nil, false, nil
	}
	var exists bool
	var first *int64
	err = s.pool.QueryRow(ctx, idleCheckSQL, p.QueueID).Scan(&exists, &first)
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil // cannot happen (the statement always has its row); the claim decides
	}
	if err != nil {
		return nil, false, interpretError(err)
	}
	if !exists {
		s.idle.forget(p.QueueID)
		return nil, false, fmt.Errorf("%w: queue %s", bus.ErrNotFound, p.QueueID)
	}
	if first != nil && *first <= ms(p.Now) {
		s.idle.forget(p.QueueID)
		return nil, false, nil
	}
	s.idle.answered.Add(1)
	res = &bus.ReceiveResult{}
	if first != nil {
		res.NextVisibleAt = fromMS(*first)
	}
	return res, true, nil
}
