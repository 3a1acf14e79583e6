package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// queueCountCols count the queue c.id at ?2 (now): its messages and dead
// letters from their counters (queue_counts, kept by triggers), and the
// enqueue time of its oldest ready message, the oldest message that is not
// a head out at ?2 nor an acknowledged row waiting to be deleted (the
// index messages_queue yields them oldest first, so the subquery stops
// after the heads out and the acknowledged rows at the front). In flight and delayed are
// counted apart (outCounts). scanCounts reads them.
const queueCountCols = `coalesce((SELECT k.messages FROM queue_counts k WHERE k.queue_id = c.id), 0),
	coalesce((SELECT k.dead_letters FROM queue_counts k WHERE k.queue_id = c.id), 0),
	(SELECT m.enqueued_at FROM messages m WHERE m.queue_id = c.id
		AND NOT EXISTS (SELECT 1 FROM stories s WHERE s.id = m.story_id AND s.head_seq = m.seq AND s.visible_at > ?2)
		AND NOT EXISTS (SELECT 1 FROM acked_messages a WHERE a.id = m.id)
		ORDER BY m.enqueued_at LIMIT 1)`

// queueStatsQuery counts the queues whose ids ?1 holds (a JSON array) in
// one statement.
const queueStatsQuery = `SELECT c.id, ` + queueCountCols + `
	FROM connections c WHERE c.id IN (SELECT value FROM json_each(?1))`

// counted is one queue's counts before its heads out are counted.
type counted struct {
	id       string
	st       bus.QueueStats
	messages int64
}

// scanCounts reads the columns lead, then queueCountCols, of one row at
// now (milliseconds).
func scanCounts(rows *rows, n int64, lead ...any) (counted, error) {
	var c counted
	var oldest sql.NullInt64
	if err := rows.Scan(append(lead, &c.messages, &c.st.DeadLetters, &oldest)...); err != nil {
		return c, err
	}
	if oldest.Valid && oldest.Int64 < n {
		c.st.OldestReadyAgeSeconds = float64(n-oldest.Int64) / 1000 // millisecond precision
	}
	return c, nil
}

// outCounts counts the heads of a queue out at now (in flight, delayed):
// from the writer's index when d is the writer's and holds the queue, from
// the out set the writer published with its last commit (snaps, unless
// nil), else from the
// stories table (the queue is not loaded: all its stories are read, and
// the writer is asked to load it for the next time).
func outCounts(d *dbq, snaps *outSnaps, queueID string, now int64) (inFlight, delayed int64, err error) {
	if d.heads != nil {
		if q := d.heads.loaded(queueID); q != nil {
			inFlight, delayed = countOut(q.out, now)
			return inFlight, delayed, nil
		}
	} else if snaps != nil {
		if t := snaps.get(queueID); t != nil {
			inFlight, delayed = countOut(t, now)
			return inFlight, delayed, nil
		}
		snaps.want(queueID)
	}
	err = d.row(`SELECT count(*) FILTER (WHERE delayed = 0), count(*) FILTER (WHERE delayed = 1)
		FROM stories WHERE queue_id = ? AND visible_at > ?`, queueID, now).Scan(&inFlight, &delayed)
	return inFlight, delayed, interpretError(err)
}

// finish completes c with the heads out at now: ready are the messages
// that are not out.
func (c *counted) finish(d *dbq, snaps *outSnaps, now int64) error {
	var err error
	if c.st.InFlight, c.st.Delayed, err = outCounts(d, snaps, c.id, now); err != nil {
		return err
	}
	c.st.Ready = max(0, c.messages-c.st.InFlight-c.st.Delayed)
	return nil
}

// queueStats counts the queues of ids that exist, in one read snapshot.
func queueStats(d *dbq, snaps *outSnaps, ids []string, now time.Time) (map[string]bus.QueueStats, error) {
	out := make(map[string]bus.QueueStats, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	n := ms(now)
	rows, err := d.query(queueStatsQuery, string(list), n)
	if err != nil {
		return nil, interpretError(err)
	}
	var cs []counted
	for rows.Next() {
		var id string
		c, err := scanCounts(&rows, n, &id)
		if err != nil {
			_ = rows.Close()
			return nil, interpretError(err)
		}
		c.id = id
		cs = append(cs, c)
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	for i := range cs {
		if err := cs[i].finish(d, snaps, n); err != nil {
			return nil, err
		}
		out[cs[i].id] = cs[i].st
	}
	return out, nil
}

// QueueStatsMany counts several queues in one read snapshot; ids that are no queue are left out.
func (s *Store) QueueStatsMany(ctx context.Context, queueIDs []string, now time.Time) (map[string]bus.QueueStats, error) {
	var out map[string]bus.QueueStats
	err := s.consistentRead(ctx, func(d *dbq, snaps *outSnaps) error {
		var err error
		out, err = queueStats(d, snaps, queueIDs, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", err)
	}
	return out, nil
}

// consistentRead runs fn, which reads both the tables and the published
// out sets (snaps), in a read transaction during which no commit began:
// the two then show the same commit (otherwise the counts could mix one
// commit's messages with another's heads out, and show ready a message
// that never was). It tries again when a commit came between; after a few
// tries (a writer that never pauses, a slow reader) it runs fn with snaps
// nil, so that the heads out are counted from the stories table of the
// same read transaction: consistent, at the cost of reading them.
func (s *Store) consistentRead(ctx context.Context, fn func(d *dbq, snaps *outSnaps) error) error {
	snaps := s.w.heads.snaps
	const tries = 8
	for range tries {
		g := snaps.gen.Load()
		if g&1 == 1 { // a commit is under way: it takes microseconds
			time.Sleep(10 * time.Microsecond)
			continue
		}
		if err := s.read(ctx, func(d *dbq) error { return fn(d, snaps) }); err != nil {
			return err
		}
		if snaps.gen.Load() == g {
			return nil
		}
	}
	return s.read(ctx, func(d *dbq) error { return fn(d, nil) })
}
