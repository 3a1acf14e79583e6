package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// sampleChunk is how many queues one writer transaction of QueueSample
// samples: a node with many queues would otherwise hold the writer, and
// every publish and receive behind it, for the whole sample (10,000 queues
// took tens of milliseconds every 10 s).
const sampleChunk = 500

// sampleCounts are the counts a sample holds.
type sampleCounts struct{ ready, inFlight, delayed, deadLetters int64 }

// lastSamples remembers each queue's latest sample as committed, so that
// QueueSample compares a queue's counts without reading its samples each
// interval. Only this process writes the file (lockfile.go); an entry is
// set only after the transaction that wrote the sample committed, and a
// queue without an entry reads its latest sample from the table. Each
// entry carries the pass that last looked at it: a pass that went over
// every queue forgets the queues it did not meet (removed connections).
type lastSamples struct {
	mu   sync.Mutex
	m    map[string]lastSample
	pass uint64
}

type lastSample struct {
	c    sampleCounts
	pass uint64
}

// begin starts a pass and returns its number.
func (l *lastSamples) begin() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pass++
	return l.pass
}

func (l *lastSamples) get(id string, pass uint64) (sampleCounts, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[id]
	if ok {
		e.pass = pass
		l.m[id] = e
	}
	return e.c, ok
}

func (l *lastSamples) set(written map[string]sampleCounts, pass uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[string]lastSample)
	}
	for id, c := range written {
		l.m[id] = lastSample{c: c, pass: pass}
	}
}

// forgetUnseen drops the entries pass did not look at, once it looked at
// every consumer queue.
func (l *lastSamples) forgetUnseen(pass uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, e := range l.m {
		if e.pass != pass {
			delete(l.m, id)
		}
	}
}

// QueueSample records the round p.At and a sample of every consumer queue
// whose counts as of p.Now (counted as QueueStats does: in flight and
// delayed from the writer's index of the queues it holds) differ from its
// latest sample, in transactions of the writer of sampleChunk queues each,
// in the order of their ids. When the round p.At is recorded already as
// the first one starts, nothing is counted or written. A node stopped
// between two of them leaves the rest of that round carried forward from
// the queues' earlier samples (the samples are only a chart).
func (s *Store) QueueSample(ctx context.Context, p *bus.QueueSampleParams) (int, error) {
	var total int
	after := ""
	written := make(map[string]sampleCounts)
	pass := s.samples.begin()
	taken := false // the round was free: this call samples every queue
	for first := true; ; first = false {
		var last string
		var more bool
		clear(written)
		err := s.w.do(ctx, func(d *dbq) error {
			last, more = "", false
			clear(written)
			at, now := ms(p.At), ms(p.Now)
			if first {
				k, err := d.affected(`INSERT INTO sample_rounds (at) VALUES (?) ON CONFLICT (at) DO NOTHING`, at)
				if err != nil {
					return interpretError(err)
				}
				if k == 0 {
					return nil // sampled already
				}
				taken = true
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
			if len(cs) == 0 {
				return nil
			}
			for i := range cs {
				c := &cs[i]
				if err := c.finish(d, nil, now); err != nil {
					return err
				}
				now := sampleCounts{c.st.Ready, c.st.InFlight, c.st.Delayed, c.st.DeadLetters}
				prev, ok := s.samples.get(c.id, pass)
				if !ok {
					err := d.row(`SELECT ready, in_flight, delayed, dead_letters FROM queue_samples
						WHERE queue_id = ? ORDER BY at DESC LIMIT 1`, c.id).Scan(&prev.ready, &prev.inFlight, &prev.delayed, &prev.deadLetters)
					if err != nil && !errors.Is(err, sql.ErrNoRows) {
						return interpretError(err)
					}
					ok = err == nil
				}
				if ok && prev == now {
					continue
				}
				if _, err := d.exec(`INSERT INTO queue_samples (queue_id, at, ready, in_flight, delayed, dead_letters)
					VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (queue_id, at) DO UPDATE SET ready = excluded.ready,
					in_flight = excluded.in_flight, delayed = excluded.delayed, dead_letters = excluded.dead_letters`,
					c.id, at, now.ready, now.inFlight, now.delayed, now.deadLetters); err != nil {
					return interpretError(err)
				}
				written[c.id] = now
			}
			if len(cs) == sampleChunk {
				last, more = cs[len(cs)-1].id, true
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("queue sample: %w", err)
		}
		s.samples.set(written, pass)
		total += len(written)
		if !more {
			if taken {
				s.samples.forgetUnseen(pass)
			}
			return total, nil
		}
		after = last
	}
}

// QueueSamplePrune deletes the rounds recorded before before, and each
// queue's samples recorded before it except the latest at or before it
// (which the rounds after before still carry forward).
func (s *Store) QueueSamplePrune(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.w.do(ctx, func(d *dbq) error {
		b := ms(before)
		if _, err := d.exec(`DELETE FROM sample_rounds WHERE at < ?`, b); err != nil {
			return interpretError(err)
		}
		var err error
		n, err = d.affected(`DELETE FROM queue_samples WHERE at < ? AND EXISTS (SELECT 1 FROM queue_samples l
			WHERE l.queue_id = queue_samples.queue_id AND l.at > queue_samples.at AND l.at <= ?)`, b, b)
		return interpretError(err)
	})
	if err != nil {
		return 0, fmt.Errorf("prune queue samples: %w", err)
	}
	return int(n), nil
}

// QueueSamples reads one queue's counts at each round recorded at or after
// since, oldest first: its samples from the latest one at or before since,
// carried forward over the rounds (bus.FillSamples).
func (s *Store) QueueSamples(ctx context.Context, queueID string, since time.Time) ([]bus.QueueSample, error) {
	var out []bus.QueueSample
	err := s.read(ctx, func(d *dbq) error {
		out = nil
		from := ms(since)
		rows, err := d.query(`SELECT at FROM sample_rounds WHERE at >= ? ORDER BY at`, from)
		if err != nil {
			return interpretError(err)
		}
		var rounds []time.Time
		for rows.Next() {
			var at int64
			if err := rows.Scan(&at); err != nil {
				_ = rows.Close()
				return interpretError(err)
			}
			rounds = append(rounds, fromMS(at))
		}
		_ = rows.Close()
		if err := rows.Err(); err != nil {
			return interpretError(err)
		}
		if len(rounds) == 0 {
			return nil
		}
		rows, err = d.query(`SELECT at, ready, in_flight, delayed, dead_letters FROM queue_samples
			WHERE queue_id = ? AND at >= coalesce((SELECT max(at) FROM queue_samples WHERE queue_id = ? AND at <= ?), ?)
			ORDER BY at`, queueID, queueID, from, from)
		if err != nil {
			return interpretError(err)
		}
		defer rows.Close()
		var samples []bus.QueueSample
		for rows.Next() {
			var q bus.QueueSample
			var at int64
			if err := rows.Scan(&at, &q.Ready, &q.InFlight, &q.Delayed, &q.DeadLetters); err != nil {
				return interpretError(err)
			}
			q.At = fromMS(at)
			samples = append(samples, q)
		}
		if err := rows.Err(); err != nil {
			return interpretError(err)
		}
		out = bus.FillSamples(rounds, samples)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue samples: %w", err)
	}
	return out, nil
}
