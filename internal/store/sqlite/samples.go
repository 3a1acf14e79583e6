package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// sampleChunk is how many queues one writer transaction of QueueSample
// samples: a node with many queues would otherwise hold the writer, and
// every publish and receive behind it, for the whole sample (10,000 queues
// took tens of milliseconds every 10 s).
const sampleChunk = 500

// QueueSample records one sample of every consumer queue under p.At, as
// of p.Now, counting as QueueStats does (in flight and delayed from the
// writer's index of the queues it holds), in transactions of the writer of
// sampleChunk queues each, in the order of their ids. When the interval
// p.At holds any sample already as the first one starts, nothing is
// counted or written. A node stopped between two of them leaves the rest
// of that interval unsampled (the samples are only a chart).
func (s *Store) QueueSample(ctx context.Context, p *bus.QueueSampleParams) (int, error) {
	var total int64
	after := ""
	for first := true; ; first = false {
		var n int64
		var last string
		var more bool
		err := s.w.do(ctx, func(d *dbq) error {
			n, last, more = 0, "", false
			at, now := ms(p.At), ms(p.Now)
			if first {
				var one int
				err := d.row(`SELECT 1 FROM queue_samples WHERE at = ? LIMIT 1`, at).Scan(&one)
				if err == nil {
					return nil
				}
				if !errors.Is(err, sql.ErrNoRows) {
					return interpretError(err)
				}
			}
			rows, err := d.query(`SELECT c.id, coalesce(k.messages, 0), coalesce(k.dead_letters, 0)
				FROM connections c LEFT JOIN queue_counts k ON k.queue_id = c.id
				WHERE c.kind = ? AND c.id > ? ORDER BY c.id LIMIT ?`, string(bus.KindConsumer), after, sampleChunk)
			if err != nil {
				return interpretError(err)
			}
			cs := make([]counted, 0, sampleChunk)
			for rows.Next() {
				var c counted
				if err := rows.Scan(&c.id, &c.messages, &c.st.DeadLetters); err != nil {
					_ = rows.Close()
					return interpretError(err)
				}
				cs = append(cs, c)
			}
			_ = rows.Close()
			if err := rows.Err(); err != nil {
				return interpretError(err)
			}
			for i := range cs {
				c := &cs[i]
				if err := c.finish(d, nil, now); err != nil {
					return err
				}
				k, err := d.affected(`INSERT INTO queue_samples (queue_id, at, ready, in_flight, delayed, dead_letters)
					VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (queue_id, at) DO NOTHING`,
					c.id, at, c.st.Ready, c.st.InFlight, c.st.Delayed, c.st.DeadLetters)
				if err != nil {
					return interpretError(err)
				}
				n += k
			}
			if len(cs) == sampleChunk {
				last, more = cs[len(cs)-1].id, true
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("queue sample: %w", err)
		}
		total += n
		if !more {
			return int(total), nil
		}
		after = last
	}
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
