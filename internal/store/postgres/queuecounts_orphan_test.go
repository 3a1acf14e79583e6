package postgres

import (
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// TestQueueCountsMigrationOrphansWithoutCounters: migration 0012 also
// deletes the messages, stories and dead letters of a removed queue that
// has no counter rows left. The race before the key left such rows: a
// publish (or a receive that dead-lettered) updated an existing counter
// row of the queue and committed while the removal's last statement (the
// deletion of the counter rows) waited for it; the removal then deleted
// the updated row, while its earlier statements had not seen the new
// message. Left there, the retention sweep's deletion of that message (or
// dead letter) would insert a counter row of a connection that does not
// exist and fail the key on every round.
func TestQueueCountsMigrationOrphansWithoutCounters(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openURL(t, url)
	ctx := t.Context()
	_, _, gone := setupQueue(t, s, 1)
	old := time.Now().Add(-time.Hour)
	if _, err := s.pool.Exec(ctx, `ALTER TABLE queue_counts DROP CONSTRAINT queue_counts_queue_id_fkey;
		DELETE FROM schema_migrations WHERE version >= 12`); err != nil {
		t.Fatal(err)
	}
	plantQueueRows(t, s, gone, old)
	// The removal as it ended in that race: the connection and the
	// counter rows gone, the message, story and dead letter left.
	for _, sql := range []string{`DELETE FROM connections WHERE id = $1`, `DELETE FROM queue_counts WHERE queue_id = $1`} {
		if _, err := s.pool.Exec(ctx, sql, gone); err != nil {
			t.Fatal(err)
		}
	}
	if left := queueRows(t, s, gone); len(left) != 3 || left["queue_counts"] != 0 {
		t.Fatalf("setup: rows of the removed queue %v, want a message, a story and a dead letter", left)
	}

	s2 := openURL(t, url)
	if left := queueRows(t, s2, gone); len(left) > 0 {
		t.Errorf("rows of the removed queue after migration 0012: %v", left)
	}
	checkCounters(t, s2)
	if _, err := s2.Maintain(ctx, &bus.MaintainParams{Now: time.Now(), Retention: time.Minute,
		DeadLetterRetention: time.Minute}); err != nil {
		t.Fatalf("retention after migration 0012: %v", err)
	}
}
