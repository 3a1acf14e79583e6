package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
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
	s.warmRoutes(ctx, p.WorkspaceID)
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
	// The workspace's consumers (any status), compiled once per change.
	rt, err := router(d, routes, p.WorkspaceID)
	if err != nil {
		return nil, err
	}
	// The queues of each message.
	queues := make([][]string, len(p.Messages))
	for i, m := range p.Messages {
		queues[i] = rt.Route(m.Topic, p.ProducerID)
	}
	accepted, err := dedupAll(d, p, queues)
	if err != nil {
		return nil, err
	}

	out := make([]bus.PublishOutcome, len(p.Messages))
	// The message rows and the stories' new tails are written once for
	// all messages, after the loop.
	tails := make(map[int64]*head)
	var rows []any
	for i, m := range p.Messages {
		if !accepted[i] {
			var deliveries int
			if err := d.row(`SELECT deliveries FROM dedup WHERE producer_id = ? AND message_id = ?`, p.ProducerID, m.MessageID).
				Scan(&deliveries); err != nil {
				return nil, interpretError(err)
			}
			out[i] = bus.PublishOutcome{Duplicate: true, Deliveries: deliveries}
			continue
		}
		for _, q := range queues[i] {
			at, err := appendToStory(d, q, m.CorrelationID, now, tails)
			if err != nil {
				return nil, err
			}
			rows = append(rows, at.id, at.storyID, at.seq, at.prev, q, m.MessageID, m.MessageType, m.Topic, m.CorrelationID,
				p.ProducerID, now, envelope(m.Envelope))
		}
		out[i] = bus.PublishOutcome{Deliveries: len(queues[i]), QueueIDs: queues[i]}
	}
	if err := flushTails(d, tails); err != nil {
		return nil, err
	}
	if err := insertMessages(d, rows); err != nil {
		return nil, err
	}
	return out, nil
}

// dedupUpsert writes a dedup record: a new id, or an expired record of the
// same id replaced, changes a row; a live record (accepted within the
// window) changes none: a duplicate.
const dedupUpsert = `INSERT INTO dedup(producer_id, message_id, accepted_at, deliveries) VALUES %s
	ON CONFLICT(producer_id, message_id) DO UPDATE SET accepted_at = excluded.accepted_at, deliveries = excluded.deliveries
	WHERE dedup.accepted_at <= ?`

// dedupOne is dedupUpsert of one record.
var dedupOne = fmt.Sprintf(dedupUpsert, "(?, ?, ?, ?)")

// dedupAll writes the dedup records of a publish call and reports which
// messages were accepted (the others are duplicates). When the call's
// message ids are distinct, one statement per chunk does it (RETURNING
// names the rows it inserted or replaced); an id twice in the call goes
// message by message, in order, so that its second copy is a duplicate of
// the first.
func dedupAll(d *dbq, p *bus.PublishParams, queues [][]string) ([]bool, error) {
	now := ms(p.Now)
	dedupAfter := ms(p.Now.Add(-p.DedupWindow))
	accepted := make([]bool, len(p.Messages))
	index := make(map[string]int, len(p.Messages))
	for i, m := range p.Messages {
		if _, dup := index[m.MessageID]; dup {
			index = nil
			break
		}
		index[m.MessageID] = i
	}
	if index == nil || len(p.Messages) == 1 {
		for i, m := range p.Messages {
			n, err := d.affected(dedupOne, p.ProducerID, m.MessageID, now, len(queues[i]), dedupAfter)
			if err != nil {
				return nil, interpretError(err)
			}
			accepted[i] = n > 0
		}
		return accepted, nil
	}
	const chunk = 200
	for start := 0; start < len(p.Messages); start += chunk {
		ms := p.Messages[start:min(len(p.Messages), start+chunk)]
		args := make([]any, 0, 4*len(ms)+1)
		for j, m := range ms {
			args = append(args, p.ProducerID, m.MessageID, now, len(queues[start+j]))
		}
		args = append(args, dedupAfter)
		rows, err := d.query(fmt.Sprintf(dedupUpsert, placeholders(len(ms), 4))+` RETURNING message_id`, args...)
		if err != nil {
			return nil, interpretError(err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				_ = rows.Close()
				return nil, interpretError(err)
			}
			if i, ok := index[id]; ok {
				accepted[i] = true
			}
		}
		_ = rows.Close()
		if err := rows.Err(); err != nil {
			return nil, interpretError(err)
		}
	}
	return accepted, nil
}

// envelope keeps an empty envelope a (non-NULL) empty blob.
func envelope(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// appended is where appendToStory placed a message: its row id, story,
// sequence number, and the row id of the story's message before it (0 if
// none).
type appended struct{ id, storyID, seq, prev int64 }

// appendToStory takes the next sequence number and a row id for a message
// of a story, creating the story (visible now, head 1) when the queue has
// none for key. The queue's index of heads knows the story and its tail;
// the stories row's tail is updated at once, or, with tails non-nil,
// later by flushTails (a publish updates each story once for all its
// messages).
func appendToStory(d *dbq, queueID, key string, now int64, tails map[int64]*head) (appended, error) {
	q, err := d.heads.queue(d, queueID)
	if err != nil {
		return appended{}, err
	}
	id, err := d.heads.newMessageID(d)
	if err != nil {
		return appended{}, err
	}
	if s := q.byKey[key]; s != nil {
		at := appended{id: id, storyID: s.id, seq: s.tail + 1, prev: s.tailID}
		s.tail, s.tailID = at.seq, id
		d.heads.changes++
		if tails != nil {
			tails[s.id] = s
			return at, nil
		}
		if _, err := d.exec(`UPDATE stories SET tail_seq = ?, tail_id = ? WHERE id = ?`, s.tail, s.tailID, s.id); err != nil {
			return appended{}, interpretError(err)
		}
		return at, nil
	}
	var storyID int64
	err = d.row(`INSERT INTO stories(queue_id, story_key, head_seq, tail_seq, head_id, tail_id, visible_at, receive_count, nonce, delayed)
		VALUES (?, ?, 1, 1, ?, ?, ?, 0, 0, 0) RETURNING id`, queueID, key, id, id, now).Scan(&storyID)
	if err != nil {
		return appended{}, interpretError(err)
	}
	d.heads.changes++ // first: a failure below must drop the index
	q.put(&head{id: storyID, key: key, seq: 1, tail: 1, headID: id, tailID: id, visibleAt: now})
	return appended{id: id, storyID: storyID, seq: 1}, nil
}

// flushTails writes the tails of the stories appendToStory extended.
func flushTails(d *dbq, tails map[int64]*head) error {
	if len(tails) <= flushTailsByID {
		// A single publish, or a batch of few stories: a prepared
		// statement per story is cheaper than the join, whose VALUES list
		// SQLite builds into a table of its own before searching stories.
		for id, s := range tails {
			if _, err := d.exec(`UPDATE stories SET tail_seq = ?, tail_id = ? WHERE id = ?`, s.tail, s.tailID, id); err != nil {
				return interpretError(err)
			}
		}
		return nil
	}
	const chunk = 300
	args := make([]any, 0, 3*min(len(tails), chunk))
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		_, err := d.exec(`UPDATE stories SET tail_seq = c.column2, tail_id = c.column3 FROM (VALUES `+placeholders(n, 3)+`) AS c WHERE stories.id = c.column1`, args...)
		args, n = args[:0], 0
		return interpretError(err)
	}
	for id, s := range tails {
		args = append(args, id, s.tail, s.tailID)
		if n++; n == chunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// flushTailsByID: flushTails updates up to this many stories one
// statement each, more with one join.
const flushTailsByID = 4

// messageCols are the columns publish writes, messageArgs their values.
const messageCols = `id, story_id, seq, prev, queue_id, message_id, message_type, topic, correlation_id, producer_id, enqueued_at, envelope`

// insertMessages inserts rows of messageCols values, many per statement.
func insertMessages(d *dbq, args []any) error {
	const cols, chunk = 12, 200
	for len(args) > 0 {
		n := min(len(args)/cols, chunk)
		if _, err := d.exec(`INSERT INTO messages(`+messageCols+`) VALUES `+placeholders(n, cols), args[:n*cols]...); err != nil {
			return interpretError(err)
		}
		args = args[n*cols:]
	}
	return nil
}

// advance moves a story past its head after the head (message row gone)
// left (ack or dead-letter move): the message after it in the story (the
// one whose prev is gone) becomes the head, ready at its enqueued_at, or
// the story row goes. It reports whether a head is left. The single writer
// makes the read and the write one atomic step.
func advance(d *dbq, queueID string, storyID, gone int64) (bool, error) {
	var id, seq, enq int64
	err := d.row(`SELECT id, seq, enqueued_at FROM messages WHERE prev = ?`, gone).Scan(&id, &seq, &enq)
	if errors.Is(err, sql.ErrNoRows) {
		if _, err := d.exec(`DELETE FROM stories WHERE id = ?`, storyID); err != nil {
			return false, interpretError(err)
		}
		d.heads.storyAdvanced(queueID, storyID, false, 0, 0, 0)
		return false, nil
	}
	if err != nil {
		return false, interpretError(err)
	}
	if _, err = d.exec(`UPDATE stories SET head_seq = ?, head_id = ?, receive_count = 0, nonce = 0, delayed = 0, visible_at = ? WHERE id = ?`,
		seq, id, enq, storyID); err != nil {
		return false, interpretError(err)
	}
	d.heads.storyAdvanced(queueID, storyID, true, seq, id, enq)
	return true, nil
}

// deadLetter moves the head of a story (message row headID) to its queue's
// dead letters with receiveCount, then advances the story.
func deadLetter(d *dbq, queueID string, storyID, headID int64, receiveCount int, now int64) (bool, error) {
	if _, err := d.exec(`INSERT INTO dead_letters(queue_id, message_id, message_type, topic, correlation_id,
		producer_id, receive_count, enqueued_at, dead_lettered_at, envelope)
		SELECT queue_id, message_id, message_type, topic, correlation_id, producer_id, ?, enqueued_at, ?, envelope
		FROM messages WHERE id = ?`, receiveCount, now, headID); err != nil {
		return false, interpretError(err)
	}
	if _, err := d.exec(`DELETE FROM messages WHERE id = ?`, headID); err != nil {
		return false, interpretError(err)
	}
	return advance(d, queueID, storyID, headID)
}

// attemptLimit reads a queue's attempt limit; ErrNotFound when the queue
// (its connection) does not exist.
func attemptLimit(d *dbq, queueID string) (int, error) {
	if d.heads != nil {
		if n, ok := d.heads.limits[queueID]; ok {
			return n, nil
		}
	}
	var n int
	err := d.row(`SELECT attempt_limit FROM connections WHERE id = ?`, queueID).Scan(&n)
	if err != nil {
		return 0, one(err, "queue", queueID)
	}
	if d.heads != nil {
		// No change to undo if the operation fails: only Tx methods change
		// connections (and clear this), and they never read it.
		d.heads.limits[queueID] = n
	}
	return n, nil
}

// deadLetterExhausted moves the heads of the queue's visible stories that
// reached the attempt limit (receive step 2), oldest visible_at first, and
// reports how many it moved and whether a story advanced to a next head.
func deadLetterExhausted(d *dbq, q *headQueue, queueID string, limit int, now int64) (int, bool, error) {
	heads := q.exhausted(now, limit)
	woke := false
	for _, h := range heads {
		adv, err := deadLetter(d, queueID, h.id, h.headID, h.receiveCount, now)
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
	// A receive without an attempt id from a queue none of whose heads is
	// visible (as of the writer's last commit that changed the queue) takes
	// nothing and moves nothing: answer it without the writer. Long polls
	// that come back to an empty queue, thousands at once when they were
	// opened together, would otherwise each hold the writer for a
	// transaction, and the publishes queued behind them. A writer that
	// failed (or a closed store) answers through do as every write does.
	if p.AttemptID == "" && s.w.failure() == nil && !s.closed.Load() {
		if next, ok := s.w.heads.snaps.idle(p.QueueID, ms(p.Now)); ok {
			res := &bus.ReceiveResult{Deliveries: []bus.Delivery{}}
			if next != math.MaxInt64 {
				res.NextVisibleAt = fromMS(next)
			}
			return res, nil
		}
	}
	var out *bus.ReceiveResult
	err := s.w.doOr(ctx, func(d *dbq) error {
		var err error
		out, err = receive(d, p)
		return err
	}, func(err error) {
		// The caller was answered before its claim was durable (503 at
		// its deadline, or the error of the claim's fsync): give the
		// messages back, their claim undone, as for any answer that did
		// not reach its receiver. Not with an attempt id: its retry replays the
		// same deliveries, which the give-back would then undo under the
		// receiver (the pull API's own recovery of a lost answer); nor a
		// replay's, which stay in flight.
		if err != nil || out == nil || out.Replayed || p.AttemptID != "" || len(out.Deliveries) == 0 {
			return
		}
		hs := make([]bus.Handle, len(out.Deliveries))
		for i, d := range out.Deliveries {
			hs[i] = d.Handle
		}
		_, err = s.MessageNack(lateContext(), &bus.SettleParams{QueueID: p.QueueID, Handles: hs, Now: p.Now, GiveBack: true})
		if err != nil {
			// Not given back, or (its own fsync failed) maybe given back:
			// the claim ends with its visibility at the latest.
			s.log.Error("sqlite: the give-back of a receive answered with an error failed; its messages may stay in flight until their visibility ends",
				slog.String("queue_id", p.QueueID), slog.Any("err", err))
		}
		if wake := s.wake.Load(); wake != nil {
			(*wake)(p.QueueID) // the long polls waiting on the queue look again
		}
	})
	if err != nil {
		return nil, fmt.Errorf("receive: %w", err)
	}
	return out, nil
}

const deliveryCols = `message_id, message_type, correlation_id, topic, producer_id, enqueued_at, envelope`

// readDelivery fills the message fields of a delivery from the head row
// (message row id).
func readDelivery(d *dbq, del *bus.Delivery, id int64) error {
	var enq int64
	err := d.row(`SELECT `+deliveryCols+` FROM messages WHERE id = ?`, id).
		Scan(&del.MessageID, &del.MessageType, &del.CorrelationID, &del.Topic, &del.ProducerID, &enq, &del.Envelope)
	del.EnqueuedAt = fromMS(enq)
	return interpretError(err)
}

// readDeliveries fills the message fields of deliveries of distinct
// stories from their head rows (message row ids, in the same order), in
// one statement.
func readDeliveries(d *dbq, dels []bus.Delivery, ids []int64) error {
	ids = ids[:len(dels)]
	if len(dels) == 1 {
		return readDelivery(d, &dels[0], ids[0])
	}
	args := d.argList(len(dels))
	for i := range dels {
		args.int(ids[i])
	}
	rows, err := d.query(readDeliveriesSQL.text(len(dels)), args.args...)
	if err != nil {
		return interpretError(err)
	}
	defer rows.Close()
	found := 0
	for rows.Next() {
		var row, enq int64
		var del bus.Delivery
		if err := rows.Scan(&row, &del.MessageID, &del.MessageType, &del.CorrelationID, &del.Topic, &del.ProducerID, &enq, &del.Envelope); err != nil {
			return interpretError(err)
		}
		i := slices.Index(ids, row) // a receive takes a few: no map
		if i < 0 {
			continue
		}
		del.Handle, del.ReceiveCount, del.EnqueuedAt = dels[i].Handle, dels[i].ReceiveCount, fromMS(enq)
		dels[i] = del
		found++
	}
	if err := rows.Err(); err != nil {
		return interpretError(err)
	}
	if found != len(dels) {
		return fmt.Errorf("sqlite: %d of %d story heads have no message row", len(dels)-found, len(dels))
	}
	return nil
}

var readDeliveriesSQL = newSizedSQL(func(n int) string {
	return `SELECT id, ` + deliveryCols + ` FROM messages WHERE id IN (` + inList(n) + `)`
})

// claimSQL claims n story heads: arguments visible_at, then (story id,
// receive count, nonce) for each.
var claimSQL = newSizedSQL(func(n int) string {
	return `UPDATE stories SET receive_count = c.column2, nonce = c.column3, visible_at = ?, delayed = 0
				FROM (VALUES ` + placeholders(n, 3) + `) AS c WHERE stories.id = c.column1`
})

func receive(d *dbq, p *bus.ReceiveParams) (*bus.ReceiveResult, error) {
	now := ms(p.Now)
	limit, err := attemptLimit(d, p.QueueID)
	if err != nil {
		return nil, err
	}
	q, err := d.heads.queue(d, p.QueueID)
	if err != nil {
		return nil, err
	}
	res := &bus.ReceiveResult{Deliveries: []bus.Delivery{}}

	// 1. Replay of a recent receive with the same attempt id.
	if p.AttemptID != "" {
		replayed, found, err := replay(d, q, p, now)
		if err != nil {
			return nil, err
		}
		if found {
			// The answer is final even when nothing is still in flight: a
			// retry takes nothing new (SPEC.md, Receive step 1).
			res.Deliveries, res.Replayed = replayed, true
			res.NextVisibleAt = nextVisible(q, now)
			return res, nil
		}
	}

	// 2. Dead-letter the heads that used up their attempts.
	moved, woke, err := deadLetterExhausted(d, q, p.QueueID, limit, now)
	if err != nil {
		return nil, err
	}
	res.DeadLettered = moved
	if woke {
		res.Woken = []string{p.QueueID}
	}

	// 3. Claim visible stories, oldest visible_at first: a fresh nonce
	// each, invisible until visibleAt, one more receive.
	if p.Max > 0 {
		claimed := q.visible(now, p.Max)
		if n := len(claimed); n > 0 {
			res.Deliveries = make([]bus.Delivery, n)
			visibleAt := ms(p.Now.Add(p.Visibility))
			var idsBuf [sizedSQLMemo]int64
			ids := idsBuf[:0]
			for i, h := range claimed {
				del := &res.Deliveries[i]
				del.Handle = bus.Handle{QueueID: p.QueueID, StoryID: h.id, Seq: h.seq, Nonce: newNonce()}
				del.ReceiveCount = h.receiveCount + 1
				ids = append(ids, h.headID)
			}
			if err := readDeliveries(d, res.Deliveries, ids); err != nil {
				return nil, err
			}
			args := d.argList(1 + 3*n)
			args.int(visibleAt)
			for i, h := range claimed {
				del := &res.Deliveries[i]
				args.int(h.id)
				args.int(int64(del.ReceiveCount))
				args.int(del.Handle.Nonce)
			}
			if _, err := d.exec(claimSQL.text(n), args.args...); err != nil {
				return nil, interpretError(err)
			}
			for i, h := range claimed {
				del := &res.Deliveries[i]
				d.heads.changes++
				q.update(h, func(s *head) {
					s.receiveCount, s.nonce, s.visibleAt, s.delayed = del.ReceiveCount, del.Handle.Nonce, visibleAt, false
				})
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
	res.NextVisibleAt = nextVisible(q, now)
	return res, nil
}

// replay returns the still in-flight deliveries of a live attempt record,
// restarting their visibility; found is false when there is no live record
// (an expired one is deleted).
func replay(d *dbq, q *headQueue, p *bus.ReceiveParams, now int64) (out []bus.Delivery, found bool, err error) {
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
		s := q.stories[h[0]]
		if s == nil || s.seq != h[1] {
			// The row matched, so the index holds the story at that head.
			return nil, false, fmt.Errorf("sqlite: story %d is not in the index of heads at head %d", h[0], h[1])
		}
		d.heads.changes++
		q.update(s, func(s *head) { s.visibleAt = visibleAt })
		if err := readDelivery(d, &del, s.headID); err != nil {
			return nil, false, err
		}
		out = append(out, del)
	}
	return out, true, nil
}

// nextVisible is the earliest future visible_at of the queue's stories.
func nextVisible(q *headQueue, now int64) time.Time {
	if at := q.nextVisible(now); at != 0 {
		return fromMS(at)
	}
	return time.Time{}
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

// inList returns n comma-separated placeholders.
func inList(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

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
	var ids []int64
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
	type state struct{ head, nonce, row int64 }
	heads := make(map[int64]state, len(ids))
	for _, id := range ids {
		h, err := headOf(d, p.QueueID, id)
		if err != nil {
			return nil, err
		}
		if h != nil {
			heads[id] = state{head: h.seq, nonce: h.nonce, row: h.headID}
		}
	}
	var live []bus.Handle
	var rows []int64 // the message row of each live handle
	for i, h := range p.Handles {
		if h.QueueID != p.QueueID {
			out[i] = invalid(bus.MsgHandleOtherQueue)
			continue
		}
		if st, ok := heads[h.StoryID]; ok && st.head == h.Seq && st.nonce != 0 && st.nonce == h.Nonce {
			live = append(live, h)
			rows = append(rows, st.row)
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
	woken, err := ackLive(d, p, live, rows)
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

// ackLive acknowledges live heads of distinct stories (their message rows
// in rows): deletes the messages, records the acks and advances each story
// (woken[story] tells whether a next head is ready).
func ackLive(d *dbq, p *bus.SettleParams, live []bus.Handle, rows []int64) (map[int64]bool, error) {
	now := ms(p.Now)
	n := len(live)
	// Every live handle is of p's queue (ackAll checked).
	recs := d.argList(4 * n)
	for _, h := range live {
		recs.str(&p.QueueID)
		recs.int(h.StoryID)
		recs.int(h.Seq)
		recs.int(h.Nonce)
		recs.int(now)
	}
	if err := recordAcks(d, n, recs.args); err != nil {
		return nil, err
	}
	// The rows stay, named in acked_messages, until enough gathered to be
	// deleted together: at depth they sit on pages written long before.
	// Advancing the stories past them is what makes them acknowledged.
	if err := markAcked(d, p.QueueID, rows); err != nil {
		return nil, err
	}
	// Advance (as advance does): the message after the head (prev = the
	// head's row, still in head_id) becomes the head, ready at its
	// enqueued_at; a story left empty goes.
	// One search of messages_next a story (a join, where a subquery for
	// the values and one for the condition searched twice).
	ids := d.argList(n)
	for _, h := range live {
		ids.int(h.StoryID)
	}
	res, err := d.query(advanceSQL.text(n), ids.args...)
	if err != nil {
		return nil, interpretError(err)
	}
	woken := make(map[int64]bool, n)
	type next struct{ id, row, seq, visibleAt int64 }
	var advanced []next
	for res.Next() {
		var a next
		if err := res.Scan(&a.id, &a.row, &a.seq, &a.visibleAt); err != nil {
			_ = res.Close()
			return nil, interpretError(err)
		}
		woken[a.id] = true
		advanced = append(advanced, a)
	}
	_ = res.Close()
	if err := res.Err(); err != nil {
		return nil, interpretError(err)
	}
	for _, a := range advanced {
		d.heads.storyAdvanced(p.QueueID, a.id, true, a.seq, a.row, a.visibleAt)
	}
	empty := d.argList(n)
	for _, h := range live {
		if !woken[h.StoryID] {
			woken[h.StoryID] = false
			empty.int(h.StoryID)
		}
	}
	if len(empty.ints) > 0 {
		if _, err := d.exec(deleteStoriesSQL.text(len(empty.ints)), empty.args...); err != nil {
			return nil, interpretError(err)
		}
		for _, id := range empty.ints {
			d.heads.storyAdvanced(p.QueueID, id, false, 0, 0, 0)
		}
	}
	return woken, nil
}

// advanceSQL advances n stories (their ids) past their heads (ackLive).
var advanceSQL = newSizedSQL(func(n int) string {
	return `UPDATE stories SET head_id = m.id, head_seq = m.seq, visible_at = m.enqueued_at,
			receive_count = 0, nonce = 0, delayed = 0
		FROM messages m WHERE stories.id IN (` + inList(n) + `) AND m.prev = stories.head_id
		RETURNING stories.id, stories.head_id, stories.head_seq, stories.visible_at`
})

// deleteStoriesSQL deletes n stories by id.
var deleteStoriesSQL = newSizedSQL(func(n int) string { return `DELETE FROM stories WHERE id IN (` + inList(n) + `)` })

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
	// A missing queue has no stories: every handle fails below.
	limit, err := attemptLimit(d, p.QueueID)
	if err != nil && !errors.Is(err, bus.ErrNotFound) {
		return nil, err
	}
	for i, h := range p.Handles {
		if h.QueueID != p.QueueID {
			out[i] = invalid(bus.MsgHandleOtherQueue)
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
func liveHead(d *dbq, h bus.Handle) (receiveCount int, row int64, ok bool, why string, err error) {
	st, err := headOf(d, h.QueueID, h.StoryID)
	switch {
	case err != nil:
		return 0, 0, false, "", err
	case st == nil || st.seq != h.Seq:
		return 0, 0, false, bus.MsgHandleNotInFlight, nil
	case st.nonce == 0 || st.nonce != h.Nonce:
		return 0, 0, false, bus.MsgHandleReceivedAgain, nil
	}
	return st.receiveCount, st.headID, true, "", nil
}

func ackOne(d *dbq, p *bus.SettleParams, h bus.Handle, _ int) (bus.SettleResult, error) {
	now := ms(p.Now)
	_, row, live, why, err := liveHead(d, h)
	if err != nil {
		return bus.SettleResult{}, err
	}
	if !live {
		nonce, err := ackedNonce(d, h.QueueID, h.StoryID, h.Seq)
		switch {
		case err == nil && nonce == h.Nonce:
			return bus.SettleResult{OK: true}, nil // an idempotent re-ack
		case err == nil:
			return invalid(bus.MsgHandleNotInFlight), nil // acknowledged with another handle
		case errors.Is(err, sql.ErrNoRows):
			return invalid(why), nil
		default:
			return bus.SettleResult{}, interpretError(err)
		}
	}
	if err := markAcked(d, h.QueueID, []int64{row}); err != nil {
		return bus.SettleResult{}, err
	}
	if err := recordAcks(d, 1, []any{h.QueueID, h.StoryID, h.Seq, h.Nonce, now}); err != nil {
		return bus.SettleResult{}, err
	}
	woke, err := advance(d, h.QueueID, h.StoryID, row)
	if err != nil {
		return bus.SettleResult{}, err
	}
	return bus.SettleResult{OK: true, Woken: woke}, nil
}

func nackOne(d *dbq, p *bus.SettleParams, h bus.Handle, limit int) (bus.SettleResult, error) {
	now := ms(p.Now)
	count, row, live, why, err := liveHead(d, h)
	if err != nil {
		return bus.SettleResult{}, err
	}
	if !live {
		return invalid(why), nil
	}
	if p.GiveBack {
		// Never delivered: the claim is undone (see bus.SettleParams).
		n := max(count-1, 0)
		if _, err := d.exec(`UPDATE stories SET visible_at = ?, delayed = 0, receive_count = ?, nonce = 0 WHERE id = ?`,
			now, n, h.StoryID); err != nil {
			return bus.SettleResult{}, interpretError(err)
		}
		d.heads.storySet(h.QueueID, h.StoryID, func(s *head) {
			s.visibleAt, s.delayed, s.receiveCount, s.nonce = now, false, n, 0
		})
		return bus.SettleResult{OK: true, Woken: true}, nil
	}
	if count >= limit {
		// Delivered as often as allowed: to the dead letters now.
		woke, err := deadLetter(d, h.QueueID, h.StoryID, row, count, now)
		if err != nil {
			return bus.SettleResult{}, err
		}
		return bus.SettleResult{OK: true, Woken: woke, DeadLettered: true}, nil
	}
	// The nonce stays: the handle still settles until the next receive.
	visibleAt := ms(p.Now.Add(p.Delay))
	if _, err := d.exec(`UPDATE stories SET visible_at = ?, delayed = ? WHERE id = ?`,
		visibleAt, boolInt(p.Delay > 0), h.StoryID); err != nil {
		return bus.SettleResult{}, interpretError(err)
	}
	d.heads.storySet(h.QueueID, h.StoryID, func(s *head) { s.visibleAt, s.delayed = visibleAt, p.Delay > 0 })
	return bus.SettleResult{OK: true, Woken: p.Delay <= 0}, nil
}
