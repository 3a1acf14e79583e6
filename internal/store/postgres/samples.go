package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
)

// queueSampleQuery records one sample of every consumer queue under $1, as
// of $2, in one statement, counting as queueStatsQuery does (the counter
// rows of each queue and its heads out, not its messages). When the
// interval $1 holds a sample already (another node took it), nothing is
// counted; nodes that sample it at the same moment write it once, by the
// primary key.
const queueSampleQuery = `INSERT INTO queue_samples (queue_id, at, ready, in_flight, delayed, dead_letters)
	SELECT c.id, $1, greatest(0, qk.messages - qs.in_flight - qs.delayed), qs.in_flight, qs.delayed, qk.dead_letters
	FROM connections c` + queueTotalsFrom + `
	WHERE c.kind = 'consumer' AND NOT EXISTS (SELECT 1 FROM queue_samples WHERE at = $1)
	ON CONFLICT (queue_id, at) DO NOTHING`

// QueueSample records one sample of every consumer queue in one statement.
func (s *Store) QueueSample(ctx context.Context, p *bus.QueueSampleParams) (int, error) {
	var n int
	err := s.run(ctx, false, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, queueSampleQuery, ms(p.At), ms(p.Now))
		n = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("queue sample: %w", err)
	}
	return n, nil
}

// QueueSamplePrune deletes the samples recorded before before.
func (s *Store) QueueSamplePrune(ctx context.Context, before time.Time) (int, error) {
	var n int
	err := s.run(ctx, false, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM queue_samples WHERE at < $1`, ms(before))
		n = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune queue samples: %w", err)
	}
	return n, nil
}

// QueueSamples reads one queue's samples recorded at or after since, oldest
// first.
func (s *Store) QueueSamples(ctx context.Context, queueID string, since time.Time) ([]bus.QueueSample, error) {
	var out []bus.QueueSample
	err := s.run(ctx, true, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT at, ready, in_flight, delayed, dead_letters FROM queue_samples
			WHERE queue_id = $1 AND at >= $2 ORDER BY at`, queueID, ms(since))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.QueueSample, error) {
			var q bus.QueueSample
			var at int64
			err := r.Scan(&at, &q.Ready, &q.InFlight, &q.Delayed, &q.DeadLetters)
			q.At = fromMS(at)
			return q, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("queue samples: %w", err)
	}
	return out, nil
}
