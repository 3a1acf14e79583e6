package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
)

// queueSampleQuery records a sample under $1 of every consumer queue whose
// counts as of $2 (counted as queueStatsQuery does: the counter rows of
// each queue and its heads out, not its messages) differ from its latest
// sample, in one statement (the round $1 is recorded before it, in the
// same transaction). Nodes that sample the same interval at the same moment
// write it once: the second waits on the round's key and finds it taken.
const queueSampleQuery = `INSERT INTO queue_samples (queue_id, at, ready, in_flight, delayed, dead_letters)
	SELECT n.id, $1, n.ready, n.in_flight, n.delayed, n.dead_letters
	FROM (SELECT c.id, greatest(0, qk.messages - qs.in_flight - qs.delayed) AS ready, qs.in_flight, qs.delayed, qk.dead_letters
		FROM connections c` + queueTotalsFrom + `
		WHERE c.kind = 'consumer') n
	LEFT JOIN LATERAL (SELECT l.ready, l.in_flight, l.delayed, l.dead_letters FROM queue_samples l
		WHERE l.queue_id = n.id ORDER BY l.at DESC LIMIT 1) p ON true
	WHERE (p.ready, p.in_flight, p.delayed, p.dead_letters) IS DISTINCT FROM (n.ready, n.in_flight, n.delayed, n.dead_letters)
	ON CONFLICT (queue_id, at) DO NOTHING`

// QueueSample records the round p.At and a sample of every consumer queue
// whose counts changed, in one transaction; nothing when the round is
// recorded already.
func (s *Store) QueueSample(ctx context.Context, p *bus.QueueSampleParams) (int, error) {
	var n int
	err := s.run(ctx, false, func(tx pgx.Tx) error {
		n = 0
		tag, err := tx.Exec(ctx, `INSERT INTO sample_rounds (at) VALUES ($1) ON CONFLICT (at) DO NOTHING`, ms(p.At))
		if err != nil || tag.RowsAffected() == 0 {
			return err // or sampled already
		}
		if err := probePlan(ctx, tx); err != nil {
			return err
		}
		tag, err = tx.Exec(ctx, queueSampleQuery, ms(p.At), ms(p.Now))
		n = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("queue sample: %w", err)
	}
	return n, nil
}

// QueueSamplePrune deletes the rounds recorded before before, and each
// queue's samples recorded before it except the latest at or before it
// (which the rounds after before still carry forward); of a queue whose
// connection no longer exists, every sample recorded before it. Those are
// left by a sample taken while the queue's connection was being removed:
// the sample's statement saw the connection (the removal had not
// committed), and the removal's deletion of the queue's samples did not
// see the sample (it had not committed either). Kept as the queue's
// latest, such a sample would never go.
func (s *Store) QueueSamplePrune(ctx context.Context, before time.Time) (int, error) {
	var n int
	err := s.run(ctx, false, func(tx pgx.Tx) error {
		// Through queue_samples_at, whatever the plan.
		if err := probePlan(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM sample_rounds WHERE at < $1`, ms(before)); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM queue_samples q WHERE q.at < $1 AND (EXISTS (SELECT 1 FROM queue_samples l
				WHERE l.queue_id = q.queue_id AND l.at > q.at AND l.at <= $1)
			OR NOT EXISTS (SELECT 1 FROM connections c WHERE c.id = q.queue_id))`, ms(before))
		n = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune queue samples: %w", err)
	}
	return n, nil
}

// QueueSamples reads one queue's counts at each round recorded at or after
// since, oldest first: its samples from the latest one at or before since,
// carried forward over the rounds (bus.FillSamples).
func (s *Store) QueueSamples(ctx context.Context, queueID string, since time.Time) ([]bus.QueueSample, error) {
	var out []bus.QueueSample
	err := s.run(ctx, true, func(tx pgx.Tx) error {
		// The queue's part of queue_samples, whatever the plan.
		if err := probePlan(ctx, tx); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT at FROM sample_rounds WHERE at >= $1 ORDER BY at`, ms(since))
		if err != nil {
			return err
		}
		rounds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (time.Time, error) {
			var at int64
			err := r.Scan(&at)
			return fromMS(at), err
		})
		if err != nil || len(rounds) == 0 {
			out = nil
			return err
		}
		rows, err = tx.Query(ctx, `SELECT at, ready, in_flight, delayed, dead_letters FROM queue_samples
			WHERE queue_id = $1 AND at >= coalesce((SELECT max(at) FROM queue_samples WHERE queue_id = $1 AND at <= $2), $2)
			ORDER BY at`, queueID, ms(since))
		if err != nil {
			return err
		}
		samples, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.QueueSample, error) {
			var q bus.QueueSample
			var at int64
			err := r.Scan(&at, &q.Ready, &q.InFlight, &q.Delayed, &q.DeadLetters)
			q.At = fromMS(at)
			return q, err
		})
		out = bus.FillSamples(rounds, samples)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("queue samples: %w", err)
	}
	return out, nil
}
