package postgres

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
)

// MessagePublish accepts p.Messages in order, in one transaction: dedup,
// routing by subscriptions, then one message per target queue at the tail
// of its story. The queues of new stories are notified on sombus_ready
// once it commits.
//
// Locks are taken in one order: the dedup records (sorted by message id),
// then the story rows (sorted by queue_id, story_key), each story once with
// all of this call's messages for it.
func (s *Store) MessagePublish(ctx context.Context, p *bus.PublishParams) ([]bus.PublishOutcome, error) {
	out, ok, err := s.gatheredPublish(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("publish: %w", interpretError(err))
	}
	if ok {
		return out, nil
	}
	_, err = s.write(ctx, func(tx pgx.Tx, w *waker) error {
		var err error
		out, err = publish(ctx, tx, w, &s.routes, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	return out, nil
}

// storyRef names a story: its queue and key (the correlation id).
type storyRef struct{ queue, key string }

// newMessage is one message row to insert.
type newMessage struct {
	ref storyRef
	msg *bus.PublishMessage
	// enqueuedAt is Now for publish, the original time for redrive.
	enqueuedAt int64
	producerID string
}

// appendMessages upserts the story row of every message's story (sorted by
// queue_id, story_key; tail_seq grows by the story's count) and inserts the
// messages at the tails in the order given. A story it creates starts at
// head_seq 1, visible at now, and its queue is woken.
func appendMessages(ctx context.Context, tx pgx.Tx, w *waker, now int64, msgs []newMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	counts := map[storyRef]int64{}
	for _, m := range msgs {
		counts[m.ref]++
	}
	refs := lockOrder(counts)
	// rank: the order in which the stories first appear in msgs. A story
	// created here takes the rank-th id drawn below, so stories created by
	// one call (which tie on visible_at) are offered in the order their
	// first messages came, not in lock order.
	rank := map[storyRef]int32{}
	for _, m := range msgs {
		if _, ok := rank[m.ref]; !ok {
			rank[m.ref] = int32(len(rank) + 1)
		}
	}
	qs, ks, ns, rs := make([]string, len(refs)), make([]string, len(refs)), make([]int64, len(refs)), make([]int32, len(refs))
	for i, r := range refs {
		qs[i], ks[i], ns[i], rs[i] = r.queue, r.key, counts[r], rank[r]
	}
	// The upsert waits on the row lock of an existing story (a concurrent
	// publisher, receiver or settler), so sequences follow commit order.
	// ORDER BY ord makes the rows, and so the locks, go in sorted order.
	// xmax = 0 holds only for a row this statement inserted.
	// The ids are drawn in rank order first (MATERIALIZED: once, before
	// the insert); an id drawn for a story that exists is simply unused.
	// stories_id_seq is the identity's sequence by the name PostgreSQL gave
	// it (TestStoriesSequence): resolved once, when the statement is
	// planned, where pg_get_serial_sequence read the catalog for every id
	// drawn (4 % of the database's CPU for a quick publish of four).
	rows, err := tx.Query(ctx, `WITH ids AS MATERIALIZED (
			SELECT r, nextval('stories_id_seq') AS id
			FROM generate_series(1, $5::int) AS r ORDER BY r
		)
		INSERT INTO stories AS s
			(id, queue_id, story_key, head_seq, tail_seq, visible_at, receive_count, nonce, delayed)
		SELECT ids.id, t.q, t.k, 1, t.n, $4, 0, 0, false
		FROM unnest($1::text[], $2::text[], $3::bigint[], $6::int[]) WITH ORDINALITY AS t(q, k, n, rank, ord)
		JOIN ids ON ids.r = t.rank
		ORDER BY t.ord
		ON CONFLICT (queue_id, story_key) DO UPDATE SET tail_seq = s.tail_seq + EXCLUDED.tail_seq
		RETURNING s.id, s.queue_id, s.story_key, s.tail_seq, (s.xmax = 0) AS created`, qs, ks, ns, now, len(refs), rs)
	if err != nil {
		return fmt.Errorf("story upsert: %w", err)
	}
	type slot struct{ id, next int64 } // story id and the next seq to give
	slots := map[storyRef]*slot{}
	for rows.Next() {
		var r storyRef
		var id, tail int64
		var created bool
		if err := rows.Scan(&id, &r.queue, &r.key, &tail, &created); err != nil {
			rows.Close()
			return err
		}
		slots[r] = &slot{id: id, next: tail - counts[r] + 1}
		if created {
			w.wake(r.queue)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("story upsert: %w", err)
	}
	n := len(msgs)
	var (
		sids, seqs, enq                        = make([]int64, n), make([]int64, n), make([]int64, n)
		queues, ids, types, topics, corrs, prs = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		envs                                   = make([][]byte, n)
	)
	for i, m := range msgs {
		sl := slots[m.ref]
		if sl == nil {
			return fmt.Errorf("story upsert returned no row for queue %s story %q", m.ref.queue, m.ref.key)
		}
		sids[i], seqs[i] = sl.id, sl.next
		sl.next++
		queues[i], ids[i], types[i], topics[i] = m.ref.queue, m.msg.MessageID, m.msg.MessageType, m.msg.Topic
		corrs[i], prs[i], enq[i], envs[i] = m.msg.CorrelationID, m.producerID, m.enqueuedAt, m.msg.Envelope
		if envs[i] == nil {
			envs[i] = []byte{} // NOT NULL column; an empty envelope stays empty
		}
	}
	_, err = tx.Exec(ctx, `INSERT INTO messages (story_id, seq, queue_id, message_id, message_type, topic,
			correlation_id, producer_id, enqueued_at, envelope)
		SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[],
			$7::text[], $8::text[], $9::bigint[], $10::bytea[])`,
		sids, seqs, queues, ids, types, topics, corrs, prs, enq, envs)
	if err != nil {
		return fmt.Errorf("message insert: %w", err)
	}
	return nil
}

// publish is MessagePublish inside its transaction.
func publish(ctx context.Context, tx pgx.Tx, w *waker, routes *bus.RouteCache, p *bus.PublishParams) ([]bus.PublishOutcome, error) {
	now := ms(p.Now)
	out := make([]bus.PublishOutcome, len(p.Messages))
	if len(p.Messages) == 0 {
		return out, nil
	}

	// Routing first: it takes no locks, and the dedup record stores the
	// number of deliveries.
	rt, err := router(ctx, tx, routes, p.WorkspaceID)
	if err != nil {
		return nil, fmt.Errorf("consumers: %w", err)
	}
	targets := make([][]string, len(p.Messages))
	for i := range p.Messages {
		targets[i] = rt.Route(p.Messages[i].Topic, p.ProducerID)
	}

	// A second copy within the batch is a duplicate of the first when the
	// first's record (accepted at Now) would be inside the window.
	first := map[string]int{} // message id -> index of its first copy
	dupOf := make([]int, len(p.Messages))
	for i, m := range p.Messages {
		dupOf[i] = -1
		if j, ok := first[m.MessageID]; ok {
			if p.DedupWindow > 0 {
				dupOf[i] = j
			}
			continue
		}
		first[m.MessageID] = i
	}

	// Dedup records, sorted by message id (the lock order). The upsert
	// replaces only a record outside the window; rows it does not return
	// are live records, i.e. duplicates. A concurrent publisher of the same
	// id waits here for the first to commit, then sees its record.
	mids := make([]string, 0, len(first))
	for id := range first {
		mids = append(mids, id)
	}
	sort.Strings(mids)
	dels := make([]int32, len(mids))
	for k, id := range mids {
		dels[k] = int32(len(targets[first[id]]))
	}
	cutoff := ms(p.Now.Add(-p.DedupWindow))
	rows, err := tx.Query(ctx, `INSERT INTO dedup_records AS d (producer_id, message_id, accepted_at, deliveries)
		SELECT $1, t.mid, $2, t.n FROM unnest($3::text[], $4::int[]) WITH ORDINALITY AS t(mid, n, ord) ORDER BY t.ord
		ON CONFLICT (producer_id, message_id) DO UPDATE
			SET accepted_at = EXCLUDED.accepted_at, deliveries = EXCLUDED.deliveries
			WHERE d.accepted_at <= $5
		RETURNING d.message_id`, p.ProducerID, now, mids, dels, cutoff)
	if err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	fresh, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	isFresh := map[string]bool{}
	for _, id := range fresh {
		isFresh[id] = true
	}
	var dups []string
	for _, id := range mids {
		if !isFresh[id] {
			dups = append(dups, id)
		}
	}
	earlier := map[string]int{} // deliveries of records accepted before
	if len(dups) > 0 {
		rows, err := tx.Query(ctx, `SELECT message_id, deliveries FROM dedup_records
			WHERE producer_id = $1 AND message_id = ANY($2)`, p.ProducerID, dups)
		if err != nil {
			return nil, fmt.Errorf("dedup: %w", err)
		}
		for rows.Next() {
			var id string
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				rows.Close()
				return nil, err
			}
			earlier[id] = n
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("dedup: %w", err)
		}
	}

	var msgs []newMessage
	for i := range p.Messages {
		m := &p.Messages[i]
		switch {
		case dupOf[i] >= 0:
			out[i] = bus.PublishOutcome{Duplicate: true, Deliveries: out[dupOf[i]].Deliveries}
			continue
		case !isFresh[m.MessageID]:
			out[i] = bus.PublishOutcome{Duplicate: true, Deliveries: earlier[m.MessageID]}
			continue
		}
		out[i] = bus.PublishOutcome{Deliveries: len(targets[i]), QueueIDs: targets[i]}
		for _, q := range targets[i] {
			msgs = append(msgs, newMessage{ref: storyRef{q, m.CorrelationID}, msg: m, enqueuedAt: now, producerID: p.ProducerID})
		}
	}
	if err := appendMessages(ctx, tx, w, now, msgs); err != nil {
		return nil, err
	}
	return out, nil
}

// lockOrder is the stories of counts in the lock order of every batch
// operation: by queue, then by story key.
func lockOrder(counts map[storyRef]int64) []storyRef {
	refs := make([]storyRef, 0, len(counts))
	for r := range counts {
		refs = append(refs, r)
	}
	sort.Slice(refs, func(i, j int) bool {
		if refs[i].queue != refs[j].queue {
			return refs[i].queue < refs[j].queue
		}
		return refs[i].key < refs[j].key
	})
	return refs
}
