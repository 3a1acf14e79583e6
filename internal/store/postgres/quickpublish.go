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

// quickDedupSQL is publish's dedup upsert (see publish) that fails with
// division_by_zero, aborting the transaction, unless every message id was
// fresh: quickPublish has already sent the rest of the publish on that
// assumption.
const quickDedupSQL = `WITH d AS (
		INSERT INTO dedup_records AS d (producer_id, message_id, accepted_at, deliveries)
		SELECT $1, t.mid, $2, t.n FROM unnest($3::text[], $4::int[]) WITH ORDINALITY AS t(mid, n, ord) ORDER BY t.ord
		ON CONFLICT (producer_id, message_id) DO UPDATE
			SET accepted_at = EXCLUDED.accepted_at, deliveries = EXCLUDED.deliveries
			WHERE d.accepted_at <= $5
		RETURNING 1
	)
	SELECT 1 / ((SELECT count(*) FROM d) = cardinality($3::text[]))::int`

// quickStoriesSQL is appendMessages' story upsert (see there).
const quickStoriesSQL = `WITH ids AS MATERIALIZED (
		SELECT r, nextval(pg_get_serial_sequence('stories', 'id')) AS id
		FROM generate_series(1, $5::int) AS r ORDER BY r
	)
	INSERT INTO stories AS s
		(id, queue_id, story_key, head_seq, tail_seq, visible_at, receive_count, nonce, delayed)
	SELECT ids.id, t.q, t.k, 1, t.n, $4, 0, 0, false
	FROM unnest($1::text[], $2::text[], $3::bigint[], $6::int[]) WITH ORDINALITY AS t(q, k, n, rank, ord)
	JOIN ids ON ids.r = t.rank
	ORDER BY t.ord
	ON CONFLICT (queue_id, story_key) DO UPDATE SET tail_seq = s.tail_seq + EXCLUDED.tail_seq
	RETURNING s.queue_id, (s.xmax = 0) AS created`

// quickMessagesSQL inserts the messages at the tails the upsert made: the
// k-th of a story's cnt messages of this call takes seq tail_seq - cnt + k
// (the story rows are locked by this transaction since the upsert).
const quickMessagesSQL = `INSERT INTO messages (story_id, seq, queue_id, message_id, message_type, topic,
		correlation_id, producer_id, enqueued_at, envelope)
	SELECT s.id, s.tail_seq - t.cnt + t.k, t.q, t.mid, t.mtype, t.topic, t.corr, t.prod, t.enq, t.env
	FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::text[],
		$8::text[], $9::text[], $10::bigint[], $11::bytea[]) AS t(q, key, k, cnt, mid, mtype, topic, corr, prod, enq, env)
	JOIN stories s ON s.queue_id = t.q AND s.story_key = t.key`

// quickPublish is MessagePublish in two round trips for the usual call
// (distinct message ids): the routing read, then one pipeline of BEGIN,
// the dedup upsert, the story upsert, the message insert and COMMIT, sent
// on the assumption that every message is fresh. A duplicate makes the
// dedup statement fail and the transaction roll back; ok is then false,
// with nothing done, and the full publish runs, as it does for any other
// call and when the pipeline fails otherwise. Locks are taken in the
// usual order: dedup records, then stories sorted by (queue_id, story_key).
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
	// Routing first, outside the transaction: it takes no locks, and the
	// transaction would read it in its first statement's snapshot anyway.
	rt, err := router(ctx, conn, &s.routes, p.WorkspaceID)
	if err != nil {
		return nil, false, fmt.Errorf("consumers: %w", err)
	}
	out = make([]bus.PublishOutcome, len(p.Messages))
	mids := make([]string, len(p.Messages))
	dels := make([]int32, len(p.Messages))
	counts := map[storyRef]int64{}
	rank := map[storyRef]int32{}
	type row struct {
		ref storyRef
		m   *bus.PublishMessage
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
			rows = append(rows, row{ref: r, m: m, k: counts[r]})
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

	b := &pgx.Batch{}
	b.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED`)
	b.Queue(quickDedupSQL, p.ProducerID, now, mids, dels, ms(p.Now.Add(-p.DedupWindow)))
	if len(rows) > 0 {
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
		qs, ks, ns, rs := make([]string, len(refs)), make([]string, len(refs)), make([]int64, len(refs)), make([]int32, len(refs))
		for i, r := range refs {
			qs[i], ks[i], ns[i], rs[i] = r.queue, r.key, counts[r], rank[r]
		}
		b.Queue(quickStoriesSQL, qs, ks, ns, now, len(refs), rs)
		n := len(rows)
		var (
			mq, mk, mmid, mtype, mtopic, mcorr, mprod = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
			mkk, mcnt, menq                           = make([]int64, n), make([]int64, n), make([]int64, n)
			menv                                      = make([][]byte, n)
		)
		for i, r := range rows {
			mq[i], mk[i], mkk[i], mcnt[i] = r.ref.queue, r.ref.key, r.k, counts[r.ref]
			mmid[i], mtype[i], mtopic[i], mcorr[i], mprod[i] = r.m.MessageID, r.m.MessageType, r.m.Topic, r.m.CorrelationID, p.ProducerID
			menq[i], menv[i] = now, r.m.Envelope
			if menv[i] == nil {
				menv[i] = []byte{} // NOT NULL column; an empty envelope stays empty
			}
		}
		b.Queue(quickMessagesSQL, mq, mk, mkk, mcnt, mmid, mtype, mtopic, mcorr, mprod, menq, menv)
	}
	b.Queue(`COMMIT`)

	w := &waker{}
	br := conn.SendBatch(ctx, b)
	err = func() error {
		for range 2 { // BEGIN, dedup
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		if len(rows) > 0 {
			rs, err := br.Query()
			if err != nil {
				return err
			}
			for rs.Next() {
				var q string
				var created bool
				if err := rs.Scan(&q, &created); err != nil {
					rs.Close()
					return err
				}
				if created {
					w.wake(q)
				}
			}
			if err := rs.Err(); err != nil {
				return fmt.Errorf("story upsert: %w", err)
			}
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("message insert: %w", err)
			}
		}
		_, err := br.Exec() // COMMIT
		return err
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && conn.Conn().PgConn().TxStatus() != 'I' {
		err = errors.New("publish: transaction still open after COMMIT")
	}
	if err != nil {
		endTx(conn)
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "22012" {
			s.logger.DebugContext(ctx, "postgres: quick publish failed; running the full publish", "err", err)
		}
		return nil, false, nil
	}
	s.notify.post(w.list())
	return out, true, nil
}
