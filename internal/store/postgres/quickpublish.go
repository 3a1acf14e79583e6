package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sombus/sombus/internal/bus"
)

// quickPublishSQL is the whole of the usual publish in one statement,
// sent on the assumption that the workspace's routing is still the cached
// router's ($5 workspace, $6 routing version) and that every message id is
// fresh:
//
//   - d: the dedup records, written only when the workspace is at
//     routing version $6. A plain insert, not publish's upsert: a record
//     already there (a duplicate, or an expired record the full publish
//     would overwrite) fails the statement with unique_violation, and the
//     full publish runs. The upsert's speculative insert writes one more
//     WAL record per message (its confirmation) for a case this path
//     leaves to the full publish anyway;
//   - ok: 1, or division_by_zero unless d wrote a record for each of the
//     $3 ids (another routing version): the statement fails, nothing it
//     did stays, and the full publish runs;
//   - ids, s: appendMessages' story upsert (see there, and for the
//     sequence's name), which starts only
//     once ok is known (ids waits for it), so the locks go in the usual
//     order: the dedup records, then the stories in (queue_id, story_key)
//     order;
//   - m: the messages, at the tails the upsert returned: the k-th of a
//     story's cnt messages of this call takes seq tail_seq - cnt + k. They
//     come from the upsert's own rows (the latest version of each story,
//     which it locked), not from a read of stories, whose snapshot would
//     predate a concurrent publisher's commit. Each row's envelope is cut
//     out of $20, the call's envelopes back to back (each once, however
//     many queues it goes to), at its offset $19 and length $21.
//
// The answer is one row of ok joined with each story row: its queue, and
// whether the upsert created it.
const quickPublishSQL = `WITH d AS (
		INSERT INTO dedup_records AS d (producer_id, message_id, accepted_at, deliveries)
		SELECT $1, t.mid, $2::bigint, t.n FROM unnest($3::text[], $4::int[]) WITH ORDINALITY AS t(mid, n, ord)
		WHERE EXISTS (SELECT 1 FROM workspaces w WHERE w.id = $5 AND w.routing_version = $6)
		ORDER BY t.ord
		RETURNING 1
	), ok AS MATERIALIZED (
		SELECT 1 / ((SELECT count(*) FROM d) = cardinality($3::text[]))::int AS v
	), ids AS MATERIALIZED (
		SELECT r, nextval('stories_id_seq') AS id
		FROM generate_series(1, cardinality($7::text[])) AS r
		WHERE (SELECT v FROM ok) = 1
		ORDER BY r
	), s AS (
		INSERT INTO stories AS s
			(id, queue_id, story_key, head_seq, tail_seq, visible_at, receive_count, nonce, delayed)
		SELECT ids.id, t.q, t.k, 1, t.n, $2::bigint, 0, 0, false
		FROM unnest($7::text[], $8::text[], $9::bigint[], $10::int[]) WITH ORDINALITY AS t(q, k, n, rank, ord)
		JOIN ids ON ids.r = t.rank
		ORDER BY t.ord
		ON CONFLICT (queue_id, story_key) DO UPDATE SET tail_seq = s.tail_seq + EXCLUDED.tail_seq
		RETURNING s.id, s.queue_id, s.story_key, s.tail_seq, (s.xmax = 0) AS created
	), m AS (
		INSERT INTO messages (story_id, seq, queue_id, message_id, message_type, topic,
			correlation_id, producer_id, enqueued_at, envelope)
		SELECT s.id, s.tail_seq - t.cnt + t.k, t.q, t.mid, t.mtype, t.topic, t.corr, $1, $2::bigint,
			substring($20::bytea FROM t.off FOR t.len)
		FROM unnest($11::text[], $12::text[], $13::bigint[], $14::bigint[], $15::text[], $16::text[],
			$17::text[], $18::text[], $19::int[], $21::int[]) AS t(q, key, k, cnt, mid, mtype, topic, corr, off, len)
		JOIN s ON s.queue_id = t.q AND s.story_key = t.key
	)
	SELECT ok.v, s.queue_id, s.created FROM ok LEFT JOIN s ON true`

// quickPublishGenericPlans makes quickPublishSQL run on its generic plan
// from the first execution, as the quick pool's sessions do for the
// receive and the ack (quickpool.go): it reaches every row by a unique
// index whatever the values, and planning it again on each execution
// costs more than most runs of it.
const quickPublishGenericPlans = `SET LOCAL plan_cache_mode = force_generic_plan`

// quickPublish is MessagePublish in one round trip for the usual call
// (distinct message ids, a workspace whose router is cached): one pipeline
// of BEGIN, the plan cache mode, quickPublishSQL and COMMIT, on the
// assumption that the cached router is current and every message is
// fresh. When either is wrong the statement fails and the transaction
// rolls back; ok is then false, with nothing done, and the full publish
// runs (reading the routing again), as it does for any other call and
// when the pipeline fails otherwise. A workspace with no cached router
// has it read first, in a round trip of its own.
func (s *Store) quickPublish(ctx context.Context, p *bus.PublishParams) (out []bus.PublishOutcome, ok bool, err error) {
	if len(p.Messages) == 0 {
		return nil, false, nil
	}
	seen := map[string]bool{}
	for _, m := range p.Messages {
		if seen[m.MessageID] {
			return nil, false, nil
		}
		seen[m.MessageID] = true
	}
	now := ms(p.Now)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	defer conn.Release()
	rt, version, cached := s.routes.Latest(p.WorkspaceID)
	if !cached {
		// Read it (and cache it) through this connection first; a
		// workspace that does not exist is left to the full publish.
		if _, err := router(ctx, conn, &s.routes, p.WorkspaceID); err != nil {
			return nil, false, fmt.Errorf("consumers: %w", err)
		}
		if rt, version, cached = s.routes.Latest(p.WorkspaceID); !cached {
			return nil, false, nil
		}
	}
	out = make([]bus.PublishOutcome, len(p.Messages))
	mids := make([]string, len(p.Messages))
	dels := make([]int32, len(p.Messages))
	counts := map[storyRef]int64{}
	rank := map[storyRef]int32{}
	type row struct {
		ref storyRef
		i   int // the message's index in p.Messages
		k   int64
	}
	var rows []row
	for i := range p.Messages {
		m := &p.Messages[i]
		targets := rt.Route(m.Topic, p.ProducerID)
		out[i] = bus.PublishOutcome{Deliveries: len(targets), QueueIDs: targets}
		for _, q := range targets {
			r := storyRef{q, m.CorrelationID}
			counts[r]++
			if _, ok := rank[r]; !ok {
				rank[r] = int32(len(rank) + 1)
			}
			rows = append(rows, row{ref: r, i: i, k: counts[r]})
		}
	}
	// Dedup records sorted by message id, the lock order.
	order := make([]int, len(p.Messages))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return p.Messages[order[a]].MessageID < p.Messages[order[b]].MessageID })
	for k, i := range order {
		mids[k], dels[k] = p.Messages[i].MessageID, int32(out[i].Deliveries)
	}

	// The stories in lock order.
	refs := lockOrder(counts)
	qs, ks, ns, rs := make([]string, len(refs)), make([]string, len(refs)), make([]int64, len(refs)), make([]int32, len(refs))
	for i, r := range refs {
		qs[i], ks[i], ns[i], rs[i] = r.queue, r.key, counts[r], rank[r]
	}
	n := len(rows)
	var (
		mq, mk, mmid, mtype, mtopic, mcorr = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		mkk, mcnt                          = make([]int64, n), make([]int64, n)
		moff, mlen                         = make([]int32, n), make([]int32, n)
	)
	// The envelopes back to back in one parameter, each once however many
	// queues it goes to: a row cuts its own out by offset (from 1, as
	// substring counts) and length. A bytea[] of one envelope a row cost
	// the node more (each run, pgx grows an array's encoding from nothing).
	size := 0
	for i := range p.Messages {
		size += len(p.Messages[i].Envelope)
	}
	envs, off := make([]byte, 0, size), make([]int32, len(p.Messages))
	for i, r := range rows {
		m := &p.Messages[r.i]
		if off[r.i] == 0 { // not in envs yet: offsets start at 1
			off[r.i] = int32(len(envs)) + 1
			envs = append(envs, m.Envelope...)
		}
		mq[i], mk[i], mkk[i], mcnt[i] = r.ref.queue, r.ref.key, r.k, counts[r.ref]
		mmid[i], mtype[i], mtopic[i], mcorr[i] = m.MessageID, m.MessageType, m.Topic, m.CorrelationID
		moff[i], mlen[i] = off[r.i], int32(len(m.Envelope))
	}

	b := &pgx.Batch{}
	b.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED`)
	b.Queue(quickPublishGenericPlans)
	b.Queue(quickPublishSQL, p.ProducerID, now, mids, dels, p.WorkspaceID, version,
		qs, ks, ns, rs, mq, mk, mkk, mcnt, mmid, mtype, mtopic, mcorr, moff, envs, mlen)
	b.Queue(`COMMIT`)

	w := &waker{}
	br := conn.SendBatch(ctx, b)
	err = func() error {
		for range 2 { // BEGIN, the plan cache mode
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rs, err := br.Query()
		if err != nil {
			return err
		}
		for rs.Next() {
			var v int
			var q *string
			var created *bool
			if err := rs.Scan(&v, &q, &created); err != nil {
				rs.Close()
				return err
			}
			if q != nil && created != nil && *created {
				w.wake(*q)
			}
		}
		if err := rs.Err(); err != nil {
			return err
		}
		_, err = br.Exec() // COMMIT
		return err
	}()
	if err = endPipeline(conn, br, err); err != nil {
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || (pg.Code != "22012" && pg.Code != "23505") {
			s.logger.DebugContext(ctx, "postgres: quick publish failed; running the full publish", "err", err)
		}
		return nil, false, nil
	}
	s.notify.post(w.list())
	return out, true, nil
}
