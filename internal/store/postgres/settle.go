package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
)

// MessageAck acknowledges deliveries, one result per handle, in order, in
// one transaction. A story advanced to a ready head is notified.
func (s *Store) MessageAck(ctx context.Context, p *bus.SettleParams) ([]bus.SettleResult, error) {
	out, ok, err := s.gatheredAck(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("ack: %w", interpretError(err))
	}
	if ok {
		return out, nil
	}
	return s.settle(ctx, p, true)
}

// MessageNack releases deliveries after p.Delay (or dead-letters exhausted
// ones), one result per handle, in order, in one transaction.
func (s *Store) MessageNack(ctx context.Context, p *bus.SettleParams) ([]bus.SettleResult, error) {
	return s.settle(ctx, p, false)
}

// lockStoriesSQL locks the stories $1 of queue $2 for a settle (see settle).
const lockStoriesSQL = `SELECT id, head_seq, nonce, receive_count FROM stories
	WHERE id = ANY($1) AND queue_id || '' = $2 ORDER BY queue_id, story_key FOR UPDATE`

// liveStory is the delivery state of a story locked by a settle.
type liveStory struct {
	head, nonce  int64
	receiveCount int
}

func (s *Store) settle(ctx context.Context, p *bus.SettleParams, ack bool) ([]bus.SettleResult, error) {
	var out []bus.SettleResult
	_, err := s.write(ctx, func(tx pgx.Tx, w *waker) error {
		var err error
		out, err = settle(ctx, tx, w, p, ack)
		return err
	})
	if err != nil {
		if ack {
			return nil, fmt.Errorf("ack: %w", err)
		}
		return nil, fmt.Errorf("nack: %w", err)
	}
	return out, nil
}

// settle is MessageAck (ack) or MessageNack inside its transaction.
func settle(ctx context.Context, tx pgx.Tx, w *waker, p *bus.SettleParams, ack bool) ([]bus.SettleResult, error) {
	now := ms(p.Now)
	out := make([]bus.SettleResult, len(p.Handles))
	if len(p.Handles) == 0 {
		return out, nil
	}

	// Lock every story the handles name, sorted by (queue_id, story_key) as
	// in every batch operation. The ORDER BY sits below the row locking in
	// the plan, so the locks are taken in that order. The queue test is
	// written so that no index can serve it: the rows come by stories_pkey
	// (given queue_id = $2, the planner would walk the queue's whole part
	// of stories_ready for the ids when statistics are missing or stale).
	ids := make([]int64, 0, len(p.Handles))
	for _, h := range p.Handles {
		if h.QueueID == p.QueueID {
			ids = append(ids, h.StoryID)
		}
	}
	live := map[int64]*liveStory{}
	rows, err := tx.Query(ctx, lockStoriesSQL, ids, p.QueueID)
	if err != nil {
		return nil, fmt.Errorf("lock stories: %w", err)
	}
	for rows.Next() {
		var id int64
		var st liveStory
		if err := rows.Scan(&id, &st.head, &st.nonce, &st.receiveCount); err != nil {
			rows.Close()
			return nil, err
		}
		live[id] = &st
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lock stories: %w", err)
	}

	if ack {
		return ackLocked(ctx, tx, w, p, live)
	}
	limit := math.MaxInt32
	if !ack {
		switch l, err := attemptLimit(ctx, tx, p.QueueID); {
		case err == nil:
			limit = l
		case !errors.Is(err, bus.ErrNotFound):
			return nil, err
		}
	}

	fail := func(msg string) bus.SettleResult {
		return bus.SettleResult{Code: bus.CodeReceiptHandleIsInvalid, Message: msg}
	}
	for i, h := range p.Handles {
		if h.QueueID != p.QueueID {
			out[i] = fail(bus.MsgHandleOtherQueue)
			continue
		}
		st := live[h.StoryID]
		if st == nil || st.head != h.Seq {
			// Not the live head: only a repeated ack of the same delivery
			// succeeds.
			if !ack {
				out[i] = fail(bus.MsgHandleNotInFlight)
				continue
			}
			var acked bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ack_records
				WHERE queue_id = $1 AND story_id = $2 AND seq = $3 AND nonce = $4)`,
				h.QueueID, h.StoryID, h.Seq, h.Nonce).Scan(&acked); err != nil {
				return nil, fmt.Errorf("ack record: %w", err)
			}
			if acked {
				out[i] = bus.SettleResult{OK: true}
			} else {
				out[i] = fail(bus.MsgHandleNotInFlight)
			}
			continue
		}
		if st.nonce != h.Nonce {
			out[i] = fail(bus.MsgHandleReceivedAgain)
			continue
		}

		hw := &waker{} // what this handle woke, for its result
		var heads map[int64]int64
		dead := false
		switch {
		case ack:
			if _, err := tx.Exec(ctx, `DELETE FROM messages WHERE story_id = $1 AND seq = $2`, h.StoryID, h.Seq); err != nil {
				return nil, fmt.Errorf("delete message: %w", err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO ack_records (queue_id, story_id, seq, nonce, acked_at)
				VALUES ($1, $2, $3, $4, $5) ON CONFLICT (queue_id, story_id, seq)
				DO UPDATE SET nonce = EXCLUDED.nonce, acked_at = EXCLUDED.acked_at`,
				h.QueueID, h.StoryID, h.Seq, h.Nonce, now); err != nil {
				return nil, fmt.Errorf("ack record: %w", err)
			}
			if heads, err = advance(ctx, tx, hw, now, []int64{h.StoryID}); err != nil {
				return nil, err
			}
		case p.GiveBack:
			// Never delivered: the claim is undone (see bus.SettleParams).
			if _, err := tx.Exec(ctx, `UPDATE stories SET visible_at = $2, delayed = false,
				receive_count = greatest(receive_count - 1, 0), nonce = 0 WHERE id = $1`, h.StoryID, now); err != nil {
				return nil, fmt.Errorf("give back: %w", err)
			}
			st.receiveCount, st.nonce = max(st.receiveCount-1, 0), 0
			hw.wake(h.QueueID)
			out[i] = bus.SettleResult{OK: true, Woken: true}
			mergeWoken(w, hw)
			continue
		case st.receiveCount >= limit:
			// Exhausted: to the dead letters now, whatever the delay.
			held := []heldStory{{id: h.StoryID, queue: h.QueueID, head: h.Seq, receiveCount: st.receiveCount}}
			if _, heads, err = moveHeads(ctx, tx, hw, now, held); err != nil {
				return nil, err
			}
			dead = true
		default:
			// Release: the nonce stays, so this handle still settles the
			// delivery until the next receive.
			if _, err := tx.Exec(ctx, `UPDATE stories SET visible_at = $2, delayed = $3 WHERE id = $1`,
				h.StoryID, ms(p.Now.Add(p.Delay)), p.Delay > 0); err != nil {
				return nil, fmt.Errorf("release: %w", err)
			}
			if p.Delay <= 0 {
				hw.wake(h.QueueID)
			}
			out[i] = bus.SettleResult{OK: true, Woken: hw.has(h.QueueID)}
			mergeWoken(w, hw)
			continue
		}
		// The head left: follow the story to its new head, if any.
		if head, ok := heads[h.StoryID]; ok {
			*st = liveStory{head: head}
		} else {
			delete(live, h.StoryID)
		}
		out[i] = bus.SettleResult{OK: true, Woken: hw.has(h.QueueID), DeadLettered: dead}
		mergeWoken(w, hw)
	}
	return out, nil
}

// mergeWoken adds the queues of from to w.
func mergeWoken(w, from *waker) {
	for q := range from.queues {
		w.wake(q)
	}
}

// ackLocked is MessageAck once the stories are locked. The handles that
// acknowledge a live head are settled together, in one pipeline of three
// statements whatever their number (delete the messages, write the ack
// records, advance the stories), instead of three or four round trips a
// handle. Results are those of settling the handles one by one in order:
// a handle is judged against the stories as the handles before it left
// them, so a handle on a story already acknowledged in this call waits for
// the batch and is judged against the story's new state.
func ackLocked(ctx context.Context, tx pgx.Tx, w *waker, p *bus.SettleParams, live map[int64]*liveStory) ([]bus.SettleResult, error) {
	now := ms(p.Now)
	out := make([]bus.SettleResult, len(p.Handles))
	fail := func(msg string) bus.SettleResult {
		return bus.SettleResult{Code: bus.CodeReceiptHandleIsInvalid, Message: msg}
	}
	// judge settles a handle that does not acknowledge a live head: only a
	// repeated ack of the same delivery succeeds.
	judge := func(h bus.Handle) (bus.SettleResult, error) {
		st := live[h.StoryID]
		if st != nil && st.head == h.Seq {
			return fail(bus.MsgHandleReceivedAgain), nil // st.nonce != h.Nonce
		}
		var acked bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ack_records
			WHERE queue_id = $1 AND story_id = $2 AND seq = $3 AND nonce = $4)`,
			h.QueueID, h.StoryID, h.Seq, h.Nonce).Scan(&acked); err != nil {
			return bus.SettleResult{}, fmt.Errorf("ack record: %w", err)
		}
		if acked {
			return bus.SettleResult{OK: true}, nil
		}
		return fail(bus.MsgHandleNotInFlight), nil
	}

	var valid, later []int
	acking := map[int64]bool{}
	for i, h := range p.Handles {
		if h.QueueID != p.QueueID {
			out[i] = fail(bus.MsgHandleOtherQueue)
			continue
		}
		if acking[h.StoryID] {
			later = append(later, i)
			continue
		}
		if st := live[h.StoryID]; st != nil && st.head == h.Seq && st.nonce == h.Nonce {
			valid = append(valid, i)
			acking[h.StoryID] = true
			continue
		}
		r, err := judge(h)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	if len(valid) > 0 {
		sids, seqs, nonces := make([]int64, len(valid)), make([]int64, len(valid)), make([]int64, len(valid))
		for k, i := range valid {
			h := p.Handles[i]
			sids[k], seqs[k], nonces[k] = h.StoryID, h.Seq, h.Nonce
		}
		b := &pgx.Batch{}
		b.Queue(`DELETE FROM messages m USING unnest($1::bigint[], $2::bigint[]) AS h(sid, seq)
			WHERE m.story_id = h.sid AND m.seq = h.seq AND m.story_id = ANY($1)`, sids, seqs)
		b.Queue(`INSERT INTO ack_records (queue_id, story_id, seq, nonce, acked_at)
			SELECT $1, sid, seq, nonce, $5 FROM unnest($2::bigint[], $3::bigint[], $4::bigint[]) AS h(sid, seq, nonce)
			ON CONFLICT (queue_id, story_id, seq) DO UPDATE SET nonce = EXCLUDED.nonce, acked_at = EXCLUDED.acked_at`,
			p.QueueID, sids, seqs, nonces, now)
		// A later statement than the delete: it sees the story's remaining
		// messages, every one committed before our lock included.
		b.Queue(advanceSQL, sids)
		br := tx.SendBatch(ctx, b)
		var heads map[int64]int64
		var ready map[int64]bool
		_, err := br.Exec()
		if err != nil {
			err = fmt.Errorf("delete messages: %w", err)
		} else if _, err = br.Exec(); err != nil {
			err = fmt.Errorf("ack records: %w", err)
		} else {
			var rows pgx.Rows
			if rows, err = br.Query(); err == nil {
				// advanced's own statement (deleting emptied stories) must
				// wait for the batch to close: read the rows first.
				heads, ready, err = collectAdvanced(w, now, rows)
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		if err := deleteEmptied(ctx, tx, sids, heads); err != nil {
			return nil, err
		}
		for _, i := range valid {
			sid := p.Handles[i].StoryID
			out[i] = bus.SettleResult{OK: true, Woken: ready[sid]}
			if head, ok := heads[sid]; ok {
				*live[sid] = liveStory{head: head}
			} else {
				delete(live, sid)
			}
		}
	}
	for _, i := range later {
		r, err := judge(p.Handles[i])
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}
