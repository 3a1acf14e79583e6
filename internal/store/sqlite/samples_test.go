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
