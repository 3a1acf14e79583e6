package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sombus/sombus/internal/bus"
)

// MessageReceive replays an attempt id, or moves the queue's exhausted
// heads to the dead letters and claims up to p.Max ready stories. Queues
// made ready by the dead-letter move are notified once it commits.
func (s *Store) MessageReceive(ctx context.Context, p *bus.ReceiveParams) (*bus.ReceiveResult, error) {
	if p.AttemptID == "" && p.Max >= 1 {
		res, done, err := s.idleReceive(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("receive: %w", err)
		}
		if done {
			return res, nil
		}
	}
	if p.AttemptID == "" {
		res, ok, err := s.gatheredReceive(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("receive: %w", interpretError(err))
		}
		if ok {
			return res, nil
		}
	}
	var res *bus.ReceiveResult
	woken, err := s.write(ctx, func(tx pgx.Tx, w *waker) error {
		var err error
		res, err = receive(ctx, tx, w, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("receive: %w", err)
	}
	res.Woken = woken
	return res, nil
}

// quickReceiveSQL is a receive without an attempt id as one statement:
// the attempt limit, whether the queue has exhausted heads to move to the
// dead letters (then it claims nothing), the claim (as in receive), the
// head message of each claimed story and the earliest future visible_at
// before the claim. It returns one row per claimed story, or one row of
// NULL claims when it claimed nothing, or no row when the queue's
// connection does not exist.
//
// now ($2) is compared as (SELECT $2::bigint), a value the planner does not
// see: given the value, it probes the ends of stories_ready and
// stories_received_queue for the range's selectivity, and the ends of
// those indexes are where every claim and ack leaves dead entries; that
// probing took 2.3 ms a plan against 0.6 ms without (the plan, index scans
// in order, is the same).
const quickReceiveSQL = `WITH lim AS (
		SELECT attempt_limit AS l FROM connections WHERE id = $1
	), ex AS (
		-- receive_count > 0 lets stories_received_queue answer; an attempt
		-- limit below 1 (never set by the bus) would exhaust every story.
		SELECT EXISTS (SELECT 1 FROM stories
				WHERE queue_id = $1 AND receive_count > 0 AND visible_at <= (SELECT $2::bigint) AND receive_count >= (SELECT l FROM lim))
			OR ((SELECT l FROM lim) < 1 AND EXISTS (SELECT 1 FROM stories WHERE queue_id = $1 AND visible_at <= (SELECT $2::bigint))) AS e
	), picked AS (
		SELECT id, visible_at FROM stories
		WHERE queue_id = $1 AND visible_at <= (SELECT $2::bigint) AND receive_count < (SELECT l FROM lim)
			AND NOT (SELECT e FROM ex)
		ORDER BY visible_at, id
		LIMIT $3
		FOR UPDATE SKIP LOCKED
	), numbered AS (
		SELECT id, row_number() OVER (ORDER BY visible_at, id) AS n FROM picked
	), claimed AS (
		UPDATE stories s
		SET receive_count = s.receive_count + 1, nonce = ($4::bigint[])[numbered.n::int], visible_at = $5, delayed = false
		FROM numbered WHERE s.id = numbered.id AND s.id = ANY (ARRAY(SELECT id FROM picked))
		RETURNING s.id, s.head_seq, s.nonce, s.receive_count, numbered.n
	), nxt AS (
		SELECT min(visible_at) AS v FROM stories WHERE queue_id = $1 AND visible_at > (SELECT $2::bigint)
	)
	SELECT ex.e, nxt.v, c.id, c.head_seq, c.nonce, c.receive_count, c.n, m.story_id,
		m.message_id, m.message_type, m.correlation_id, m.topic, m.producer_id, m.enqueued_at, m.envelope
	FROM lim CROSS JOIN ex CROSS JOIN nxt
	LEFT JOIN claimed c ON true
	LEFT JOIN messages m ON m.story_id = c.id AND m.seq = c.head_seq
	ORDER BY c.n`

// fillHeadsTimeout bounds the reading of a committed claim's heads.
const fillHeadsTimeout = 10 * time.Second

// quickReceive is MessageReceive without an attempt id in one round trip:
// quickReceiveSQL in a statement of its own (an implicit transaction).
// ok is false, with nothing done, when the queue has exhausted heads to
// move to the dead letters first, or when the database ended the claim as
// a deadlock's victim or a serialization failure: then the caller runs the
// full receive.
//
// The head messages are read in the statement that locks the stories, so
// in its snapshot: a story whose row changed after the snapshot (an ack
// that committed meanwhile advanced it to a message published meanwhile)
// may have a head the snapshot does not show. Those heads are read again
// in a later statement; the claim has committed by then, and a head that
// is gone by then (purged, expired, its connection removed, or settled by
// another receiver after a zero visibility) is left out of the answer, as
// if that had happened just after this receive.
func (s *Store) quickReceive(ctx context.Context, p *bus.ReceiveParams) (*bus.ReceiveResult, bool, error) {
	now, visAt := ms(p.Now), ms(p.Now.Add(p.Visibility))
	max := min(max(p.Max, 0), maxClaim)
	nonces := make([]int64, max)
	for i := range nonces {
		nonces[i] = newNonce()
	}
	conn, err := s.quick.Acquire(ctx) // quickpool.go
	if err != nil {
		return nil, false, err
	}
	defer conn.Release()
	b := &pgx.Batch{} // one statement: an implicit transaction (quickAck)
	b.Queue(quickReceiveSQL, p.QueueID, now, max, nonces, visAt)
	br := conn.SendBatch(ctx, b)
	res, found, exhausted, next, missing, err := scanQuickReceive(br, p.QueueID, max)
	if err = endPipeline(conn, br, err); err != nil {
		if isRetryable(err) {
			// The database ended it as a deadlock's victim or a
			// serialization failure: nothing it did stays, and the full
			// receive runs, with its retries (as the quick publish and ack
			// fall back).
			s.logger.DebugContext(ctx, "postgres: quick receive failed; running the full receive", "err", err)
			return nil, false, nil
		}
		return nil, false, err
	}
	if !found {
		return nil, false, fmt.Errorf("%w: queue %s", bus.ErrNotFound, p.QueueID)
	}
	if exhausted {
		return nil, false, nil
	}
	conn.Release() // fillHeads takes a connection of its own
	// What the claim took; fillHeads may leave some of it out.
	claimed := len(res.Deliveries)
	if len(missing) > 0 {
		// The claim has committed: its answer is finished even when the
		// caller left or reached its deadline meanwhile (the caller's side
		// then gives the messages back, which it cannot do without them),
		// within a bound of its own.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fillHeadsTimeout)
		filled, err := s.fillHeads(fctx, p.QueueID, res.Deliveries, missing)
		cancel()
		if err != nil {
			// The claim stands: answer the heads read with it, so that they
			// are delivered or given back; those not read stay claimed
			// until their visibility ends. Nothing read: the error.
			kept := res.Deliveries[:0]
			for _, d := range res.Deliveries {
				if d.Handle.QueueID != "" {
					kept = append(kept, d)
				}
			}
			if len(kept) == 0 {
				return nil, false, err
			}
			s.logger.WarnContext(ctx, "postgres: heads of a committed claim not read; answering the others",
				"queue_id", p.QueueID, "unread", len(missing), "err", err)
			filled = kept
		}
		res.Deliveries = filled
	}
	if next != nil {
		res.NextVisibleAt = fromMS(*next)
	}
	// The claimed stories are visible again at visAt, which the snapshot
	// did not show.
	if len(res.Deliveries) > 0 && visAt > now && (next == nil || visAt < *next) {
		res.NextVisibleAt = fromMS(visAt)
	}
	if len(res.Deliveries) == 0 {
		res.Deliveries = nil
	}
	switch {
	case max == 0:
		// A claim of max 0 says nothing of the queue.
	case claimed == 0, claimed < max && visAt > now:
		// It took nothing, or every ready story it saw that no other
		// transaction held, and those it took are not visible again
		// before visAt: the next receive most likely finds nothing. A
		// consumer that takes what came and polls again (the usual
		// long-poll loop) then costs the gathered check instead of a claim
		// of nothing. Only a hint (idleQueues): a story skipped while
		// locked, or made ready since, is seen by the check.
		s.idle.mark(p.QueueID)
	default:
		s.idle.forget(p.QueueID)
	}
	return res, true, nil
}

// scanQuickReceive reads the rows of quickReceive's pipeline (its one
// statement, quickReceiveSQL); endPipeline reads to its commit. found is
// false when the statement returned no row (the queue's connection does
// not exist); missing are the claimed stories whose head the statement's
// snapshot did not show, whose deliveries are left empty in res.
func scanQuickReceive(br pgx.BatchResults, queueID string, capacity int) (res *bus.ReceiveResult, found, exhausted bool, next *int64, missing []claimedStory, err error) {
	rows, err := br.Query()
	if err != nil {
		return nil, false, false, nil, nil, err
	}
	defer rows.Close()
	res = &bus.ReceiveResult{}
	// Nullable columns are read into pgtype values, not pointers: a
	// pointer target costs an allocation per column and row (about ten
	// a message), these none; the row's variables, in one struct (one
	// allocation), are shared by the rows.
	var r struct {
		ex                                  bool
		nxt, id, head, nonce, ord, sid, enq pgtype.Int8
		receiveCount                        pgtype.Int4
		mid, mtype, corr, topic, prod       pgtype.Text
		env                                 []byte // a new slice each row
	}
	for rows.Next() {
		found = true
		if err := rows.Scan(&r.ex, &r.nxt, &r.id, &r.head, &r.nonce, &r.receiveCount, &r.ord, &r.sid,
			&r.mid, &r.mtype, &r.corr, &r.topic, &r.prod, &r.enq, &r.env); err != nil {
			return nil, false, false, nil, nil, err
		}
		if !r.id.Valid {
			continue // nothing claimed
		}
		if res.Deliveries == nil { // sized for the claim, once it claimed
			res.Deliveries = make([]bus.Delivery, 0, capacity)
		}
		if !r.sid.Valid {
			missing = append(missing, claimedStory{id: r.id.Int64, head: r.head.Int64, nonce: r.nonce.Int64,
				receiveCount: int(r.receiveCount.Int32), ord: r.ord.Int64})
			res.Deliveries = append(res.Deliveries, bus.Delivery{}) // filled below
			continue
		}
		res.Deliveries = append(res.Deliveries, bus.Delivery{
			Handle:    bus.Handle{QueueID: queueID, StoryID: r.id.Int64, Seq: r.head.Int64, Nonce: r.nonce.Int64},
			MessageID: r.mid.String, MessageType: r.mtype.String, CorrelationID: r.corr.String,
			Topic: r.topic.String, ProducerID: r.prod.String, EnqueuedAt: fromMS(r.enq.Int64),
			ReceiveCount: int(r.receiveCount.Int32), Envelope: r.env,
		})
	}
	exhausted = r.ex
	if r.nxt.Valid {
		v := r.nxt.Int64
		next = &v
	}
	if err := rows.Err(); err != nil {
		return nil, false, false, nil, nil, err
	}
	rows.Close()
	return res, found, exhausted, next, missing, nil
}

// fillHeads reads the head messages of claimed stories that quickReceive's
// snapshot did not show into the empty deliveries of ds (in ord order, as
// missing is), dropping those whose head is gone.
func (s *Store) fillHeads(ctx context.Context, queueID string, ds []bus.Delivery, missing []claimedStory) ([]bus.Delivery, error) {
	sids, seqs := make([]int64, len(missing)), make([]int64, len(missing))
	for i, c := range missing {
		sids[i], seqs[i] = c.id, c.head
	}
	rows, err := s.pool.Query(ctx, `SELECT m.story_id, m.message_id, m.message_type, m.correlation_id, m.topic,
			m.producer_id, m.enqueued_at, m.envelope
		FROM messages m JOIN unnest($1::bigint[], $2::bigint[]) AS h(sid, seq) ON m.story_id = h.sid AND m.seq = h.seq`,
		sids, seqs)
	if err != nil {
		return nil, fmt.Errorf("heads: %w", err)
	}
	byStory, err := scanHeads(rows)
	if err != nil {
		return nil, err
	}
	out := ds[:0]
	k := 0
	for _, d := range ds {
		if d.Handle.QueueID != "" {
			out = append(out, d)
			continue
		}
		c := missing[k]
		k++
		h, ok := byStory[c.id]
		if !ok {
			continue // gone since the claim committed
		}
		h.Handle = bus.Handle{QueueID: queueID, StoryID: c.id, Seq: c.head, Nonce: c.nonce}
		h.ReceiveCount = c.receiveCount
		out = append(out, h)
	}
	return out, nil
}

// scanHeads reads rows of head messages (story_id first) by story.
func scanHeads(rows pgx.Rows) (map[int64]bus.Delivery, error) {
	defer rows.Close()
	byStory := map[int64]bus.Delivery{}
	for rows.Next() {
		var d bus.Delivery
		var sid, enq int64
		if err := rows.Scan(&sid, &d.MessageID, &d.MessageType, &d.CorrelationID, &d.Topic, &d.ProducerID, &enq, &d.Envelope); err != nil {
			return nil, err
		}
		d.EnqueuedAt = fromMS(enq)
		byStory[sid] = d
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heads: %w", err)
	}
	return byStory, nil
}

// maxClaim bounds the nonces drawn per receive (the bus allows far fewer
// messages per receive).
const maxClaim = 10_000

// attemptLimit reads the attempt limit of a queue's connection.
func attemptLimit(ctx context.Context, tx pgx.Tx, queueID string) (int, error) {
	var limit int
	err := tx.QueryRow(ctx, `SELECT attempt_limit FROM connections WHERE id = $1`, queueID).Scan(&limit)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("%w: queue %s", bus.ErrNotFound, queueID)
	}
	return limit, err
}

// storedHandle is a handle as an attempt record keeps it.
type storedHandle struct {
	StoryID int64 `json:"story_id"`
	Seq     int64 `json:"seq"`
	Nonce   int64 `json:"nonce"`
}

// receive is MessageReceive inside its transaction.
func receive(ctx context.Context, tx pgx.Tx, w *waker, p *bus.ReceiveParams) (*bus.ReceiveResult, error) {
	now, visAt := ms(p.Now), ms(p.Now.Add(p.Visibility))
	limit, err := attemptLimit(ctx, tx, p.QueueID)
	if err != nil {
		return nil, err
	}
	res := &bus.ReceiveResult{}

	if p.AttemptID != "" {
		replay, err := takeAttempt(ctx, tx, p, now)
		if err != nil {
			return nil, err
		}
		if replay != nil {
			res.Replayed = true // final, even when nothing is still in flight
			if res.Deliveries, err = replayAttempt(ctx, tx, p, now, visAt, replay); err != nil {
				return nil, err
			}
			res.NextVisibleAt, err = nextVisible(ctx, tx, p.QueueID, now)
			return res, err
		}
	}

	// Exhausted heads that are visible again go to the dead letters first.
	// SKIP LOCKED: a story locked now is being settled or claimed by
	// someone else; the next receive or the sweeper gets to it.
	// receive_count > 0 (implied by the limit, at least 1 from the bus)
	// lets stories_received_queue answer.
	exhausted := `SELECT id, queue_id, head_seq, receive_count FROM stories
		WHERE queue_id = $1 AND visible_at <= $2 AND receive_count >= $3 AND receive_count > 0
		ORDER BY visible_at, id FOR UPDATE SKIP LOCKED`
	if limit < 1 {
		exhausted = strings.Replace(exhausted, " AND receive_count > 0", "", 1)
	}
	rows, err := tx.Query(ctx, exhausted, p.QueueID, now, limit)
	if err != nil {
		return nil, err
	}
	held, err := pgx.CollectRows(rows, scanHeld)
	if err != nil {
		return nil, err
	}
	if res.DeadLettered, _, err = moveHeads(ctx, tx, w, now, held); err != nil {
		return nil, err
	}

	// The claim: lock the oldest ready stories in a CTE (the LIMIT applies
	// before the locks, see PostgreSQL bug #15715 for the IN form), then
	// start a delivery on each with a nonce from nonces[n]. Exhausted
	// stories that were locked during the move above are left alone.
	max := min(max(p.Max, 0), maxClaim)
	nonces := make([]int64, max)
	for i := range nonces {
		nonces[i] = newNonce()
	}
	rows, err = tx.Query(ctx, `WITH picked AS (
			SELECT id, visible_at FROM stories
			WHERE queue_id = $1 AND visible_at <= $2 AND receive_count < $3
			ORDER BY visible_at, id
			LIMIT $4
			FOR UPDATE SKIP LOCKED
		), numbered AS (
			SELECT id, row_number() OVER (ORDER BY visible_at, id) AS n FROM picked
		)
		UPDATE stories s
		SET receive_count = s.receive_count + 1, nonce = ($5::bigint[])[numbered.n::int], visible_at = $6, delayed = false
		FROM numbered WHERE s.id = numbered.id AND s.id = ANY (ARRAY(SELECT id FROM picked))
		RETURNING s.id, s.head_seq, s.nonce, s.receive_count, numbered.n`,
		p.QueueID, now, limit, max, nonces, visAt)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, scanClaimed)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	if res.Deliveries, err = deliveries(ctx, tx, p.QueueID, claimed); err != nil {
		return nil, err
	}

	if p.AttemptID != "" {
		if err := recordAttempt(ctx, tx, p, res.Deliveries); err != nil {
			return nil, err
		}
	}
	res.NextVisibleAt, err = nextVisible(ctx, tx, p.QueueID, now)
	return res, err
}

// heldStory is a story row this transaction locked.
type heldStory struct {
	id           int64
	queue        string
	head         int64
	receiveCount int
}

func scanHeld(r pgx.CollectableRow) (heldStory, error) {
	var h heldStory
	err := r.Scan(&h.id, &h.queue, &h.head, &h.receiveCount)
	return h, err
}

// claimedStory is a story whose head a receive delivers; ord orders the
// deliveries.
type claimedStory struct {
	id, head, nonce int64
	receiveCount    int
	ord             int64
}

func scanClaimed(r pgx.CollectableRow) (claimedStory, error) {
	var c claimedStory
	err := r.Scan(&c.id, &c.head, &c.nonce, &c.receiveCount, &c.ord)
	return c, err
}

// deliveries reads the head messages of claimed stories, in ord order. It
// runs in a statement after the claim, so it sees every message committed
// before the locks were taken.
func deliveries(ctx context.Context, tx pgx.Tx, queueID string, claimed []claimedStory) ([]bus.Delivery, error) {
	if len(claimed) == 0 {
		return nil, nil
	}
	sort.Slice(claimed, func(i, j int) bool { return claimed[i].ord < claimed[j].ord })
	sids, seqs := make([]int64, len(claimed)), make([]int64, len(claimed))
	for i, c := range claimed {
		sids[i], seqs[i] = c.id, c.head
	}
	rows, err := tx.Query(ctx, `SELECT m.story_id, m.message_id, m.message_type, m.correlation_id, m.topic,
			m.producer_id, m.enqueued_at, m.envelope
		FROM messages m JOIN unnest($1::bigint[], $2::bigint[]) AS h(sid, seq) ON m.story_id = h.sid AND m.seq = h.seq`,
		sids, seqs)
	if err != nil {
		return nil, fmt.Errorf("heads: %w", err)
	}
	byStory, err := scanHeads(rows)
	if err != nil {
		return nil, err
	}
	out := make([]bus.Delivery, 0, len(claimed))
	for _, c := range claimed {
		d, ok := byStory[c.id]
		if !ok {
			// A story row always has its head message; a missing one is a
			// broken invariant, not something to hand out.
			return nil, fmt.Errorf("story %d: head message %d is missing", c.id, c.head)
		}
		d.Handle = bus.Handle{QueueID: queueID, StoryID: c.id, Seq: c.head, Nonce: c.nonce}
		d.ReceiveCount = c.receiveCount
		out = append(out, d)
	}
	return out, nil
}

// takeAttempt makes this receive the owner of its attempt id, or returns
// the handles to replay when a live record exists. A new record is
// inserted with no handles; a concurrent receive with the same attempt id
// waits on that insert and then replays what this one commits.
func takeAttempt(ctx context.Context, tx pgx.Tx, p *bus.ReceiveParams, now int64) ([]storedHandle, error) {
	cutoff := ms(p.Now.Add(-p.AttemptWindow))
	for try := 0; try < 3; try++ {
		tag, err := tx.Exec(ctx, `INSERT INTO attempts (queue_id, attempt_id, created_at, handles)
			VALUES ($1, $2, $3, NULL) ON CONFLICT (queue_id, attempt_id) DO NOTHING`, p.QueueID, p.AttemptID, now)
		if err != nil {
			return nil, fmt.Errorf("attempt: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return nil, nil
		}
		var created int64
		var handles *string
		err = tx.QueryRow(ctx, `SELECT created_at, handles FROM attempts
			WHERE queue_id = $1 AND attempt_id = $2 FOR UPDATE`, p.QueueID, p.AttemptID).Scan(&created, &handles)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // deleted since the insert saw it: try again
		}
		if err != nil {
			return nil, fmt.Errorf("attempt: %w", err)
		}
		if created <= cutoff {
			// Expired: the receive proceeds as fresh and owns the record.
			_, err := tx.Exec(ctx, `UPDATE attempts SET created_at = $3, handles = NULL
				WHERE queue_id = $1 AND attempt_id = $2`, p.QueueID, p.AttemptID, now)
			return nil, err
		}
		hs := []storedHandle{}
		if handles != nil {
			if err := json.Unmarshal([]byte(*handles), &hs); err != nil {
				return nil, fmt.Errorf("attempt %s: %w", p.AttemptID, err)
			}
		}
		return hs, nil
	}
	return nil, fmt.Errorf("attempt %s: record keeps changing", p.AttemptID)
}

// recordAttempt stores the handles of an owned attempt, or drops the record
// when the receive returned nothing.
func recordAttempt(ctx context.Context, tx pgx.Tx, p *bus.ReceiveParams, ds []bus.Delivery) error {
	if len(ds) == 0 {
		_, err := tx.Exec(ctx, `DELETE FROM attempts WHERE queue_id = $1 AND attempt_id = $2`, p.QueueID, p.AttemptID)
		return err
	}
	hs := make([]storedHandle, len(ds))
	for i, d := range ds {
		hs[i] = storedHandle{StoryID: d.Handle.StoryID, Seq: d.Handle.Seq, Nonce: d.Handle.Nonce}
	}
	b, err := json.Marshal(hs)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE attempts SET handles = $3 WHERE queue_id = $1 AND attempt_id = $2`,
		p.QueueID, p.AttemptID, string(b))
	return err
}

// replayAttempt returns the deliveries of an attempt that are still in
// flight, with the same handles and receive counts, extending visibility.
func replayAttempt(ctx context.Context, tx pgx.Tx, p *bus.ReceiveParams, now, visAt int64, hs []storedHandle) ([]bus.Delivery, error) {
	if len(hs) == 0 {
		return nil, nil
	}
	sids, seqs, nonces := make([]int64, len(hs)), make([]int64, len(hs)), make([]int64, len(hs))
	for i, h := range hs {
		sids[i], seqs[i], nonces[i] = h.StoryID, h.Seq, h.Nonce
	}
	// By stories_pkey alone (s.id = ANY, and a queue test no index can
	// serve), as in quickAck: given s.queue_id = $1 the planner may scan
	// the queue's whole part of stories_ready.
	rows, err := tx.Query(ctx, `UPDATE stories s SET visible_at = $3
		FROM unnest($4::bigint[], $5::bigint[], $6::bigint[]) WITH ORDINALITY AS h(sid, seq, nonce, ord)
		WHERE s.id = h.sid AND s.id = ANY($4) AND s.queue_id || '' = $1 AND s.head_seq = h.seq AND s.nonce = h.nonce AND s.visible_at > $2
			AND NOT s.delayed
		RETURNING s.id, s.head_seq, s.nonce, s.receive_count, h.ord`,
		p.QueueID, now, visAt, sids, seqs, nonces)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, scanClaimed)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return deliveries(ctx, tx, p.QueueID, claimed)
}

// nextVisible is the earliest future visible_at of the queue's stories.
func nextVisible(ctx context.Context, tx pgx.Tx, queueID string, now int64) (t time.Time, err error) {
	var v *int64
	if err := tx.QueryRow(ctx, `SELECT min(visible_at) FROM stories WHERE queue_id = $1 AND visible_at > $2`,
		queueID, now).Scan(&v); err != nil {
		return t, err
	}
	if v != nil {
		t = fromMS(*v)
	}
	return t, nil
}

// moveHeads moves the heads of held stories to the dead letters (keeping
// their receive counts, dead-lettered at now) and advances the stories.
// The stories must be locked by this transaction. It returns the count and
// the new head of each story that has one.
func moveHeads(ctx context.Context, tx pgx.Tx, w *waker, now int64, held []heldStory) (int, map[int64]int64, error) {
	if len(held) == 0 {
		return 0, nil, nil
	}
	sids, seqs, rcs := make([]int64, len(held)), make([]int64, len(held)), make([]int32, len(held))
	for i, h := range held {
		sids[i], seqs[i], rcs[i] = h.id, h.head, int32(h.receiveCount)
	}
	tag, err := tx.Exec(ctx, `WITH h AS (
			SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::int[]) WITH ORDINALITY AS t(sid, seq, rc, ord)
		), moved AS (
			DELETE FROM messages m USING h WHERE m.story_id = h.sid AND m.seq = h.seq
			RETURNING m.queue_id, m.message_id, m.message_type, m.topic, m.correlation_id, m.producer_id,
				h.rc, m.enqueued_at, m.envelope, h.ord
		)
		INSERT INTO dead_letters (queue_id, message_id, message_type, topic, correlation_id, producer_id,
			receive_count, enqueued_at, dead_lettered_at, envelope)
		SELECT queue_id, message_id, message_type, topic, correlation_id, producer_id, rc, enqueued_at, $4, envelope
		FROM moved ORDER BY ord`, sids, seqs, rcs, now)
	if err != nil {
		return 0, nil, fmt.Errorf("dead-letter move: %w", err)
	}
	heads, err := advance(ctx, tx, w, now, sids)
	if err != nil {
		return 0, nil, err
	}
	return int(tag.RowsAffected()), heads, nil
}

// advance moves locked stories whose head left (ack, dead-letter move,
// retention) on to their smallest remaining message, offered again from
// that message's enqueued_at with a fresh receive count; a story with no
// message left is deleted. It reads the messages in statements after the
// lock, so a publish that committed before the lock is seen. Queues that
// got a ready head are woken. It returns the new head of each story that
// has one.
func advance(ctx context.Context, tx pgx.Tx, w *waker, now int64, ids []int64) (map[int64]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, advanceSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("advance: %w", err)
	}
	heads, _, err := advanced(ctx, tx, w, now, ids, rows)
	return heads, err
}

// advanceSQL moves the stories $1 to their smallest remaining message.
//
// Its shape keeps it on the primary keys whatever the statistics say: the
// first message of each story by a LATERAL ... LIMIT 1 on messages_pkey,
// and the stories by s.id = ANY($1) on stories_pkey. (Joined as a
// DISTINCT ON whose size the planner cannot know, it hash-joined a
// sequential scan of stories; the queue tables churn faster than ANALYZE
// runs and carry many dead versions between vacuums, so a sequential scan
// on every ack cost more than the rest of the ack.) The same
// s.id = ANY(...) companions keep the claim and the settles on the keys.
const advanceSQL = `WITH nxt AS (
		SELECT u.id AS story_id, m.seq, m.enqueued_at FROM unnest($1::bigint[]) AS u(id)
		CROSS JOIN LATERAL (SELECT seq, enqueued_at FROM messages WHERE story_id = u.id ORDER BY seq LIMIT 1) m
	)
	UPDATE stories s SET head_seq = nxt.seq, receive_count = 0, nonce = 0, delayed = false, visible_at = nxt.enqueued_at
	FROM nxt WHERE s.id = nxt.story_id AND s.id = ANY($1)
	RETURNING s.id, s.queue_id, s.head_seq, s.visible_at`

// advanced reads the rows of advanceSQL run on ids, wakes the queues that
// got a ready head and deletes the stories left without a message. It
// returns the new heads and the stories whose new head is ready now.
func advanced(ctx context.Context, tx pgx.Tx, w *waker, now int64, ids []int64, rows pgx.Rows) (map[int64]int64, map[int64]bool, error) {
	heads, ready, err := collectAdvanced(w, now, rows)
	if err != nil {
		return nil, nil, err
	}
	if err := deleteEmptied(ctx, tx, ids, heads); err != nil {
		return nil, nil, err
	}
	return heads, ready, nil
}

// collectAdvanced reads the rows of advanceSQL: the new heads, and the
// stories whose new head is ready now (their queues are woken).
func collectAdvanced(w *waker, now int64, rows pgx.Rows) (map[int64]int64, map[int64]bool, error) {
	defer rows.Close()
	heads := map[int64]int64{}
	ready := map[int64]bool{}
	for rows.Next() {
		var id, head, vis int64
		var q string
		if err := rows.Scan(&id, &q, &head, &vis); err != nil {
			return nil, nil, err
		}
		heads[id] = head
		if vis <= now {
			w.wake(q)
			ready[id] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("advance: %w", err)
	}
	return heads, ready, nil
}

// deleteEmptied deletes the stories of ids that advanceSQL did not move
// (no message left).
func deleteEmptied(ctx context.Context, tx pgx.Tx, ids []int64, heads map[int64]int64) error {
	if len(heads) == len(ids) {
		return nil
	}
	moved := make([]int64, 0, len(heads)) // not nil: nil would be NULL in NOT (id = ANY($2))
	for id := range heads {
		moved = append(moved, id)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM stories WHERE id = ANY($1) AND NOT (id = ANY($2))`, ids, moved); err != nil {
		return fmt.Errorf("advance: delete empty stories: %w", err)
	}
	return nil
}
