package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// QueueStats counts a consumer queue in one read snapshot; ErrNotFound
// when the queue does not exist.
func (s *Store) QueueStats(ctx context.Context, queueID string, now time.Time) (bus.QueueStats, error) {
	var st bus.QueueStats
	err := s.consistentRead(ctx, func(d *dbq, snaps *outSnaps) error {
		got, err := queueStats(d, snaps, []string{queueID}, now)
		if err != nil {
			return err
		}
		var ok bool
		if st, ok = got[queueID]; !ok {
			return notFound("queue", queueID)
		}
		return nil
	})
	if err != nil {
		return bus.QueueStats{}, fmt.Errorf("queue stats: %w", err)
	}
	return st, nil
}

// QueuePurge deletes every message and story of a queue (not its dead
// letters nor ack records) and writes p.Audit, in one transaction; it
// returns the number of messages deleted.
func (s *Store) QueuePurge(ctx context.Context, p *bus.PurgeParams) (int, error) {
	var n int64
	err := s.w.do(ctx, func(d *dbq) error {
		if _, err := attemptLimit(d, p.QueueID); err != nil {
			return err
		}
		// Acknowledged rows waiting to be deleted are not messages of the
		// queue: they go first, so that n counts only the queue's own.
		if err := flushAcked(d); err != nil {
			return err
		}
		var err error
		if n, err = d.affected(`DELETE FROM messages WHERE queue_id = ?`, p.QueueID); err != nil {
			return interpretError(err)
		}
		if _, err := d.exec(`DELETE FROM stories WHERE queue_id = ?`, p.QueueID); err != nil {
			return interpretError(err)
		}
		d.heads.drop(p.QueueID)
		return auditInsert(d, p.Audit)
	})
	if err != nil {
		return 0, fmt.Errorf("purge: %w", err)
	}
	return int(n), nil
}

const deadLetterCols = `id, message_id, message_type, correlation_id, topic, producer_id, receive_count,
	enqueued_at, dead_lettered_at, envelope`

// DeadLetterList lists a queue's dead letters with ids above after, oldest
// first, at most limit (all when limit <= 0); ErrNotFound when the queue
// does not exist.
func (s *Store) DeadLetterList(ctx context.Context, queueID string, limit int, after int64) ([]bus.DeadLetter, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	var out []bus.DeadLetter
	err := s.read(ctx, func(d *dbq) error {
		if _, err := attemptLimit(d, queueID); err != nil {
			return err
		}
		rows, err := d.query(`SELECT `+deadLetterCols+` FROM dead_letters WHERE queue_id = ? AND id > ? ORDER BY id LIMIT ?`,
			queueID, after, limit)
		if err != nil {
			return interpretError(err)
		}
		defer rows.Close()
		for rows.Next() {
			var dl bus.DeadLetter
			var enq, at int64
			if err := rows.Scan(&dl.ID, &dl.MessageID, &dl.MessageType, &dl.CorrelationID, &dl.Topic, &dl.ProducerID,
				&dl.ReceiveCount, &enq, &at, &dl.Envelope); err != nil {
				return interpretError(err)
			}
			dl.EnqueuedAt, dl.DeadLetteredAt = fromMS(enq), fromMS(at)
			out = append(out, dl)
		}
		return interpretError(rows.Err())
	})
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	return out, nil
}

// DeadLetterRedrive appends the given dead letters of a queue (all when
// p.MessageIDs is nil; unknown ids are ignored), in dead-letter order, to
// the ends of their stories with receive counts starting again, removes
// them from the dead letters and writes p.Audit, in one transaction.
func (s *Store) DeadLetterRedrive(ctx context.Context, p *bus.RedriveParams) (int, error) {
	n := 0
	err := s.w.do(ctx, func(d *dbq) error {
		n = 0
		if _, err := attemptLimit(d, p.QueueID); err != nil {
			return err
		}
		q := `SELECT id, correlation_id FROM dead_letters WHERE queue_id = ?`
		args := []any{p.QueueID}
		if p.MessageIDs != nil {
			ids, _ := json.Marshal(p.MessageIDs)
			q += ` AND message_id IN (SELECT value FROM json_each(?))`
			args = append(args, string(ids))
		}
		rows, err := d.query(q+` ORDER BY id`, args...)
		if err != nil {
			return interpretError(err)
		}
		type letter struct {
			id  int64
			key string
		}
		var letters []letter
		for rows.Next() {
			var l letter
			if err := rows.Scan(&l.id, &l.key); err != nil {
				_ = rows.Close()
				return interpretError(err)
			}
			letters = append(letters, l)
		}
		_ = rows.Close()
		if err := rows.Err(); err != nil {
			return interpretError(err)
		}
		now := ms(p.Now)
		for _, l := range letters {
			at, err := appendToStory(d, p.QueueID, l.key, now, nil)
			if err != nil {
				return err
			}
			// enqueued_at stays the original; receive_count starts again
			// (it lives on the story row, reset when this becomes the head).
			if _, err := d.exec(`INSERT INTO messages(id, story_id, seq, prev, queue_id, message_id, message_type, topic,
				correlation_id, producer_id, enqueued_at, envelope)
				SELECT ?, ?, ?, ?, queue_id, message_id, message_type, topic, correlation_id, producer_id, enqueued_at, envelope
				FROM dead_letters WHERE id = ?`, at.id, at.storyID, at.seq, at.prev, l.id); err != nil {
				return interpretError(err)
			}
			if _, err := d.exec(`DELETE FROM dead_letters WHERE id = ?`, l.id); err != nil {
				return interpretError(err)
			}
			n++
		}
		return auditInsert(d, p.Audit)
	})
	if err != nil {
		return 0, fmt.Errorf("redrive: %w", err)
	}
	return n, nil
}

// exhaustedHead is a story head of a queue to dead-letter.
type exhaustedHead struct {
	queue string
	*head
}

// exhaustedHeads returns up to n heads of every consumer queue that are
// visible at now and were received as often as their queue allows, oldest
// visible_at first, from the writer's index of heads. The first sweep after
// the index was reset loads every consumer queue; later ones look only at
// the loaded queues with received heads (heads.swept), so that a node with
// many idle queues does not read them all every second.
func exhaustedHeads(d *dbq, now int64, n int) ([]exhaustedHead, error) {
	if !d.heads.swept {
		if err := loadConsumerQueues(d); err != nil {
			return nil, err
		}
	}
	var out []exhaustedHead
	for id, hq := range d.heads.queues {
		if hq.recv.Len() == 0 {
			continue
		}
		limit, err := attemptLimit(d, id)
		if err != nil {
			return nil, err
		}
		for _, h := range hq.exhausted(now, limit) {
			out = append(out, exhaustedHead{queue: id, head: h})
		}
	}
	sort.Slice(out, func(i, j int) bool { return headLess(out[i].head, out[j].head) })
	if len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// loadConsumerQueues loads every consumer queue into the writer's index of
// heads, with their attempt limits, and marks the index swept.
func loadConsumerQueues(d *dbq) error {
	rows, err := d.query(`SELECT id, attempt_limit FROM connections WHERE kind = ?`, string(bus.KindConsumer))
	if err != nil {
		return interpretError(err)
	}
	type queue struct {
		id    string
		limit int
	}
	var queues []queue
	for rows.Next() {
		var q queue
		if err := rows.Scan(&q.id, &q.limit); err != nil {
			_ = rows.Close()
			return interpretError(err)
		}
		queues = append(queues, q)
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		return interpretError(err)
	}
	for _, q := range queues {
		if _, err := d.heads.queue(d, q.id); err != nil {
			return err
		}
		d.heads.limits[q.id] = q.limit
	}
	d.heads.swept = true
	return nil
}

// maintainChunk bounds the rows one maintenance transaction handles, so
// that a large sweep does not hold the writer for long.
const maintainChunk = 500

// Maintain does one round of background work, in several short write
// transactions: dead-letter moves of exhausted heads in every queue,
// retention of messages and dead letters, and expiry of attempt ids, dedup
// records and ack records. A zero duration turns its part off (a zero
// Retention must not drop every message).
func (s *Store) Maintain(ctx context.Context, p *bus.MaintainParams) (*bus.MaintainResult, error) {
	res := &bus.MaintainResult{}
	now := ms(p.Now)
	woken := map[string]bool{}
	wake := func(q string) {
		if !woken[q] {
			woken[q] = true
			res.Woken = append(res.Woken, q)
		}
	}

	// (a) Dead-letter moves, in chunks until none is left.
	for {
		var moved int
		var wokeQ []string
		err := s.w.do(ctx, func(d *dbq) error {
			moved, wokeQ = 0, nil
			heads, err := exhaustedHeads(d, now, maintainChunk)
			if err != nil {
				return err
			}
			for _, h := range heads {
				adv, err := deadLetter(d, h.queue, h.id, h.headID, h.receiveCount, now)
				if err != nil {
					return err
				}
				moved++
				if adv {
					wokeQ = append(wokeQ, h.queue)
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("maintain: dead-letter moves: %w", err)
		}
		res.DeadLettered += moved
		for _, q := range wokeQ {
			wake(q)
		}
		if moved < maintainChunk {
			break
		}
	}

	// (b) Retention of messages, in chunks, advancing stories whose head went.
	if p.Retention > 0 {
		cutoff := ms(p.Now.Add(-p.Retention))
		for {
			var dropped int
			var wokeQ []string
			err := s.w.do(ctx, func(d *dbq) error {
				var err error
				dropped, wokeQ, err = dropExpired(d, cutoff)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("maintain: retention: %w", err)
			}
			res.Expired += dropped
			for _, q := range wokeQ {
				wake(q)
			}
			if dropped < maintainChunk {
				break
			}
		}
	}

	// (c) Old dead letters and expired records.
	err := s.w.do(ctx, func(d *dbq) error {
		sweeps := []struct {
			window time.Duration
			query  string
		}{
			{p.DeadLetterRetention, `DELETE FROM dead_letters WHERE dead_lettered_at <= ?`},
			{p.AttemptWindow, `DELETE FROM attempts WHERE created_at <= ?`},
			{p.DedupWindow, `DELETE FROM dedup WHERE accepted_at <= ?`},
			{p.AckRecordWindow, `DELETE FROM ack_records WHERE acked_at <= ?`},
			{p.AckRecordWindow, `DELETE FROM ack_log WHERE acked_at <= ?`},
		}
		for _, sw := range sweeps {
			if sw.window <= 0 {
				continue
			}
			if _, err := d.exec(sw.query, ms(p.Now.Add(-sw.window))); err != nil {
				return interpretError(err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("maintain: expiry: %w", err)
	}
	return res, nil
}

// dropExpired deletes up to maintainChunk messages enqueued at or before
// cutoff; a story whose head went advances (or goes). It returns the
// number dropped and the queues where a story advanced to a ready head.
// A message that goes from the middle or the end of its story is taken
// out of the story's chain: the message after it points to the one before
// it, and the story's tail becomes the one before it.
func dropExpired(d *dbq, cutoff int64) (int, []string, error) {
	// Acknowledged rows waiting to be deleted are no longer in a story's
	// chain: they go first, so that only messages are counted and unlinked.
	if err := flushAcked(d); err != nil {
		return 0, nil, err
	}
	// Queue by queue, each oldest first, through messages_queue: within a
	// story that is the order of enqueue times, as the unlinking below
	// needs.
	rows, err := d.query(`SELECT m.id, m.story_id, m.seq = s.head_seq, s.queue_id FROM messages m
		JOIN stories s ON s.id = m.story_id
		WHERE m.queue_id IN (SELECT id FROM connections) AND m.enqueued_at <= ?
		ORDER BY m.queue_id, m.enqueued_at LIMIT ?`, cutoff, maintainChunk)
	if err != nil {
		return 0, nil, interpretError(err)
	}
	type gone struct {
		id, story int64
		head      bool
		prev      int64
		queue     string
	}
	var msgs []gone
	for rows.Next() {
		var g gone
		if err := rows.Scan(&g.id, &g.story, &g.head, &g.queue); err != nil {
			_ = rows.Close()
			return 0, nil, interpretError(err)
		}
		msgs = append(msgs, g)
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, interpretError(err)
	}
	type story struct {
		queue string
		head  int64 // the row of the head that went
	}
	heads := map[int64]story{} // stories whose head was dropped
	for _, g := range msgs {
		if g.head {
			if _, err := d.exec(`DELETE FROM messages WHERE id = ?`, g.id); err != nil {
				return 0, nil, interpretError(err)
			}
			heads[g.story] = story{queue: g.queue, head: g.id}
			continue
		}
		// Not the head: out of the chain. Its prev as it is now (a message
		// before it may have gone in this chunk and been unlinked); it may
		// be a head that went in this chunk: advance then finds the next
		// one through it.
		if err := d.row(`DELETE FROM messages WHERE id = ? RETURNING prev`, g.id).Scan(&g.prev); err != nil {
			return 0, nil, interpretError(err)
		}
		if _, err := d.exec(`UPDATE messages SET prev = ? WHERE prev = ?`, g.prev, g.id); err != nil {
			return 0, nil, interpretError(err)
		}
		n, err := d.affected(`UPDATE stories SET tail_id = ? WHERE id = ? AND tail_id = ?`, g.prev, g.story, g.id)
		if err != nil {
			return 0, nil, interpretError(err)
		}
		if n > 0 {
			d.heads.storySet(g.queue, g.story, func(s *head) { s.tailID = g.prev })
		}
	}
	var woken []string
	for id, st := range heads {
		adv, err := advance(d, st.queue, id, st.head)
		if err != nil {
			return 0, nil, err
		}
		if adv {
			woken = append(woken, st.queue)
		}
	}
	return len(msgs), woken, nil
}
