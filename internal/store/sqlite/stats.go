package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// queueCountCols count the queue c.id at ?2 (now): in flight and delayed
// are the stories whose head is out (visible_at after ?2); every other
// message is ready, and the oldest ready one is the oldest message that is
// not such a head (the index messages_queue yields them oldest first, so
// its subquery stops early). scanCounts reads them.
const queueCountCols = `(SELECT count(*) FROM stories s WHERE s.queue_id = c.id AND s.visible_at > ?2 AND s.delayed = 0),
	(SELECT count(*) FROM stories s WHERE s.queue_id = c.id AND s.visible_at > ?2 AND s.delayed = 1),
	(SELECT count(*) FROM messages m WHERE m.queue_id = c.id),
	(SELECT count(*) FROM dead_letters d WHERE d.queue_id = c.id),
	(SELECT m.enqueued_at FROM messages m WHERE m.queue_id = c.id
		AND NOT EXISTS (SELECT 1 FROM stories s WHERE s.id = m.story_id AND s.head_seq = m.seq AND s.visible_at > ?2)
		ORDER BY m.enqueued_at LIMIT 1)`

// queueStatsQuery counts the queues whose ids ?1 holds (a JSON array) in
// one statement.
const queueStatsQuery = `SELECT c.id, ` + queueCountCols + `
	FROM connections c WHERE c.id IN (SELECT value FROM json_each(?1))`

// scanCounts reads the columns lead, then queueCountCols, of one row at
// now (milliseconds).
func scanCounts(rows *sql.Rows, n int64, lead ...any) (bus.QueueStats, error) {
	var st bus.QueueStats
	var messages int64
	var oldest sql.NullInt64
	if err := rows.Scan(append(lead, &st.InFlight, &st.Delayed, &messages, &st.DeadLetters, &oldest)...); err != nil {
		return st, err
	}
	st.Ready = max(0, messages-st.InFlight-st.Delayed)
	if oldest.Valid && oldest.Int64 < n {
		st.OldestReadyAgeSeconds = float64(n-oldest.Int64) / 1000 // millisecond precision
	}
	return st, nil
}

// queueStats counts the queues of ids that exist, in one statement.
func queueStats(d *dbq, ids []string, now time.Time) (map[string]bus.QueueStats, error) {
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
	defer rows.Close()
	for rows.Next() {
		var id string
		st, err := scanCounts(rows, n, &id)
		if err != nil {
			return nil, interpretError(err)
		}
		out[id] = st
	}
	return out, interpretError(rows.Err())
}

// QueueStatsMany counts several queues in one statement of one read
// snapshot; ids that are no queue are left out.
func (s *Store) QueueStatsMany(ctx context.Context, queueIDs []string, now time.Time) (map[string]bus.QueueStats, error) {
	var out map[string]bus.QueueStats
	err := s.read(ctx, func(d *dbq) error {
		var err error
		out, err = queueStats(d, queueIDs, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", err)
	}
	return out, nil
}
