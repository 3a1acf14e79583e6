package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// TestSamplePrunesRemovedQueue: a sample taken while its queue's
// connection is being removed, which outlives the removal, is deleted by
// the next prune past it, although it is its queue's latest sample (which
// the prune keeps for a queue that exists). The removal is held open after
// its last statement while the sample is taken, unless the sample waits on
// a lock (pg_stat_activity of the store's own sessions, by application
// name); the sample does not wait, and sees the connection.
func TestSamplePrunesRemovedQueue(t *testing.T) {
	t.Parallel()
	app := "sombus_sample_" + strings.ToLower(bus.NewID(""))[:12]
	s := openURL(t, pgtest.URL(t)+"&application_name="+app)
	ctx := t.Context()
	_, _, q := setupQueue(t, s, 5)

	removal, release := holdRemoval(t, s, q)
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	sampled := make(chan error, 1)
	go func() {
		_, err := s.QueueSample(ctx, &bus.QueueSampleParams{Now: at, At: at})
		sampled <- err
	}()
	waitLockedOrEnded(t, s, app, sampled, "the sample neither waited for the removal nor ended")
	close(release)
	if err := <-removal; err != nil {
		t.Fatalf("removal: %v", err)
	}
	if sampleErr := <-sampled; sampleErr != nil {
		t.Fatalf("sample: %v", sampleErr)
	}

	if _, err := s.QueueSamplePrune(ctx, at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM queue_samples WHERE queue_id = $1`, q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d samples of the removed queue after the prune, want 0", n)
	}
}
