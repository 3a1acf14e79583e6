package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// newNonce returns a fresh delivery nonce: a random positive int63.
// math/rand/v2's global source is seeded from the runtime's secure random
// source; handles are MAC'd elsewhere, so the nonce need not be secret.
func newNonce() int64 { return rand.Int64N(math.MaxInt64) + 1 }

// MessagePublish accepts p.Messages in order in one transaction: each is
// deduplicated, then placed at the tail of its story in every consumer
// queue of the workspace whose subscriptions match.
func (s *Store) MessagePublish(ctx context.Context, p *bus.PublishParams) ([]bus.PublishOutcome, error) {
	var out []bus.PublishOutcome
	err := s.w.do(ctx, func(d *dbq) error {
		var err error
		out, err = publish(d, &s.routes, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	return out, nil
}

func publish(d *dbq, routes *bus.RouteCache, p *bus.PublishParams) ([]bus.PublishOutcome, error) {
	now := ms(p.Now)
	dedupAfter := ms(p.Now.Add(-p.DedupWindow))
	// The workspace's consumers (any status), compiled once per change.
	rt, err := router(d, routes, p.WorkspaceID)
	if err != nil {
		return nil, err
	}

	out := make([]bus.PublishOutcome, len(p.Messages))
	for i, m := range p.Messages {
		queues := rt.Route(m.Topic, p.ProducerID)
		// The dedup record first, in one statement: a new id, or an expired
		// record of the same id replaced, changes a row; a live record
		// (accepted within the window) changes none: a duplicate.
		n, err := d.affected(`INSERT INTO dedup(producer_id, message_id, accepted_at, deliveries) VALUES (?, ?, ?, ?)
			ON CONFLICT(producer_id, message_id) DO UPDATE SET accepted_at = excluded.accepted_at, deliveries = excluded.deliveries
			WHERE dedup.accepted_at <= ?`,
			p.ProducerID, m.MessageID, now, len(queues), dedupAfter)
		if err != nil {
			return nil, interpretError(err)
		}
		if n == 0 {
			var deliveries int
			if err := d.row(`SELECT deliveries FROM dedup WHERE producer_id = ? AND message_id = ?`, p.ProducerID, m.MessageID).
				Scan(&deliveries); err != nil {
				return nil, interpretError(err)
			}
			out[i] = bus.PublishOutcome{Duplicate: true, Deliveries: deliveries}
			continue
		}
		for _, q := range queues {
			storyID, seq, err := appendToStory(d, q, m.CorrelationID, now)
			if err != nil {
				return nil, err
			}
			if _, err := d.exec(`INSERT INTO messages(story_id, seq, queue_id, message_id, message_type, topic,
				correlation_id, producer_id, enqueued_at, envelope) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				storyID, seq, q, m.MessageID, m.MessageType, m.Topic, m.CorrelationID, p.ProducerID, now,
				envelope(m.Envelope)); err != nil {
				return nil, interpretError(err)
			}
		}
		out[i] = bus.PublishOutcome{Deliveries: len(queues), QueueIDs: queues}
	}
	return out, nil
}

// envelope keeps an empty envelope a (non-NULL) empty blob.
func envelope(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// appendToStory takes the next sequence number of a story, creating the
// story (visible now, head 1) when the queue has none for key.
func appendToStory(d *dbq, queueID, key string, now int64) (storyID, seq int64, err error) {
	// An existing story first: an UPDATE is far cheaper than an INSERT that
	// conflicts (the upsert takes an AUTOINCREMENT id before it finds the
	// conflict).
	err = d.row(`UPDATE stories SET tail_seq = tail_seq + 1 WHERE queue_id = ? AND story_key = ? RETURNING id, tail_seq`,
		queueID, key).Scan(&storyID, &seq)
	if !errors.Is(err, sql.ErrNoRows) {
		return storyID, seq, interpretError(err)
	}
	err = d.row(`INSERT INTO stories(queue_id, story_key, head_seq, tail_seq, visible_at, receive_count, nonce, delayed)
		VALUES (?, ?, 1, 1, ?, 0, 0, 0) RETURNING id, tail_seq`, queueID, key, now).Scan(&storyID, &seq)
	return storyID, seq, interpretError(err)
}

// advance moves a story past its head after the head left (ack or
// dead-letter move): the smallest remaining message becomes the head, ready
// at its enqueued_at, or the story row goes. It reports whether a head is
// left. The single writer makes the read and the write one atomic step.
func advance(d *dbq, storyID int64) (bool, error) {
	var seq, enq int64
	err := d.row(`SELECT seq, enqueued_at FROM messages WHERE story_id = ? ORDER BY seq LIMIT 1`, storyID).Scan(&seq, &enq)
	if errors.Is(err, sql.ErrNoRows) {
		_, err := d.exec(`DELETE FROM stories WHERE id = ?`, storyID)
		return false, interpretError(err)
	}
	if err != nil {
		return false, interpretError(err)
	}
	_, err = d.exec(`UPDATE stories SET head_seq = ?, receive_count = 0, nonce = 0, delayed = 0, visible_at = ? WHERE id = ?`,
		seq, enq, storyID)
	return err == nil, interpretError(err)
}

// deadLetter moves the head (storyID, seq) to its queue's dead letters with
// receiveCount, then advances the story.
func deadLetter(d *dbq, storyID, seq int64, receiveCount int, now int64) (bool, error) {
	if _, err := d.exec(`INSERT INTO dead_letters(queue_id, message_id, message_type, topic, correlation_id,
		producer_id, receive_count, enqueued_at, dead_lettered_at, envelope)
		SELECT queue_id, message_id, message_type, topic, correlation_id, producer_id, ?, enqueued_at, ?, envelope
		FROM messages WHERE story_id = ? AND seq = ?`, receiveCount, now, storyID, seq); err != nil {
		return false, interpretError(err)
	}
	if _, err := d.exec(`DELETE FROM messages WHERE story_id = ? AND seq = ?`, storyID, seq); err != nil {
		return false, interpretError(err)
	}
	return advance(d, storyID)
}

// attemptLimit reads a queue's attempt limit; ErrNotFound when the queue
// (its connection) does not exist.
func attemptLimit(d *dbq, queueID string) (int, error) {
	var n int
	err := d.row(`SELECT attempt_limit FROM connections WHERE id = ?`, queueID).Scan(&n)
	return n, one(err, "queue", queueID)
}

// deadLetterExhausted moves the heads of the queue's visible stories that
// reached the attempt limit (receive step 2) and reports how many it moved
// and whether a story advanced to a next head.
func deadLetterExhausted(d *dbq, queueID string, limit int, now int64) (int, bool, error) {
	// The partial index stories_received holds only received stories; the
	// planner, not knowing how few, would pick stories_claim and walk every
	// ready story of the queue. "receive_count > 0" makes the index usable.
	rows, err := d.query(`SELECT id, head_seq, receive_count FROM stories INDEXED BY stories_received
		WHERE receive_count > 0 AND visible_at <= ? AND queue_id = ? AND receive_count >= ?
		ORDER BY visible_at, id`, now, queueID, limit)
	if err != nil {
		return 0, false, interpretError(err)
	}
	type head struct {
		id, seq int64
		count   int
	}
	var heads []head
	for rows.Next() {
		var h head
		if err := rows.Scan(&h.id, &h.seq, &h.count); err != nil {
			_ = rows.Close()
			return 0, false, interpretError(err)
		}
		heads = append(heads, h)
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		return 0, false, interpretError(err)
	}
	woke := false
	for _, h := range heads {
		adv, err := deadLetter(d, h.id, h.seq, h.count, now)
		if err != nil {
			return 0, false, err
		}
		woke = woke || adv
	}
	return len(heads), woke, nil
}

// MessageReceive claims up to p.Max story heads of a queue, or replays a
// recent receive with the same attempt id.
func (s *Store) MessageReceive(ctx context.Context, p *bus.ReceiveParams) (*bus.ReceiveResult, error) {
	var out *bus.ReceiveResult
	err := s.w.do(ctx, func(d *dbq) error {
		var err error
		out, err = receive(d, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("receive: %w", err)
	}
	return out, nil
}

const deliveryCols = `message_id, message_type, correlation_id, topic, producer_id, enqueued_at, envelope`

// readDelivery fills the message fields of a delivery from the head row.
func readDelivery(d *dbq, del *bus.Delivery) error {
	var enq int64
	err := d.row(`SELECT `+deliveryCols+` FROM messages WHERE story_id = ? AND seq = ?`, del.Handle.StoryID, del.Handle.Seq).
		Scan(&del.MessageID, &del.MessageType, &del.CorrelationID, &del.Topic, &del.ProducerID, &enq, &del.Envelope)
	del.EnqueuedAt = fromMS(enq)
	return interpretError(err)
}

func receive(d *dbq, p *bus.ReceiveParams) (*bus.ReceiveResult, error) {
	now := ms(p.Now)
	limit, err := attemptLimit(d, p.QueueID)
	if err != nil {
		return nil, err
	}
	res := &bus.ReceiveResult{Deliveries: []bus.Delivery{}}

	// 1. Replay of a recent receive with the same attempt id.
	if p.AttemptID != "" {
		replayed, found, err := replay(d, p, now)
		if err != nil {
			return nil, err
		}
		if found {
			// The answer is final even when nothing is still in flight: a
			// retry takes nothing new (SPEC.md, Receive step 1).
			res.Deliveries, res.Replayed = replayed, true
			res.NextVisibleAt, err = nextVisible(d, p.QueueID, now)
			return res, err
		}
	}

	// 2. Dead-letter the heads that used up their attempts.
	moved, woke, err := deadLetterExhausted(d, p.QueueID, limit, now)
	if err != nil {
		return nil, err
	}
	res.DeadLettered = moved
	if woke {
		res.Woken = []string{p.QueueID}
	}

	// 3. Claim visible stories, oldest visible_at first.
	if p.Max > 0 {
		// The head message comes with its story row: one statement for all.
		rows, err := d.query(`SELECT s.id, s.head_seq, s.receive_count, m.message_id, m.message_type,
				m.correlation_id, m.topic, m.producer_id, m.enqueued_at, m.envelope
			FROM stories s JOIN messages m ON m.story_id = s.id AND m.seq = s.head_seq
			WHERE s.queue_id = ? AND s.visible_at <= ? ORDER BY s.visible_at, s.id LIMIT ?`, p.QueueID, now, p.Max)
		if err != nil {
			return nil, interpretError(err)
		}
		for rows.Next() {
			var del bus.Delivery
			var enq int64
			del.Handle.QueueID = p.QueueID
			if err := rows.Scan(&del.Handle.StoryID, &del.Handle.Seq, &del.ReceiveCount, &del.MessageID, &del.MessageType,
				&del.CorrelationID, &del.Topic, &del.ProducerID, &enq, &del.Envelope); err != nil {
				_ = rows.Close()
				return nil, interpretError(err)
			}
			del.EnqueuedAt = fromMS(enq)
			res.Deliveries = append(res.Deliveries, del)
		}
		_ = rows.Close()
		if err := rows.Err(); err != nil {
			return nil, interpretError(err)
		}
		if n := len(res.Deliveries); n > 0 {
			// Claim them all in one statement: a fresh nonce each, invisible
			// until visibleAt, one more receive.
			args := make([]any, 0, 1+3*n)
			args = append(args, ms(p.Now.Add(p.Visibility)))
			for i := range res.Deliveries {
				del := &res.Deliveries[i]
				del.Handle.Nonce = newNonce()
				del.ReceiveCount++
				args = append(args, del.Handle.StoryID, del.ReceiveCount, del.Handle.Nonce)
			}
			if _, err := d.exec(`UPDATE stories SET receive_count = c.column2, nonce = c.column3, visible_at = ?, delayed = 0
				FROM (VALUES `+placeholders(n, 3)+`) AS c WHERE stories.id = c.column1`, args...); err != nil {
				return nil, interpretError(err)
			}
		}
	}

	// 4. Remember what this attempt id returned (nothing returned: nothing).
	if p.AttemptID != "" && len(res.Deliveries) > 0 {
		hs := make([][3]int64, len(res.Deliveries))
		for i, del := range res.Deliveries {
			hs[i] = [3]int64{del.Handle.StoryID, del.Handle.Seq, del.Handle.Nonce}
		}
		b, _ := json.Marshal(hs)
		if _, err := d.exec(`INSERT INTO attempts(queue_id, attempt_id, created_at, handles) VALUES (?, ?, ?, ?)
			ON CONFLICT(queue_id, attempt_id) DO UPDATE SET created_at = excluded.created_at, handles = excluded.handles`,
			p.QueueID, p.AttemptID, now, string(b)); err != nil {
			return nil, interpretError(err)
		}
	}

	// 5. When the next story becomes visible.
	res.NextVisibleAt, err = nextVisible(d, p.QueueID, now)
	return res, err
}

// replay returns the still in-flight deliveries of a live attempt record,
// restarting their visibility; found is false when there is no live record
// (an expired one is deleted).
func replay(d *dbq, p *bus.ReceiveParams, now int64) (out []bus.Delivery, found bool, err error) {
	var created int64
	var handles string
	err = d.row(`SELECT created_at, handles FROM attempts WHERE queue_id = ? AND attempt_id = ?`, p.QueueID, p.AttemptID).
		Scan(&created, &handles)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, interpretError(err)
	}
	if created <= ms(p.Now.Add(-p.AttemptWindow)) {
		_, err := d.exec(`DELETE FROM attempts WHERE queue_id = ? AND attempt_id = ?`, p.QueueID, p.AttemptID)
		return nil, false, interpretError(err)
	}
	var hs [][3]int64
	if err := json.Unmarshal([]byte(handles), &hs); err != nil {
		return nil, false, fmt.Errorf("attempt %s: %w", p.AttemptID, err)
	}
	out = []bus.Delivery{}
	visibleAt := ms(p.Now.Add(p.Visibility))
	for _, h := range hs {
		del := bus.Delivery{Handle: bus.Handle{QueueID: p.QueueID, StoryID: h[0], Seq: h[1], Nonce: h[2]}}
		// Still in flight from that receive: same head, same nonce, not
		// visible yet, and not released with a delay (a release ends the
		// delivery, see QueueStats).
		err := d.row(`UPDATE stories SET visible_at = ?
			WHERE id = ? AND queue_id = ? AND head_seq = ? AND nonce = ? AND visible_at > ? AND delayed = 0
			RETURNING receive_count`, visibleAt, h[0], p.QueueID, h[1], h[2], now).Scan(&del.ReceiveCount)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, false, interpretError(err)
		}
		if err := readDelivery(d, &del); err != nil {
			return nil, false, err
		}
		out = append(out, del)
	}
	return out, true, nil
}

// nextVisible is the earliest future visible_at of the queue's stories.
func nextVisible(d *dbq, queueID string, now int64) (time.Time, error) {
	var v sql.NullInt64
	if err := d.row(`SELECT min(visible_at) FROM stories WHERE queue_id = ? AND visible_at > ?`, queueID, now).Scan(&v); err != nil {
		return time.Time{}, interpretError(err)
	}
	if !v.Valid {
		return time.Time{}, nil
	}
	return fromMS(v.Int64), nil
}

// MessageAck acknowledges deliveries, one result per handle, in order.
func (s *Store) MessageAck(ctx context.Context, p *bus.SettleParams) ([]bus.SettleResult, error) {
	var out []bus.SettleResult
	err := s.w.do(ctx, func(d *dbq) error {
		var err error
		out, err = ackAll(d, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("settle: %w", err)
	}
	return out, nil
}

// placeholders returns n groups of "(?, …)" of k parameters, comma-separated.
func placeholders(n, k int) string {
	group := "(" + strings.Repeat("?, ", k-1) + "?)"
	return strings.Repeat(group+", ", n-1) + group
}

// ackAll acknowledges the handles of one call with a few statements for
// all of them, with the results of settling them one by one (ackOne): the
// live heads of distinct stories are settled together; a call that names
// a story twice, and handles that are not live, go one by one.
func ackAll(d *dbq, p *bus.SettleParams) ([]bus.SettleResult, error) {
	out := make([]bus.SettleResult, len(p.Handles))
	stories := make(map[int64]int, len(p.Handles))
	var ids []any
	for _, h := range p.Handles {
		if h.QueueID != p.QueueID {
			continue
		}
		if _, dup := stories[h.StoryID]; dup {
			return settleEach(d, p, ackOne) // a story twice: order matters
		}
		stories[h.StoryID] = 0
		ids = append(ids, h.StoryID)
	}
	// The live heads: the story's head is the handle's message, received
	// with the handle's nonce.
	type state struct{ head, nonce int64 }
	heads := make(map[int64]state, len(ids))
	if len(ids) > 0 {
		// By id only: with "queue_id = ?" the planner may walk the queue's
		// stories by the claim index. The queue is compared here.
		rows, err := d.query(`SELECT id, queue_id, head_seq, nonce FROM stories WHERE id IN (`+
			strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")+`)`, ids...)
		if err != nil {
			return nil, interpretError(err)
		}
		for rows.Next() {
			var id int64
			var queue string
			var st state
			if err := rows.Scan(&id, &queue, &st.head, &st.nonce); err != nil {
				_ = rows.Close()
				return nil, interpretError(err)
			}
			if queue == p.QueueID {
				heads[id] = st
			}
		}
		_ = rows.Close()
		if err := rows.Err(); err != nil {
			return nil, interpretError(err)
		}
	}
	var live []bus.Handle
	for i, h := range p.Handles {
		if h.QueueID != p.QueueID {
			out[i] = invalid("the receipt handle is not from this queue")
			continue
		}
		if st, ok := heads[h.StoryID]; ok && st.head == h.Seq && st.nonce != 0 && st.nonce == h.Nonce {
			live = append(live, h)
			continue
		}
		// Not live (ackOne tells why, or finds an earlier ack): it changes
		// nothing, so its place among the others does not matter.
		r, err := ackOne(d, p, h, 0)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	if len(live) == 0 {
		return out, nil
	}
	woken, err := ackLive(d, p, live)
	if err != nil {
		return nil, err
	}
	for i, h := range p.Handles {
		if w, ok := woken[h.StoryID]; ok && out[i] == (bus.SettleResult{}) && h.QueueID == p.QueueID {
			out[i] = bus.SettleResult{OK: true, Woken: w}
		}
	}
	return out, nil
}

// ackLive acknowledges live heads of distinct stories: deletes the
// messages, records the acks and advances each story (woken[story] tells
// whether a next head is ready).
func ackLive(d *dbq, p *bus.SettleParams, live []bus.Handle) (map[int64]bool, error) {
	now := ms(p.Now)
	n := len(live)
	pairs := make([]any, 0, 2*n)
	recs := make([]any, 0, 5*n)
	ids := make([]any, 0, n)
	for _, h := range live {
		pairs = append(pairs, h.StoryID, h.Seq)
		recs = append(recs, h.QueueID, h.StoryID, h.Seq, h.Nonce, now)
		ids = append(ids, h.StoryID)
	}
	if _, err := d.exec(`DELETE FROM messages WHERE (story_id, seq) IN (VALUES `+placeholders(n, 2)+`)`, pairs...); err != nil {
		return nil, interpretError(err)
	}
	if _, err := d.exec(`INSERT INTO ack_records(queue_id, story_id, seq, nonce, acked_at) VALUES `+placeholders(n, 5)+`
		ON CONFLICT(queue_id, story_id, seq) DO UPDATE SET nonce = excluded.nonce, acked_at = excluded.acked_at`, recs...); err != nil {
		return nil, interpretError(err)
	}
	// Advance (as advance does): the smallest remaining message becomes the
	// head, ready at its enqueued_at; a story left empty goes.
	in := strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
	rows, err := d.query(`UPDATE stories SET (head_seq, visible_at) =
			(SELECT seq, enqueued_at FROM messages WHERE story_id = stories.id ORDER BY seq LIMIT 1),
			receive_count = 0, nonce = 0, delayed = 0
		WHERE id IN (`+in+`) AND EXISTS (SELECT 1 FROM messages WHERE story_id = stories.id) RETURNING id`, ids...)
	if err != nil {
		return nil, interpretError(err)
	}
	woken := make(map[int64]bool, n)
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			_ = rows.Close()
			return nil, interpretError(err)
		}
		woken[id] = true
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	var empty []any
	for _, h := range live {
		if !woken[h.StoryID] {
			woken[h.StoryID] = false
			empty = append(empty, h.StoryID)
		}
	}
	if len(empty) > 0 {
		if _, err := d.exec(`DELETE FROM stories WHERE id IN (`+strings.TrimSuffix(strings.Repeat("?, ", len(empty)), ", ")+`)`, empty...); err != nil {
			return nil, interpretError(err)
		}
	}
	return woken, nil
}

// MessageNack releases deliveries after p.Delay (or dead-letters those that
// used up their attempts), one result per handle, in order.
func (s *Store) MessageNack(ctx context.Context, p *bus.SettleParams) ([]bus.SettleResult, error) {
	return s.settle(ctx, p, nackOne)
}

// settleFunc settles one handle whose queue matched.
type settleFunc func(d *dbq, p *bus.SettleParams, h bus.Handle, limit int) (bus.SettleResult, error)

func (s *Store) settle(ctx context.Context, p *bus.SettleParams, one settleFunc) ([]bus.SettleResult, error) {
	var out []bus.SettleResult
	err := s.w.do(ctx, func(d *dbq) error {
		var err error
		out, err = settleEach(d, p, one)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("settle: %w", err)
	}
	return out, nil
}

// settleEach settles the handles one by one, in order.
func settleEach(d *dbq, p *bus.SettleParams, one settleFunc) ([]bus.SettleResult, error) {
	out := make([]bus.SettleResult, len(p.Handles))
	limit := 0
	// A missing queue has no stories: every handle fails below.
	if err := d.row(`SELECT attempt_limit FROM connections WHERE id = ?`, p.QueueID).Scan(&limit); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, interpretError(err)
	}
	for i, h := range p.Handles {
		if h.QueueID != p.QueueID {
			out[i] = invalid("the receipt handle is not from this queue")
			continue
		}
		r, err := one(d, p, h, limit)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// invalid is the failure of one handle.
func invalid(msg string) bus.SettleResult {
	return bus.SettleResult{Code: bus.CodeReceiptHandleIsInvalid, Message: msg}
}

// liveHead reads the story of h when h is its head's latest delivery:
// ok false otherwise, with the reason.
func liveHead(d *dbq, h bus.Handle) (receiveCount int, ok bool, why string, err error) {
	var head, nonce int64
	err = d.row(`SELECT head_seq, nonce, receive_count FROM stories WHERE id = ? AND queue_id = ?`, h.StoryID, h.QueueID).
		Scan(&head, &nonce, &receiveCount)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, "the message is no longer in the queue", nil
	case err != nil:
		return 0, false, "", interpretError(err)
	case head != h.Seq:
		return 0, false, "the message is no longer in the queue", nil
	case nonce == 0 || nonce != h.Nonce:
		return 0, false, "the message was received again since this receipt handle was issued", nil
	}
	return receiveCount, true, "", nil
}

func ackOne(d *dbq, p *bus.SettleParams, h bus.Handle, _ int) (bus.SettleResult, error) {
	now := ms(p.Now)
	_, live, why, err := liveHead(d, h)
	if err != nil {
		return bus.SettleResult{}, err
	}
	if !live {
		var nonce int64
		err := d.row(`SELECT nonce FROM ack_records WHERE queue_id = ? AND story_id = ? AND seq = ?`, h.QueueID, h.StoryID, h.Seq).Scan(&nonce)
		switch {
		case err == nil && nonce == h.Nonce:
			return bus.SettleResult{OK: true}, nil // an idempotent re-ack
		case err == nil:
			return invalid("the message was acknowledged with another receipt handle"), nil
		case errors.Is(err, sql.ErrNoRows):
			return invalid(why), nil
		default:
			return bus.SettleResult{}, interpretError(err)
		}
	}
	if _, err := d.exec(`DELETE FROM messages WHERE story_id = ? AND seq = ?`, h.StoryID, h.Seq); err != nil {
		return bus.SettleResult{}, interpretError(err)
	}
	if _, err := d.exec(`INSERT INTO ack_records(queue_id, story_id, seq, nonce, acked_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(queue_id, story_id, seq) DO UPDATE SET nonce = excluded.nonce, acked_at = excluded.acked_at`,
		h.QueueID, h.StoryID, h.Seq, h.Nonce, now); err != nil {
		return bus.SettleResult{}, interpretError(err)
	}
	woke, err := advance(d, h.StoryID)
	if err != nil {
		return bus.SettleResult{}, err
	}
	return bus.SettleResult{OK: true, Woken: woke}, nil
}

func nackOne(d *dbq, p *bus.SettleParams, h bus.Handle, limit int) (bus.SettleResult, error) {
	now := ms(p.Now)
	count, live, why, err := liveHead(d, h)
	if err != nil {
		return bus.SettleResult{}, err
	}
	if !live {
		return invalid(why), nil
	}
	if count >= limit {
		// Delivered as often as allowed: to the dead letters now.
		woke, err := deadLetter(d, h.StoryID, h.Seq, count, now)
		if err != nil {
			return bus.SettleResult{}, err
		}
		return bus.SettleResult{OK: true, Woken: woke, DeadLettered: true}, nil
	}
	// The nonce stays: the handle still settles until the next receive.
	if _, err := d.exec(`UPDATE stories SET visible_at = ?, delayed = ? WHERE id = ?`,
		ms(p.Now.Add(p.Delay)), boolInt(p.Delay > 0), h.StoryID); err != nil {
		return bus.SettleResult{}, interpretError(err)
	}
	return bus.SettleResult{OK: true, Woken: p.Delay <= 0}, nil
}
