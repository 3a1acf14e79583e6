package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sombus/sombus/internal/bus"
)

// quickAckSQL is quickAck's one statement after the lock. It finds the
// handles that acknowledge a live head by itself (v), by joining the
// handles ($1 story ids, $2 seqs, $3 nonces) with the story rows this
// transaction locked (queue $4, head and nonce as in the handle), so the
// pipeline needs no answer from the lock before it goes on. For each of
// them, in one snapshot, taken after the lock (so every message committed
// before the lock is in it): the ack record; the delete of the
// acknowledged message; the story's next message (nxt: its lowest seq
// other than the acknowledged head's, NULL when there is none), to which
// the story advances; and the delete of the story when it has none. The
// advance and the story delete touch different rows, as do the other
// parts; none reads what another writes. The ack record is a plain
// insert, not the full ack's upsert, whose speculative insert writes one
// more WAL record: a record of a live head's delivery cannot be there yet,
// as the acknowledged message goes in the same transaction; were one
// there, the statement would fail with unique_violation and the full ack
// would run.
//
// Every part reaches its rows from the handles, one index probe each: v
// probes stories_pkey for each handle (a LATERAL subquery with LIMIT 1,
// which the planner cannot flatten into a join of its choosing), the rest
// join v or nxt by key; the quick pool's settings (quickPlanSettings)
// keep the generic plan on those probes whatever the tables' sizes when
// it is made. (An earlier form also filtered each part by id = ANY($1) to
// stay on the keys; the
// generic plans then scanned the whole id list once per row of v or nxt,
// n² rows for n handles: a gathered ack of 100 handles cost 80 µs a handle
// against 27, measured in psql on the same rows.)
//
// The queue test is written so that no index can serve it, as in
// lockStoriesSQL: the stories come by stories_pkey alone. Given
// s.queue_id = $4 the planner would read the queue's whole part of
// stories_ready (every entry, live or dead, about 1,150 on the drain
// benchmark) beside the keys.
const quickAckSQL = `WITH v AS (
		SELECT s.id, h.seq, h.nonce FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS h(sid, seq, nonce)
		CROSS JOIN LATERAL (SELECT s.id FROM stories s
			WHERE s.id = h.sid AND s.head_seq = h.seq AND s.nonce = h.nonce AND s.queue_id || '' = $4 LIMIT 1) s
	), rec AS (
		INSERT INTO ack_records (queue_id, story_id, seq, nonce, acked_at)
		SELECT $4, v.id, v.seq, v.nonce, $5 FROM v
	), del AS (
		DELETE FROM messages m USING v
		WHERE m.story_id = v.id AND m.seq = v.seq
	), nxt AS (
		SELECT v.id AS story_id, m.seq, m.enqueued_at FROM v
		LEFT JOIN LATERAL (SELECT seq, enqueued_at FROM messages
			WHERE story_id = v.id AND seq <> v.seq ORDER BY seq LIMIT 1) m ON true
	), gone AS (
		DELETE FROM stories s USING nxt
		WHERE s.id = nxt.story_id AND nxt.seq IS NULL
	)
	UPDATE stories s SET head_seq = nxt.seq, receive_count = 0, nonce = 0, delayed = false, visible_at = nxt.enqueued_at
	FROM nxt WHERE s.id = nxt.story_id AND nxt.seq IS NOT NULL
	RETURNING s.id, s.queue_id, s.head_seq, s.visible_at`

// quickAck is MessageAck in one round trip for the usual call: every
// handle of this queue, each on a different story. One pipeline sends
// the lock of the stories (as settle takes it) and quickAckSQL, one
// implicit transaction; the results are then those of ackLocked, from the
// states locked. The handles that did not acknowledge a live head are
// judged after the commit against the ack records (only a repeated ack of
// the same delivery succeeds); this call wrote no record of their stories.
// ok is false, with nothing done, for other calls, and when the pipeline
// failed (the full ack then runs, with its retries).
func (s *Store) quickAck(ctx context.Context, p *bus.SettleParams) (out []bus.SettleResult, ok bool, err error) {
	n := len(p.Handles)
	if n == 0 {
		return nil, false, nil
	}
	sids, seqs, nonces := make([]int64, n), make([]int64, n), make([]int64, n)
	seen := make(map[int64]bool, n)
	for i, h := range p.Handles {
		if h.QueueID != p.QueueID || seen[h.StoryID] {
			return nil, false, nil
		}
		seen[h.StoryID] = true
		sids[i], seqs[i], nonces[i] = h.StoryID, h.Seq, h.Nonce
	}
	now := ms(p.Now)

	conn, err := s.quick.Acquire(ctx) // quickpool.go
	if err != nil {
		return nil, false, err
	}
	defer conn.Release()
	// No BEGIN or COMMIT: the statements of a pipeline up to its Sync
	// (one, at its end) run in one implicit transaction, READ COMMITTED
	// (the quick pool's sessions pin it, quickpool.go), committed at the
	// Sync, before the server says it is ready; endPipeline reads that
	// far, so the ack is durable before it is answered. Two statements
	// fewer a run.
	b := &pgx.Batch{}
	b.Queue(lockStoriesSQL, sids, p.QueueID)
	b.Queue(quickAckSQL, sids, seqs, nonces, p.QueueID, now)
	br := conn.SendBatch(ctx, b)
	live := make(map[int64]liveStory, n)
	w := &waker{}
	var ready map[int64]bool
	err = func() error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		var id int64 // shared by the rows: no allocation a row
		var st liveStory
		for rows.Next() {
			if err := rows.Scan(&id, &st.head, &st.nonce, &st.receiveCount); err != nil {
				rows.Close()
				return err
			}
			live[id] = st
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if rows, err = br.Query(); err != nil {
			return err
		}
		_, ready, err = collectAdvanced(w, now, rows)
		return err
	}()
	if err = endPipeline(conn, br, err); err != nil {
		s.logger.DebugContext(ctx, "postgres: quick ack failed; running the full ack", "err", err)
		return nil, false, nil
	}
	conn.Release() // the checks below take connections of the main pool
	s.notify.post(w.list())

	out = make([]bus.SettleResult, n)
	for i, h := range p.Handles {
		st, isLive := live[h.StoryID]
		switch {
		case isLive && st.head == h.Seq && st.nonce == h.Nonce:
			out[i] = bus.SettleResult{OK: true, Woken: ready[h.StoryID]}
		case isLive && st.head == h.Seq:
			out[i] = bus.SettleResult{Code: bus.CodeReceiptHandleIsInvalid, Message: bus.MsgHandleReceivedAgain}
		default:
			var acked bool
			if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ack_records
				WHERE queue_id = $1 AND story_id = $2 AND seq = $3 AND nonce = $4)`,
				h.QueueID, h.StoryID, h.Seq, h.Nonce).Scan(&acked); err != nil {
				return nil, false, fmt.Errorf("ack record: %w", err)
			}
			if acked {
				out[i] = bus.SettleResult{OK: true}
			} else {
				out[i] = bus.SettleResult{Code: bus.CodeReceiptHandleIsInvalid, Message: bus.MsgHandleNotInFlight}
			}
		}
	}
	return out, true, nil
}

// endPipeline ends a quick path's pipeline (an implicit transaction, or
// BEGIN … COMMIT): it closes br, which reads up to the server's ready
// message after the commit, keeping err (the pipeline's first error) or
// else the close's, checks that the transaction did end, and on any error
// ends it (endTx), so the connection goes back to the pool idle.
func endPipeline(conn *pgxpool.Conn, br pgx.BatchResults, err error) error {
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && conn.Conn().PgConn().TxStatus() != 'I' {
		err = errors.New("transaction still open after the pipeline")
	}
	if err != nil {
		endTx(conn)
	}
	return err
}

// endTx ends whatever transaction conn may be in, so the pool can reuse it;
// when that fails the connection is closed (Release then drops it).
func endTx(conn *pgxpool.Conn) {
	if conn.Conn().IsClosed() || conn.Conn().PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
		_ = conn.Conn().Close(ctx)
	}
}
