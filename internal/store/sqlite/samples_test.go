package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// TestMigrationSampleRounds opens a database of schema 8 holding samples
// written the old way (a row per queue every interval, unchanged or not),
// migrates it (0009 records the intervals sampled so far as rounds), and
// checks that the history reads the same, and that the next interval of
// the idle queue writes no sample but still reads.
func TestMigrationSampleRounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := openUpTo(ctx, path, testLogger(t), defaultWAL, 8)
	if err != nil {
		t.Fatal(err)
	}
	_, _, q := setupQueue(t, old, 5)
	// Three intervals, the queue empty in each.
	if err := old.w.do(ctx, func(d *dbq) error {
		for i := range 3 {
			if _, err := d.exec(`INSERT INTO queue_samples (queue_id, at, ready, in_flight, delayed, dead_letters)
				VALUES (?, ?, 0, 0, 0, 0)`, q, ms(t0.Add(time.Duration(i)*10*time.Second))); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	next := t0.Add(30 * time.Second)
	if n, err := s.QueueSample(ctx, &bus.QueueSampleParams{Now: next, At: next}); err != nil || n != 0 {
		t.Fatalf("QueueSample of the idle queue after the migration = %d, %v; want 0, nil", n, err)
	}
	got, err := s.QueueSamples(ctx, q, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("QueueSamples after the migration: %+v, want the 3 old intervals and the new one", got)
	}
	for i, g := range got {
		if want := t0.Add(time.Duration(i) * 10 * time.Second); !g.At.Equal(want) || g.Ready != 0 {
			t.Fatalf("sample %d = %+v, want an empty one at %s", i, g, want)
		}
	}
}

// TestSweepAfterEveryQueueLoaded: once the dead-letter sweep loaded every
// consumer queue it reads only the loaded queues with received heads; a
// queue created after that, and a queue whose attempt limit is lowered
// after it, still have their exhausted heads moved.
func TestSweepAfterEveryQueueLoaded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	maintain := func(at time.Time, want int) {
		t.Helper()
		res, err := s.Maintain(ctx, &bus.MaintainParams{Now: at})
		if err != nil {
			t.Fatal(err)
		}
		if res.DeadLettered != want {
			t.Fatalf("Maintain at %s dead-lettered %d, want %d", at.Sub(t0), res.DeadLettered, want)
		}
	}
	_, prod0, q0 := setupQueue(t, s, 3)
	maintain(t0, 0) // every queue loaded: the sweep is now by received heads
	ws, prod, q := setupQueue(t, s, 1)
	if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Now: t0,
		Messages: []bus.PublishMessage{msg("m1", "s1")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 1, Visibility: time.Minute, Now: t0}); err != nil {
		t.Fatal(err)
	}
	maintain(t0.Add(30*time.Second), 0) // still in flight
	maintain(t0.Add(2*time.Minute), 1)  // the new queue's head, received as often as allowed

	// q0 (limit 3): a head received once, then the limit lowered to 1.
	ws0 := ""
	if err := s.Update(ctx, func(tx bus.Tx) error {
		c, err := tx.ConnectionGet(q0)
		ws0 = c.WorkspaceID
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws0, ProducerID: prod0, Now: t0,
		Messages: []bus.PublishMessage{msg("m2", "s2")}}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q0, Max: 1, Visibility: time.Minute, Now: t0.Add(3 * time.Minute)}); err != nil || len(r.Deliveries) != 1 {
		t.Fatalf("receive from q0: %v, %v", r, err)
	}
	maintain(t0.Add(5*time.Minute), 0) // received once of 3
	if err := s.Update(ctx, func(tx bus.Tx) error {
		c, err := tx.ConnectionGet(q0)
		if err != nil {
			return err
		}
		c.AttemptLimit = 1
		return tx.ConnectionUpdate(c)
	}); err != nil {
		t.Fatal(err)
	}
	maintain(t0.Add(6*time.Minute), 1)
}
