package sqlite

import (
	"database/sql"
	"errors"
	"math"
	"sync"
	"sync/atomic"

	"github.com/google/btree"
)

// heads is the writer's in-memory index of the delivery state of every
// story head of the consumer queues it has loaded: which heads are ready,
// in flight or delayed, in the order the claim scan takes them (oldest
// visible_at first, then story id), and which were received at least once
// (the dead-letter scan). The stories table stays the durable truth: every
// change is written there in the same transaction, and the index is
// loaded from it, one queue at a time, the first time the writer needs
// the queue.
//
// Only the writer goroutine touches it (no lock). A change is applied
// right after the statement that makes it, so later operations of the same
// group commit see it. When an operation that changed the index fails (its
// savepoint is rolled back), or a transaction is lost or fails to commit,
// the writer drops the whole index (reset); queues load again from the
// tables as they are after the rollback.
//
// The index is only valid while no other process writes the queue tables
// of the file: the store holds a lock on a companion file for as long as
// it is open (see lockfile.go).
type heads struct {
	queues map[string]*headQueue
	// The connections table, as receive and settle read it: each queue's
	// attempt limit. Any change of a connection clears it
	// (connectionsChanged); it fills again from the table. (Publish routes
	// through the store's RouteCache, checked against the workspace's
	// routing version.)
	limits map[string]int
	// changes counts the changes made to the index, so that the writer can
	// tell whether a failed operation touched it.
	changes uint64
	// touched holds the queues whose received heads changed (or that
	// loaded) in the open transaction: after its commit, the writer
	// publishes their out sets to snaps (publish).
	touched map[string]*headQueue
	// firstTouched holds the queues whose story heads changed in the open
	// transaction: after its commit, the writer publishes their earliest
	// visible_at to snaps (publish).
	firstTouched map[string]*headQueue
	// snaps are the committed out sets the read pool counts from.
	snaps *outSnaps
	// swept is set once every consumer queue was loaded since the last
	// reset or drop (by the dead-letter sweep): from then on every queue
	// with a received head is loaded, since only the writer receives and
	// it loads a queue before it receives from it (a queue created later
	// starts empty), so the sweep reads only the loaded queues that have
	// received heads (withReceived) instead of every connection.
	swept bool
	// nextMsg is the row id the next message row gets (0: not read yet):
	// publish names each new row's id, so that the row after it in its
	// story can point to it (prev) in the same statement. Ids only grow
	// while the writer runs; after a reset it is read again from the
	// table (the largest id there plus one), so an id left unused by a
	// rolled-back operation may be given again, never one in use.
	nextMsg int64
}

// outHead is a received head as the queue counts see it: in flight
// (delayed false) or delayed while visibleAt is after now, else ready. A
// value, so that a published tree never changes under its readers.
type outHead struct {
	visibleAt int64
	id        int64
	delayed   bool
}

func outLess(a, b outHead) bool {
	if a.visibleAt != b.visibleAt {
		return a.visibleAt < b.visibleAt
	}
	return a.id < b.id
}

// outSnaps holds, per loaded queue, the out set (its received heads) as of
// the writer's last commit that changed it: the in flight and delayed
// counts read it from any goroutine, without scanning the queue's stories.
// A queue without an entry is counted from the tables.
type outSnaps struct {
	mu sync.RWMutex
	m  map[string]*btree.BTreeG[outHead]
	// first holds, per queue in m, the earliest visible_at of its story
	// heads as of the same commit (math.MaxInt64 when it has no story), so
	// that a receive can tell that nothing is visible without the writer
	// (idle).
	first map[string]int64
	// gen is odd from just before the writer's COMMIT until the out sets
	// of that commit are published (or the commit failed and they were
	// dropped), even otherwise: a read of the tables and of m made while
	// it held one even value saw one commit in both (consistentRead).
	gen atomic.Uint64
	// load, when set, has the writer load a queue (and so publish its out
	// set); loading holds the queues being loaded.
	load    func(queueID string)
	loading sync.Map
}

// want asks, once at a time per queue, for a queue that has no published
// out set to be loaded in the background, so that its next counts need
// not read its stories.
func (o *outSnaps) want(queueID string) {
	if o == nil || o.load == nil {
		return
	}
	if _, busy := o.loading.LoadOrStore(queueID, struct{}{}); busy {
		return
	}
	go func() {
		defer o.loading.Delete(queueID)
		o.load(queueID)
	}()
}

func newOutSnaps() *outSnaps {
	return &outSnaps{m: make(map[string]*btree.BTreeG[outHead]), first: make(map[string]int64)}
}

// idle reports whether, as of the writer's last commit that changed the
// queue, none of its story heads is visible at now; next is then the
// earliest time one becomes visible (math.MaxInt64 when it has no story).
// False when the queue has no published state (not loaded, or dropped).
//
// A commit that made a head visible and is not published yet is not seen:
// a caller that waits for the queue's wake-ups registers before it looks,
// and the wake-up for that commit comes after its publication.
func (o *outSnaps) idle(queueID string, now int64) (next int64, ok bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	next, ok = o.first[queueID]
	return next, ok && next > now
}

// get returns the committed out set of a queue, nil if none is published.
// The tree is never changed again: readers may walk it concurrently.
func (o *outSnaps) get(queueID string) *btree.BTreeG[outHead] {
	if o == nil {
		return nil
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.m[queueID]
}

// count counts the out set t at now: in flight and delayed.
func countOut(t *btree.BTreeG[outHead], now int64) (inFlight, delayed int64) {
	t.Descend(func(o outHead) bool {
		if o.visibleAt <= now {
			return false
		}
		if o.delayed {
			delayed++
		} else {
			inFlight++
		}
		return true
	})
	return inFlight, delayed
}

// head is one story's delivery state: the stories row's columns.
type head struct {
	id           int64  // the story id
	key          string // the story key (correlation id)
	seq          int64  // the head's sequence number
	tail         int64  // the last sequence number taken
	headID       int64  // the head's message row id
	tailID       int64  // the tail's message row id
	visibleAt    int64  // ms
	nonce        int64  // 0 until the head is received
	receiveCount int
	delayed      bool // released with a delay
}

// headLess orders heads as the claim scan does: visible_at, then id.
func headLess(a, b *head) bool {
	if a.visibleAt != b.visibleAt {
		return a.visibleAt < b.visibleAt
	}
	return a.id < b.id
}

// headQueue is the index of one queue.
type headQueue struct {
	h       *heads
	id      string
	stories map[int64]*head
	byKey   map[string]*head
	byVis   *btree.BTreeG[*head]   // every story
	recv    *btree.BTreeG[*head]   // stories whose head was received (receiveCount > 0)
	out     *btree.BTreeG[outHead] // the same stories, as values (published for the counts)
	pivot   head                   // nextVisible's search key (the writer's alone)
}

func newHeads() *heads {
	return &heads{queues: make(map[string]*headQueue), limits: make(map[string]int),
		touched: make(map[string]*headQueue), firstTouched: make(map[string]*headQueue), snaps: newOutSnaps()}
}

func newHeadQueue(h *heads, id string) *headQueue {
	return &headQueue{
		h:       h,
		id:      id,
		stories: make(map[int64]*head),
		byKey:   make(map[string]*head),
		byVis:   btree.NewG(16, headLess),
		recv:    btree.NewG(16, headLess),
		out:     btree.NewG(16, outLess),
	}
}

// publish makes the out sets of the queues touched by the transaction
// that just committed readable by the counts (after COMMIT, before any
// caller is answered). A clone is O(1); the writer's later changes copy
// the nodes they touch.
// commitBegins and commitEnds bracket the writer's COMMIT and the publish
// or drop of its out sets (outSnaps.gen).
func (h *heads) commitBegins() {
	if h != nil {
		h.snaps.gen.Add(1)
	}
}

func (h *heads) commitEnds() {
	if h != nil {
		h.snaps.gen.Add(1)
	}
}

func (h *heads) publish() {
	if h == nil || len(h.touched) == 0 && len(h.firstTouched) == 0 {
		return
	}
	h.snaps.mu.Lock()
	for id, q := range h.touched {
		h.snaps.m[id] = q.out.Clone()
	}
	for id, q := range h.firstTouched {
		h.snaps.first[id] = q.firstVisible()
	}
	h.snaps.mu.Unlock()
	clear(h.touched)
	clear(h.firstTouched)
}

// unpublish forgets the published out sets of queueID ("" for every
// queue): until the queue loads and commits again, it is counted from the
// tables, which never show a change before its commit.
func (h *heads) unpublish(queueID string) {
	h.snaps.mu.Lock()
	if queueID == "" {
		clear(h.snaps.m)
		clear(h.snaps.first)
		clear(h.touched)
		clear(h.firstTouched)
	} else {
		delete(h.snaps.m, queueID)
		delete(h.snaps.first, queueID)
		delete(h.touched, queueID)
		delete(h.firstTouched, queueID)
	}
	h.snaps.mu.Unlock()
}

// reset drops every queue: they load again from the tables when needed.
func (h *heads) reset() {
	if h == nil {
		return
	}
	clear(h.queues)
	clear(h.limits)
	h.unpublish("")
	h.swept = false
	h.nextMsg = 0
	h.changes++
}

// connectionsChanged forgets what was read of the connections table. It
// is no change to undo: what it forgets loads again from the tables, as
// they are after a rollback too, so a failed connection change does not
// drop every queue's index.
func (h *heads) connectionsChanged() {
	if h == nil {
		return
	}
	clear(h.limits)
}

// drop forgets one queue (deleted, or its stories were deleted): it loads
// again from the tables when needed, as they are after a rollback too, so
// it is no change to undo (its counts read the tables until it loads).
func (h *heads) drop(queueID string) {
	if h == nil {
		return
	}
	delete(h.queues, queueID)
	h.unpublish(queueID)
	h.swept = false // a queue that loads again may hold received heads
}

// loaded returns the index of a queue if it is loaded, else nil: a change
// to a queue that is not loaded needs no bookkeeping, since the queue loads
// from the tables (which hold the change) when next needed.
func (h *heads) loaded(queueID string) *headQueue {
	if h == nil {
		return nil
	}
	return h.queues[queueID]
}

// queue returns the index of a queue, loading it from the tables of d's
// transaction if need be. The queue must exist (the caller checked).
func (h *heads) queue(d *dbq, queueID string) (*headQueue, error) {
	if q := h.queues[queueID]; q != nil {
		return q, nil
	}
	rows, err := d.query(`SELECT id, story_key, head_seq, tail_seq, head_id, tail_id, visible_at, receive_count, nonce, delayed
		FROM stories WHERE queue_id = ?`, queueID)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	q := newHeadQueue(h, queueID)
	// put marks the queue to publish; a load that fails must not publish
	// the part it read.
	failed := func(err error) (*headQueue, error) {
		delete(h.touched, queueID)
		delete(h.firstTouched, queueID)
		return nil, interpretError(err)
	}
	for rows.Next() {
		s := &head{}
		var delayed int
		if err := rows.Scan(&s.id, &s.key, &s.seq, &s.tail, &s.headID, &s.tailID, &s.visibleAt, &s.receiveCount, &s.nonce, &delayed); err != nil {
			return failed(err)
		}
		s.delayed = delayed != 0
		q.put(s)
	}
	if err := rows.Err(); err != nil {
		return failed(err)
	}
	// A load is no change: every caller loads a queue before it writes to
	// the queue's stories, so what it read stays true if the operation
	// fails and its savepoint is rolled back.
	h.queues[queueID] = q
	h.touched[queueID] = q // publish it with the next commit
	h.firstTouched[queueID] = q
	return q, nil
}

// put adds a story.
func (q *headQueue) put(s *head) {
	q.stories[s.id] = s
	q.byKey[s.key] = s
	q.index(s)
}

// index puts a story of the queue's maps into its trees, in the order its
// state gives it.
func (q *headQueue) index(s *head) {
	q.byVis.ReplaceOrInsert(s)
	q.h.firstTouched[q.id] = q
	if s.receiveCount > 0 {
		q.recv.ReplaceOrInsert(s)
		q.out.ReplaceOrInsert(outHead{visibleAt: s.visibleAt, id: s.id, delayed: s.delayed})
		q.h.touched[q.id] = q
	}
}

// forgetOut takes s out of the out set.
func (q *headQueue) forgetOut(s *head) {
	if s.receiveCount > 0 {
		q.out.Delete(outHead{visibleAt: s.visibleAt, id: s.id})
		q.h.touched[q.id] = q
	}
}

// remove forgets a story.
func (q *headQueue) remove(id int64) {
	s := q.stories[id]
	if s == nil {
		return
	}
	delete(q.stories, id)
	delete(q.byKey, s.key)
	q.byVis.Delete(s)
	q.h.firstTouched[q.id] = q
	q.recv.Delete(s)
	q.forgetOut(s)
}

// update changes a story's state through fn, keeping the trees in order.
// Its id and key do not change: the maps keep it where it is (assigning
// it again cost a map probe each, cache misses over 100,000 stories).
func (q *headQueue) update(s *head, fn func(s *head)) {
	q.byVis.Delete(s)
	q.recv.Delete(s)
	q.forgetOut(s)
	fn(s)
	q.index(s)
}

// firstVisible is the earliest visible_at of the queue's heads,
// math.MaxInt64 when it has none.
func (q *headQueue) firstVisible() int64 {
	if s, ok := q.byVis.Min(); ok {
		return s.visibleAt
	}
	return math.MaxInt64
}

// nextVisible is the earliest visible_at after now, 0 if none.
func (q *headQueue) nextVisible(now int64) int64 {
	var at int64
	q.pivot = head{visibleAt: now + 1, id: math.MinInt64}
	q.byVis.AscendGreaterOrEqual(&q.pivot, func(s *head) bool {
		at = s.visibleAt
		return false
	})
	return at
}

// visible returns up to n stories visible at now, in claim order.
func (q *headQueue) visible(now int64, n int) []*head {
	out := make([]*head, 0, min(n, 64))
	q.byVis.Ascend(func(s *head) bool {
		if s.visibleAt > now || len(out) >= n {
			return false
		}
		out = append(out, s)
		return true
	})
	return out
}

// exhausted returns the received stories visible at now whose head was
// received limit times or more, in claim order.
func (q *headQueue) exhausted(now int64, limit int) []*head {
	var out []*head
	q.recv.Ascend(func(s *head) bool {
		if s.visibleAt > now {
			return false
		}
		if s.receiveCount >= limit {
			out = append(out, s)
		}
		return true
	})
	return out
}

// --- changes, each applied right after the statement that makes it

// newMessageID returns the row id for a new message row.
func (h *heads) newMessageID(d *dbq) (int64, error) {
	if h.nextMsg == 0 {
		if err := d.row(`SELECT coalesce(max(id), 0) + 1 FROM messages`).Scan(&h.nextMsg); err != nil {
			return 0, interpretError(err)
		}
	}
	id := h.nextMsg
	h.nextMsg++
	return id, nil
}

// storyAdvanced records a story's next head (message row headID, ready at
// visibleAt, never received), or with ok false that the story went.
func (h *heads) storyAdvanced(queueID string, id int64, ok bool, seq, headID, visibleAt int64) {
	q := h.loaded(queueID)
	if q == nil {
		return
	}
	h.changes++
	if !ok {
		q.remove(id)
		return
	}
	s := q.stories[id]
	if s == nil {
		h.drop(queueID) // cannot be: load the queue again
		return
	}
	q.update(s, func(s *head) {
		s.seq, s.headID, s.visibleAt, s.receiveCount, s.nonce, s.delayed = seq, headID, visibleAt, 0, 0, false
	})
}

// storySet changes a loaded story's state through fn.
func (h *heads) storySet(queueID string, id int64, fn func(s *head)) {
	q := h.loaded(queueID)
	if q == nil {
		return
	}
	s := q.stories[id]
	if s == nil {
		return
	}
	h.changes++
	q.update(s, fn)
}

// headOf returns the state of a story of a queue, loading the queue if
// need be: nil when the story does not exist (or the queue does not).
func headOf(d *dbq, queueID string, id int64) (*head, error) {
	if d.heads == nil {
		// Not on the writer (never the case for the callers): the table.
		s := &head{id: id}
		var delayed int
		err := d.row(`SELECT head_seq, head_id, visible_at, receive_count, nonce, delayed FROM stories WHERE id = ? AND queue_id = ?`, id, queueID).
			Scan(&s.seq, &s.headID, &s.visibleAt, &s.receiveCount, &s.nonce, &delayed)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		s.delayed = delayed != 0
		return s, interpretError(err)
	}
	if d.heads.loaded(queueID) == nil {
		var one int
		err := d.row(`SELECT 1 FROM connections WHERE id = ?`, queueID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		if err != nil {
			return nil, interpretError(err)
		}
	}
	q, err := d.heads.queue(d, queueID)
	if err != nil {
		return nil, err
	}
	return q.stories[id], nil
}
