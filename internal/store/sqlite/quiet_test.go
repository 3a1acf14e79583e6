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
	s := reopenMigrated(t, old, path)
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

// TestIdleReceiveSkipsWriter: a receive from a queue none of whose heads is
// visible is answered without a writer transaction, with the time the next
// one becomes visible, and sees each commit that makes a head visible:
// a publish, the visibility running out, a release.
func TestIdleReceiveSkipsWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	ws, prod, q := setupQueue(t, s, 5)
	recv := func(at time.Time) *bus.ReceiveResult {
		t.Helper()
		r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Minute, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	idle := func(at time.Time, next time.Time) {
		t.Helper()
		c0 := s.w.commits.Load()
		for range 20 {
			r := recv(at)
			if len(r.Deliveries) != 0 || r.Deliveries == nil || !r.NextVisibleAt.Equal(next) {
				t.Fatalf("receive at %s = %+v, want no delivery and next visible at %v", at.Sub(t0), r, next)
			}
		}
		if c := s.w.commits.Load() - c0; c != 0 {
			t.Fatalf("20 receives from an idle queue committed %d writer transactions, want none", c)
		}
	}
	if r := recv(t0); len(r.Deliveries) != 0 { // loads the queue
		t.Fatalf("first receive: %+v", r)
	}
	idle(t0, time.Time{})
	if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Now: t0,
		Messages: []bus.PublishMessage{msg("m1", "s1")}}); err != nil {
		t.Fatal(err)
	}
	r := recv(t0.Add(time.Second))
	if len(r.Deliveries) != 1 || r.Deliveries[0].MessageID != "m1" {
		t.Fatalf("receive after a publish: %+v", r)
	}
	// In flight until t0+61s.
	idle(t0.Add(30*time.Second), t0.Add(61*time.Second))
	r = recv(t0.Add(61 * time.Second))
	if len(r.Deliveries) != 1 || r.Deliveries[0].ReceiveCount != 2 {
		t.Fatalf("receive once the visibility ran out: %+v", r)
	}
	// Released with a delay of 10 s at t0+62s, then visible at t0+72s.
	if _, err := s.MessageNack(ctx, &bus.SettleParams{QueueID: q, Handles: []bus.Handle{r.Deliveries[0].Handle},
		Now: t0.Add(62 * time.Second), Delay: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	idle(t0.Add(63*time.Second), t0.Add(72*time.Second))
	r = recv(t0.Add(72 * time.Second))
	if len(r.Deliveries) != 1 || r.Deliveries[0].ReceiveCount != 3 {
		t.Fatalf("receive after the delay: %+v", r)
	}
	if _, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: []bus.Handle{r.Deliveries[0].Handle}, Now: t0.Add(73 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	idle(t0.Add(74*time.Second), time.Time{})
}

// TestLastSamplesForgetRemovedQueues: the in-memory latest samples forget
// a removed connection's queue at the next round, and a queue whose entry
// is gone compares with its latest sample in the table.
func TestLastSamplesForgetRemovedQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	_, _, q1 := setupQueue(t, s, 5)
	_, _, q2 := setupQueue(t, s, 5)
	sample := func(at time.Time, want int) {
		t.Helper()
		if n, err := s.QueueSample(ctx, &bus.QueueSampleParams{Now: at, At: at}); err != nil || n != want {
			t.Fatalf("QueueSample at %s = %d, %v; want %d", at.Sub(t0), n, err, want)
		}
	}
	entries := func() int {
		s.samples.mu.Lock()
		defer s.samples.mu.Unlock()
		return len(s.samples.m)
	}
	sample(t0, 2)
	if n := entries(); n != 2 {
		t.Fatalf("%d latest samples kept, want 2", n)
	}
	if err := s.Update(ctx, func(tx bus.Tx) error { return tx.ConnectionDelete(q2) }); err != nil {
		t.Fatal(err)
	}
	sample(t0.Add(10*time.Second), 0)
	if n := entries(); n != 1 {
		t.Fatalf("%d latest samples kept after a connection's removal, want 1", n)
	}
	// Without its entry, q1 still compares with its sample in the table.
	s.samples.mu.Lock()
	clear(s.samples.m)
	s.samples.mu.Unlock()
	sample(t0.Add(20*time.Second), 0)
	if got, err := s.QueueSamples(ctx, q1, t0); err != nil || len(got) != 3 {
		t.Fatalf("QueueSamples(q1) = %+v, %v; want the 3 rounds", got, err)
	}
}
