package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// queueSampleQuery records one sample of every consumer queue under ?1, as
// of ?2, in one statement, counting as queueStatsQuery does: in flight and
// delayed are the stories whose head is out (visible_at after ?2), every
// other message is ready. Each table is read once, grouped by queue. When
// the interval ?1 holds any sample already, nothing is counted or written.
const queueSampleQuery = `INSERT INTO queue_samples (queue_id, at, ready, in_flight, delayed, dead_letters)
	SELECT c.id, ?1,
		max(0, coalesce(m.n, 0) - coalesce(s.in_flight, 0) - coalesce(s.delayed, 0)),
		coalesce(s.in_flight, 0), coalesce(s.delayed, 0), coalesce(d.n, 0)
	FROM connections c
	LEFT JOIN (SELECT queue_id, count(*) AS n FROM messages GROUP BY queue_id) m ON m.queue_id = c.id
	LEFT JOIN (SELECT queue_id, count(*) FILTER (WHERE delayed = 0) AS in_flight,
			count(*) FILTER (WHERE delayed = 1) AS delayed
		FROM stories WHERE visible_at > ?2 GROUP BY queue_id) s ON s.queue_id = c.id
	LEFT JOIN (SELECT queue_id, count(*) AS n FROM dead_letters GROUP BY queue_id) d ON d.queue_id = c.id
	WHERE c.kind = 'consumer' AND NOT EXISTS (SELECT 1 FROM queue_samples WHERE at = ?1)
	ON CONFLICT (queue_id, at) DO NOTHING`

// QueueSample records one sample of every consumer queue in one statement.
func (s *Store) QueueSample(ctx context.Context, p *bus.QueueSampleParams) (int, error) {
	var n int64
	err := s.w.do(ctx, func(d *dbq) error {
		var err error
		n, err = d.affected(queueSampleQuery, ms(p.At), ms(p.Now))
		return interpretError(err)
	})
	if err != nil {
		return 0, fmt.Errorf("queue sample: %w", err)
	}
	return int(n), nil
}

// QueueSamplePrune deletes the samples recorded before before.
func (s *Store) QueueSamplePrune(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.w.do(ctx, func(d *dbq) error {
		var err error
		n, err = d.affected(`DELETE FROM queue_samples WHERE at < ?`, ms(before))
		return interpretError(err)
	})
	if err != nil {
		return 0, fmt.Errorf("prune queue samples: %w", err)
	}
	return int(n), nil
}

// QueueSamples reads one queue's samples recorded at or after since, oldest
// first.
func (s *Store) QueueSamples(ctx context.Context, queueID string, since time.Time) ([]bus.QueueSample, error) {
	var out []bus.QueueSample
	err := s.read(ctx, func(d *dbq) error {
		out = nil
		rows, err := d.query(`SELECT at, ready, in_flight, delayed, dead_letters FROM queue_samples
			WHERE queue_id = ? AND at >= ? ORDER BY at`, queueID, ms(since))
		if err != nil {
			return interpretError(err)
		}
		defer rows.Close()
		for rows.Next() {
			var q bus.QueueSample
			var at int64
			if err := rows.Scan(&at, &q.Ready, &q.InFlight, &q.Delayed, &q.DeadLetters); err != nil {
				return interpretError(err)
			}
			q.At = fromMS(at)
			out = append(out, q)
		}
		return interpretError(rows.Err())
	})
	if err != nil {
		return nil, fmt.Errorf("queue samples: %w", err)
	}
	return out, nil
}
