package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
)

// queueCountFrom joins to each connection c its counts at $2 (now), in
// the columns queueCountCols lists, each read in a time that does not grow
// with the queue's depth:
//   - its messages and dead letters: the sums of its counter rows
//     (queue_counts, kept by triggers in the transaction of every change;
//     at most 64 rows);
//   - in flight and delayed: the stories whose head is out (visible_at
//     after $2), a range of the index stories_ready as long as what is out;
//   - the enqueue time of its oldest ready message: the oldest message
//     (index messages_queue, oldest first) that is not a head out, so the
//     scan stops after the heads out older than it. Two things hold the
//     plan to that: the queue is named as a range (>= and <=), not an
//     equality, so that only messages_queue yields the ORDER BY (with an
//     equality the planner may walk messages_enqueued, every queue's
//     messages by age, and filter: as long as the other queues' older
//     messages); and each message's story is looked up by a scalar
//     subquery (its primary key), not NOT EXISTS, which planned as an anti
//     join against a scan of every story when few looked out.
//
// Every other message of the queue is ready. scanCounts reads them.
const queueCountFrom = queueTotalsFrom + `
	LEFT JOIN LATERAL (SELECT m.enqueued_at FROM messages m WHERE m.queue_id >= c.id AND m.queue_id <= c.id
			AND NOT coalesce((SELECT s.head_seq = m.seq AND s.visible_at > $2 FROM stories s WHERE s.id = m.story_id), false)
		ORDER BY m.queue_id, m.enqueued_at LIMIT 1) qo ON true`

// queueTotalsFrom joins to each connection c its message and dead-letter
// counters (qk) and its heads out at $2 (qs: in flight, delayed); the queue
// samples read these alone.
const queueTotalsFrom = `
	CROSS JOIN LATERAL (SELECT coalesce(sum(k.messages), 0)::bigint AS messages,
			coalesce(sum(k.dead_letters), 0)::bigint AS dead_letters
		FROM queue_counts k WHERE k.queue_id = c.id) qk
	CROSS JOIN LATERAL (SELECT count(*) FILTER (WHERE NOT s.delayed) AS in_flight,
			count(*) FILTER (WHERE s.delayed) AS delayed
		FROM stories s WHERE s.queue_id = c.id AND s.visible_at > $2) qs`

// queueCountCols are the columns of queueCountFrom, as scanCounts reads
// them.
const queueCountCols = `qk.messages, qs.in_flight, qs.delayed, qk.dead_letters, qo.enqueued_at`

// queueStatsQuery counts the queues of $1 in one statement (one snapshot).
// Only ids of connections are counted.
const queueStatsQuery = `SELECT c.id, ` + queueCountCols + `
	FROM connections c` + queueCountFrom + ` WHERE c.id = ANY($1::text[])`

// scanCounts reads the columns lead, then queueCountCols, of one row at
// now (milliseconds).
func scanCounts(rows pgx.Rows, n int64, lead ...any) (bus.QueueStats, error) {
	var st bus.QueueStats
	var total int64
	var oldest *int64
	if err := rows.Scan(append(lead, &total, &st.InFlight, &st.Delayed, &st.DeadLetters, &oldest)...); err != nil {
		return st, err
	}
	st.Ready = max(total-st.InFlight-st.Delayed, 0)
	if oldest != nil && *oldest < n {
		st.OldestReadyAgeSeconds = float64(n-*oldest) / 1000
	}
	return st, nil
}

// probePlanSQL holds the rest of the transaction to plans of index probes
// and ranges: no sequential scan, no bitmap scan. It is for the statements
// whose every read has an index but whose generic plan, made without the
// values, may read a whole table instead: the counts of queues
// (queueCountFrom, queueTotalsFrom), the dead-letter list and redrive, the
// purge, the samples and the background sweeps of records past their
// windows (TestGenericPlansProbe). A connection runs a
// prepared statement on its generic plan when an operator forces it
// (plan_cache_mode) or when that plan does not look dearer than the plans
// for the values: made on analyzed tables holding one or two big queues,
// the counts' generic plan read every story of the table to count a
// queue's heads out (TestQueueStatsFlatWithDepth). A bitmap scan cannot
// yield the oldest ready message in order, so it would read and sort all
// of the queue's messages. Penalized so, every plan stays on the indexes
// whatever the tables' statistics. The reads a person waits for send it in
// one pipeline with their statement (the server plans a statement when it
// binds it, after the settings ran), so it costs them no round trip; the
// periodic ones (gauges, samples, sweeps) run it first with probePlan.
const probePlanSQL = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)`

// probePlan applies probePlanSQL to the rest of tx.
func probePlan(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, probePlanSQL)
	return err
}

// probeQuery runs sql with args in tx under probePlanSQL, both in one
// pipeline, and returns its rows; done ends the pipeline and reports its
// error (the caller calls it once it has read the rows, or to give up).
func probeQuery(ctx context.Context, tx pgx.Tx, sql string, args ...any) (rows pgx.Rows, done func() error, err error) {
	b := &pgx.Batch{}
	b.Queue(probePlanSQL)
	b.Queue(sql, args...)
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, nil, err
	}
	if rows, err = br.Query(); err != nil {
		_ = br.Close()
		return nil, nil, err
	}
	return rows, func() error { rows.Close(); return br.Close() }, nil
}

// queueStats counts the queues of ids that exist, in one statement.
func queueStats(ctx context.Context, tx pgx.Tx, ids []string, now time.Time) (map[string]bus.QueueStats, error) {
	out := make(map[string]bus.QueueStats, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	n := ms(now)
	rows, done, err := probeQuery(ctx, tx, queueStatsQuery, ids, n)
	if err != nil {
		return nil, err
	}
	defer done() //nolint:errcheck // an early return has its error already
	for rows.Next() {
		var id string
		st, err := scanCounts(rows, n, &id)
		if err != nil {
			return nil, err
		}
		out[id] = st
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, done()
}

// QueueStatsMany counts several queues in one statement; ids that are no
// queue are left out.
func (s *Store) QueueStatsMany(ctx context.Context, queueIDs []string, now time.Time) (map[string]bus.QueueStats, error) {
	var out map[string]bus.QueueStats
	err := s.run(ctx, true, func(tx pgx.Tx) error {
		var err error
		out, err = queueStats(ctx, tx, queueIDs, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", err)
	}
	return out, nil
}

// seqScanner reads a leading ord into seq, then the columns scanConnection
// reads.
type seqScanner struct {
	row pgx.Row
	seq *int64
}

func (s seqScanner) Scan(dest ...any) error { return s.row.Scan(append([]any{s.seq}, dest...)...) }

// ConnectionPage lists one page of a workspace's connections by creation
// time, then ord (insertion order), as ConnectionList does, reading one row
// past the page to learn whether more follow.
func (t *mgmtTx) ConnectionPage(p bus.ConnectionPageParams) (bus.ConnectionPageResult, error) {
	after, seq := int64(-1<<63), int64(-1)
	if p.After != nil {
		after, seq = ms(p.After.CreatedAt), p.After.Seq
	}
	rows, err := t.tx.Query(t.ctx, `SELECT ord, `+connCols+` FROM connections
		WHERE workspace_id = $1 AND ($2 = '' OR kind = $2) AND (created_at, ord) > ($3, $4)
		ORDER BY created_at, ord LIMIT $5`, p.WorkspaceID, string(p.Kind), after, seq, p.Limit+1)
	if err != nil {
		return bus.ConnectionPageResult{}, interpretError(err)
	}
	var seqs []int64
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.Connection, error) {
		var seq int64
		c, err := scanConnection(seqScanner{r, &seq})
		seqs = append(seqs, seq)
		return c, err
	})
	if err != nil {
		return bus.ConnectionPageResult{}, interpretError(err)
	}
	out := bus.ConnectionPageResult{Connections: cs}
	if len(cs) > p.Limit {
		last := cs[p.Limit-1]
		out.Connections = cs[:p.Limit]
		out.Next = &bus.ConnectionPosition{CreatedAt: last.CreatedAt, Seq: seqs[p.Limit-1]}
	}
	return out, nil
}
