package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
)

// QueueStats counts a queue in one statement (one snapshot);
// bus.ErrNotFound when it has no connection, as on SQLite. The statement
// reads the connection's row with the counts, so a connection removed
// after the caller read it (a connection's view counts its queue in a
// transaction of its own) is missing here, not counted as an empty queue.
func (s *Store) QueueStats(ctx context.Context, queueID string, now time.Time) (bus.QueueStats, error) {
	var st bus.QueueStats
	err := s.run(ctx, true, func(tx pgx.Tx) error {
		got, err := queueStats(ctx, tx, []string{queueID}, now)
		if err != nil {
			return err
		}
		var ok bool
		if st, ok = got[queueID]; !ok {
			return fmt.Errorf("queue %s: %w", queueID, bus.ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return bus.QueueStats{}, fmt.Errorf("queue stats: %w", err)
	}
	return st, nil
}

// lockQueue holds the row of a queue's connection (FOR KEY SHARE) until
// tx ends; bus.ErrNotFound when there is none. A removal of the connection
// (ConnectionDelete) then waits for tx, and its later statements take
// along what tx wrote; a removal that committed first makes the caller
// fail, as SQLite's purge and redrive of a missing queue do, instead of
// writing rows (a redrive's stories and messages) for a queue that is gone.
func lockQueue(ctx context.Context, tx pgx.Tx, queueID string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM connections WHERE id = $1 FOR KEY SHARE`, queueID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: queue %s", bus.ErrNotFound, queueID)
	}
	return err
}

// QueuePurge deletes every message and story of a queue (not its dead
// letters or ack records) and writes p.Audit, in one transaction;
// bus.ErrNotFound when the queue does not exist.
func (s *Store) QueuePurge(ctx context.Context, p *bus.PurgeParams) (int, error) {
	var n int
	_, err := s.write(ctx, func(tx pgx.Tx, _ *waker) error {
		if err := lockQueue(ctx, tx, p.QueueID); err != nil {
			return err
		}
		// The queue's part of each table, whatever the plan.
		if err := probePlan(ctx, tx); err != nil {
			return err
		}
		// Lock the stories first (in the usual order) and delete the
		// messages in a later statement: it then sees every message that a
		// publisher committed before letting go of a story.
		rows, err := tx.Query(ctx, `SELECT id FROM stories WHERE queue_id = $1 ORDER BY queue_id, story_key FOR UPDATE`, p.QueueID)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM messages WHERE story_id = ANY($1)`, ids)
		if err != nil {
			return err
		}
		n = int(tag.RowsAffected())
		if _, err := tx.Exec(ctx, `DELETE FROM stories WHERE id = ANY($1)`, ids); err != nil {
			return err
		}
		return insertAudit(ctx, tx, p.Audit)
	})
	if err != nil {
		return 0, fmt.Errorf("purge: %w", err)
	}
	return n, nil
}

// DeadLetterList lists a queue's dead letters with id > after, oldest
// first; limit <= 0 lists all; bus.ErrNotFound when the queue does not
// exist.
func (s *Store) DeadLetterList(ctx context.Context, queueID string, limit int, after int64) ([]bus.DeadLetter, error) {
	if limit <= 0 {
		limit = 1 << 30
	}
	var out []bus.DeadLetter
	err := s.run(ctx, true, func(tx pgx.Tx) error {
		if _, err := attemptLimit(ctx, tx, queueID); err != nil {
			return err
		}
		// The queue's part of dead_letters_queue, whatever the plan.
		rows, done, err := probeQuery(ctx, tx, `SELECT id, message_id, message_type, correlation_id, topic, producer_id,
				receive_count, enqueued_at, dead_lettered_at, envelope
			FROM dead_letters WHERE queue_id = $1 AND id > $2 ORDER BY id LIMIT $3`, queueID, after, limit)
		if err != nil {
			return err
		}
		defer done() //nolint:errcheck // an early return has its error already
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.DeadLetter, error) {
			var d bus.DeadLetter
			var enq, dl int64
			err := r.Scan(&d.ID, &d.MessageID, &d.MessageType, &d.CorrelationID, &d.Topic, &d.ProducerID,
				&d.ReceiveCount, &enq, &dl, &d.Envelope)
			d.EnqueuedAt, d.DeadLetteredAt = fromMS(enq), fromMS(dl)
			return d, err
		})
		if err != nil {
			return err
		}
		return done()
	})
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	return out, nil
}

// DeadLetterRedrive moves the named dead letters (all when p.MessageIDs is
// nil) back to the tails of their stories in dead-letter id order, keeping
// their enqueued_at, and writes p.Audit. Unknown ids are ignored;
// bus.ErrNotFound when the queue does not exist.
func (s *Store) DeadLetterRedrive(ctx context.Context, p *bus.RedriveParams) (int, error) {
	var n int
	_, err := s.write(ctx, func(tx pgx.Tx, w *waker) error {
		if err := lockQueue(ctx, tx, p.QueueID); err != nil {
			return err
		}
		// The queue's dead letters and stories, whatever the plan.
		if err := probePlan(ctx, tx); err != nil {
			return err
		}
		// nil is NULL (all); an empty non-nil slice is an empty array (none).
		rows, err := tx.Query(ctx, `DELETE FROM dead_letters
			WHERE queue_id = $1 AND ($2::text[] IS NULL OR message_id = ANY($2))
			RETURNING id, message_id, message_type, topic, correlation_id, producer_id, enqueued_at, envelope`,
			p.QueueID, p.MessageIDs)
		if err != nil {
			return err
		}
		type dl struct {
			id         int64
			msg        bus.PublishMessage
			producerID string
			enq        int64
		}
		dls, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dl, error) {
			var d dl
			err := r.Scan(&d.id, &d.msg.MessageID, &d.msg.MessageType, &d.msg.Topic, &d.msg.CorrelationID,
				&d.producerID, &d.enq, &d.msg.Envelope)
			return d, err
		})
		if err != nil {
			return err
		}
		sort.Slice(dls, func(i, j int) bool { return dls[i].id < dls[j].id })
		msgs := make([]newMessage, len(dls))
		for i := range dls {
			d := &dls[i]
			msgs[i] = newMessage{ref: storyRef{p.QueueID, d.msg.CorrelationID}, msg: &d.msg, enqueuedAt: d.enq, producerID: d.producerID}
		}
		if err := appendMessages(ctx, tx, w, ms(p.Now), msgs); err != nil {
			return err
		}
		n = len(dls)
		return insertAudit(ctx, tx, p.Audit)
	})
	if err != nil {
		return 0, fmt.Errorf("redrive: %w", err)
	}
	return n, nil
}

// maintainBatch is how many stories one maintenance transaction handles,
// so no transaction holds many locks for long.
const maintainBatch = 500

// Maintain does one round of background work, in several short
// transactions, and starts a vacuum of the busy tables that need one
// (vacuum.go), which runs on after it returns. A zero duration in p turns
// its part off. Expired counts the messages dropped by retention.
func (s *Store) Maintain(ctx context.Context, p *bus.MaintainParams) (*bus.MaintainResult, error) {
	res := &bus.MaintainResult{}
	all := &waker{}
	now := ms(p.Now)
	// After the steps below, whether or not they fail: a vacuum of the
	// busy tables that need one, in the background (vacuum.go).
	defer s.startVacuum()

	// (a) Dead-letter move of exhausted heads visible again, every queue.
	for {
		var moved, held int
		woken, err := s.write(ctx, func(tx pgx.Tx, w *waker) error {
			rows, err := tx.Query(ctx, `SELECT s.id, s.queue_id, s.head_seq, s.receive_count
				FROM stories s JOIN connections c ON c.id = s.queue_id
				WHERE s.receive_count > 0 AND s.visible_at <= $1 AND s.receive_count >= c.attempt_limit
				ORDER BY s.visible_at, s.id LIMIT $2 FOR UPDATE OF s SKIP LOCKED`, now, maintainBatch)
			if err != nil {
				return err
			}
			hs, err := pgx.CollectRows(rows, scanHeld)
			if err != nil {
				return err
			}
			held = len(hs)
			moved, _, err = moveHeads(ctx, tx, w, now, hs)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("maintain: dead-letter move: %w", err)
		}
		res.DeadLettered += moved
		mergeWoken(all, &waker{queues: setOf(woken)})
		if held < maintainBatch {
			break
		}
	}

	// (b) Retention of messages, then of dead letters.
	if p.Retention > 0 {
		cutoff := ms(p.Now.Add(-p.Retention))
		for {
			var deleted int
			var more bool
			woken, err := s.write(ctx, func(tx pgx.Tx, w *waker) error {
				// Not under probePlanSQL: the delete of a batch's messages
				// reaches them through messages_pkey by a BitmapOr of its
				// two id lists, which that setting forbids.
				var err error
				deleted, more, err = expireMessages(ctx, tx, w, now, cutoff)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("maintain: retention: %w", err)
			}
			res.Expired += deleted
			mergeWoken(all, &waker{queues: setOf(woken)})
			if !more || deleted == 0 {
				break
			}
		}
	}
	deletes := []struct {
		window time.Duration
		sql    string
	}{
		{p.DeadLetterRetention, `DELETE FROM dead_letters WHERE dead_lettered_at <= $1`},
		// (c) Records that outlived their windows.
		{p.AttemptWindow, `DELETE FROM attempts WHERE created_at <= $1`},
		{p.DedupWindow, `DELETE FROM dedup_records WHERE accepted_at <= $1`},
		{p.AckRecordWindow, `DELETE FROM ack_records WHERE acked_at <= $1`},
	}
	for _, d := range deletes {
		if d.window <= 0 {
			continue
		}
		err := s.run(ctx, false, func(tx pgx.Tx) error {
			// Through the table's age index, whatever the plan: a sweep
			// that finds nothing past its window, the usual round, reads
			// nothing.
			if err := probePlan(ctx, tx); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, d.sql, ms(p.Now.Add(-d.window)))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("maintain: %w", err)
		}
	}
	res.Woken = all.list()
	return res, nil
}

// expireMessages deletes the messages enqueued at or before cutoff of the
// stories of the batch's oldest such messages (at most maintainBatch
// stories), advancing the stories whose head went. more reports that the
// batch was full.
func expireMessages(ctx context.Context, tx pgx.Tx, w *waker, now, cutoff int64) (deleted int, more bool, err error) {
	// The oldest messages past the cutoff, in messages_enqueued's order: a
	// round that finds none reads one index entry, on any plan. (As a
	// DISTINCT over the stories, a plan made without the cutoff walked
	// messages_pkey whole and filtered.)
	rows, err := tx.Query(ctx, `SELECT story_id FROM messages WHERE enqueued_at <= $1 ORDER BY enqueued_at LIMIT $2`, cutoff, maintainBatch)
	if err != nil {
		return 0, false, err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, false, err
	}
	if len(found) == 0 {
		return 0, false, nil
	}
	var cands []int64
	seen := make(map[int64]bool, len(found))
	for _, id := range found {
		if !seen[id] {
			seen[id] = true
			cands = append(cands, id)
		}
	}
	// Lock the stories in the usual order; one in use now is skipped and
	// expires in a later round.
	rows, err = tx.Query(ctx, `SELECT id, queue_id, head_seq, receive_count FROM stories
		WHERE id = ANY($1) ORDER BY queue_id, story_key FOR UPDATE SKIP LOCKED`, cands)
	if err != nil {
		return 0, false, err
	}
	held, err := pgx.CollectRows(rows, scanHeld)
	if err != nil {
		return 0, false, err
	}
	ids := make([]int64, len(held))
	heads := map[int64]int64{}
	for i, h := range held {
		ids[i] = h.id
		heads[h.id] = h.head
	}
	// Messages of the locked stories, plus committed messages whose story
	// row is gone (left behind by a connection deleted mid-publish).
	rows, err = tx.Query(ctx, `DELETE FROM messages m WHERE m.enqueued_at <= $1 AND (m.story_id = ANY($2)
			OR (m.story_id = ANY($3) AND NOT EXISTS (SELECT 1 FROM stories s WHERE s.id = m.story_id)))
		RETURNING m.story_id, m.seq`, cutoff, ids, cands)
	if err != nil {
		return 0, false, err
	}
	var headGone []int64
	for rows.Next() {
		var sid, seq int64
		if err := rows.Scan(&sid, &seq); err != nil {
			rows.Close()
			return 0, false, err
		}
		deleted++
		if h, ok := heads[sid]; ok && h == seq {
			headGone = append(headGone, sid)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, false, err
	}
	if _, err := advance(ctx, tx, w, now, headGone); err != nil {
		return 0, false, err
	}
	return deleted, len(found) == maintainBatch, nil
}

// setOf makes a set of ids.
func setOf(ids []string) map[string]struct{} {
	m := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		m[id] = struct{}{}
	}
	return m
}
