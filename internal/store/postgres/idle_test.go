package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// TestIdleQueueCheck: a receive of a queue whose latest claim took nothing,
// or all it saw, is answered by the small check while nothing is visible,
// and the check never hides a message: not one published by another node
// whose wake-up this node never heard (no listener here), not a delivery
// whose visibility ran out; a queue that is gone is not found, as by the
// claim. Wake-ups, this node's own or heard from another, drop the hint.
func TestIdleQueueCheck(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	a, b := openURL(t, url), openURL(t, url)
	ws, prod, q := setupQueue(t, a, 5)
	ctx := t.Context()
	now := time.Now()
	recv := func(s *Store, at time.Time) *bus.ReceiveResult {
		t.Helper()
		res, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Minute, Now: at})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		return res
	}
	publish := func(s *Store, id string) {
		t.Helper()
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{testMessage(id, id)}, Now: now, DedupWindow: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}

	if res := recv(b, now); len(res.Deliveries) != 0 || !b.idle.has(q) {
		t.Fatalf("empty queue: %d deliveries, hint %v; want none, and the hint", len(res.Deliveries), b.idle.has(q))
	}
	if res := recv(b, now); len(res.Deliveries) != 0 || b.idle.answered.Load() != 1 {
		t.Fatalf("empty queue again: %d deliveries, %d answered by the check; want none, 1", len(res.Deliveries), b.idle.answered.Load())
	}

	// Published by a, unheard by b: b's hint is stale, and the check sees it.
	// The claim took all it saw (one of ten), so the hint stays.
	publish(a, "m1")
	if !b.idle.has(q) {
		t.Fatal("b dropped its hint without hearing anything")
	}
	res := recv(b, now)
	if len(res.Deliveries) != 1 || res.Deliveries[0].MessageID != "m1" || !b.idle.has(q) {
		t.Fatalf("after a's publish: %+v, hint %v; want m1, and the hint (it took all it saw)", res.Deliveries, b.idle.has(q))
	}

	// In flight: nothing visible until the visibility runs out, which the
	// check's answer says, without a claim.
	res = recv(b, now)
	if want := now.Add(time.Minute).Truncate(time.Millisecond); len(res.Deliveries) != 0 || !res.NextVisibleAt.Equal(want) || b.idle.answered.Load() != 2 {
		t.Fatalf("m1 in flight, by the check: %d deliveries, next visible %v (want %v), %d answered by the check (want 2)",
			len(res.Deliveries), res.NextVisibleAt, want, b.idle.answered.Load())
	}
	res = recv(b, now.Add(2*time.Minute))
	if len(res.Deliveries) != 1 || res.Deliveries[0].MessageID != "m1" || res.Deliveries[0].ReceiveCount != 2 {
		t.Fatalf("after the visibility ran out: %+v; want m1 again, its second receive", res.Deliveries)
	}

	// A claim that takes as many as it asked for may have left more: no
	// hint. With a visibility of zero what it took is visible at once: no
	// hint either.
	publish(a, "m3")
	publish(a, "m4")
	b.idle.forget(q)
	res, err := b.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 1, Visibility: time.Minute, Now: now.Add(2 * time.Minute)})
	if err != nil || len(res.Deliveries) != 1 || b.idle.has(q) {
		t.Fatalf("a full claim: %+v, %v, hint %v; want one delivery, no hint", res, err, b.idle.has(q))
	}
	res, err = b.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: 0, Now: now.Add(2 * time.Minute)})
	if err != nil || len(res.Deliveries) != 1 || b.idle.has(q) {
		t.Fatalf("a claim at visibility 0: %+v, %v, hint %v; want one delivery, no hint", res, err, b.idle.has(q))
	}

	// This node's own wake-up drops its hint.
	if res := recv(a, now); len(res.Deliveries) != 0 || !a.idle.has(q) {
		t.Fatalf("a, m1, m3 and m4 in flight: %d deliveries, hint %v", len(res.Deliveries), a.idle.has(q))
	}
	publish(a, "m2")
	if a.idle.has(q) {
		t.Fatal("a kept its hint after its own publish woke the queue")
	}

	// A wake-up heard from another node drops it too.
	heard := listen(t, b)
	b.idle.mark(q)
	waitFor(t, heard, q, func() { publish(a, bus.NewID("m")) })
	if b.idle.has(q) {
		t.Fatal("b kept its hint after hearing a's wake-up")
	}

	// A queue that does not exist is not found, hint or not.
	gone := bus.NewID(bus.PrefixConnection)
	b.idle.mark(gone)
	_, err = b.MessageReceive(ctx, &bus.ReceiveParams{QueueID: gone, Max: 10, Visibility: time.Minute, Now: now})
	if !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("receive of a missing queue with the hint: %v, want ErrNotFound", err)
	}
}

// TestIdleHintSkippedLocked: a claim that skips a ready story another
// transaction holds took all it saw, so it leaves the hint; once the lock
// is gone the next receive gets that story, the check having seen it.
func TestIdleHintSkippedLocked(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	s := openURL(t, url)
	ws, prod, q := setupQueue(t, s, 5)
	ctx := t.Context()
	now := time.Now()
	for _, id := range []string{"free", "held"} {
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{testMessage(id, id)}, Now: now, DedupWindow: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sid int64
	if err := tx.QueryRow(ctx, `SELECT id FROM stories WHERE queue_id = $1 AND story_key = 'held' FOR UPDATE`, q).Scan(&sid); err != nil {
		t.Fatal(err)
	}
	recv := func() *bus.ReceiveResult {
		t.Helper()
		res, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Minute, Now: now})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		return res
	}
	if res := recv(); len(res.Deliveries) != 1 || res.Deliveries[0].MessageID != "free" || !s.idle.has(q) {
		t.Fatalf("with story %d held: %+v, hint %v; want free alone, and the hint", sid, res.Deliveries, s.idle.has(q))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if res := recv(); len(res.Deliveries) != 1 || res.Deliveries[0].MessageID != "held" || s.idle.answered.Load() != 0 {
		t.Fatalf("once released: %+v, %d answered by the check; want held, none", res.Deliveries, s.idle.answered.Load())
	}
}

// TestIdleChecksGathered: checks that run together in one statement each
// get their own queue's answer: nothing for an empty queue, the claim for
// a queue with a visible message (taken once), not found for a queue that
// does not exist.
func TestIdleChecksGathered(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	ctx := t.Context()
	now := time.Now()
	_, _, empty := setupQueue(t, s, 5)
	ws, prod, full := setupQueue(t, s, 5)
	gone := bus.NewID(bus.PrefixConnection)
	if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
		Messages: []bus.PublishMessage{testMessage("m1", "s1")}, Now: now, DedupWindow: time.Minute}); err != nil {
		t.Fatal(err)
	}
	queues := []string{empty, full, gone}

	// One statement for a group, as the gatherer runs it.
	calls := []*idleCall{{ctx: ctx, queueID: empty}, {ctx: ctx, queueID: full}, {ctx: ctx, queueID: gone}, {ctx: ctx, queueID: empty}}
	s.runIdleChecks(calls)
	for i, c := range calls {
		wantExists, wantFirst := c.queueID != gone, c.queueID == full
		if c.err != nil || c.exists != wantExists || (c.first != nil) != wantFirst || (wantFirst && *c.first != ms(now)) {
			t.Fatalf("check %d of a group (%s): exists %v, first %v, err %v; want exists %v, a first visible_at %v (at %d)",
				i, c.queueID, c.exists, c.first, c.err, wantExists, wantFirst, ms(now))
		}
	}

	type result struct {
		q   string
		res *bus.ReceiveResult
		err error
	}
	for round := range 5 {
		for _, q := range queues {
			s.idle.mark(q)
		}
		before := s.idle.answered.Load()
		const n = 60
		out := make(chan result, n)
		start := make(chan struct{})
		for i := range n {
			q := queues[i%len(queues)]
			go func() {
				<-start
				res, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Minute,
					Now: now.Add(time.Duration(round) * 2 * time.Minute)})
				out <- result{q, res, err}
			}()
		}
		close(start)
		got := 0
		for range n {
			r := <-out
			switch r.q {
			case gone:
				if !errors.Is(r.err, bus.ErrNotFound) {
					t.Fatalf("round %d: missing queue: %v, want ErrNotFound", round, r.err)
				}
			case empty:
				if r.err != nil || len(r.res.Deliveries) != 0 {
					t.Fatalf("round %d: empty queue: %v, %+v", round, r.err, r.res)
				}
			case full:
				if r.err != nil {
					t.Fatalf("round %d: queue with a message: %v", round, r.err)
				}
				got += len(r.res.Deliveries)
			}
		}
		// Each round is two minutes later: the delivery of the round before
		// is visible again.
		if got != 1 {
			t.Fatalf("round %d: %d deliveries of the queue's one message, want 1", round, got)
		}
		if s.idle.answered.Load() == before {
			t.Fatalf("round %d: the check answered none of the empty queue's receives", round)
		}
	}
}
