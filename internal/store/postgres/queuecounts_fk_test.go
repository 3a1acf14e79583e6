package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// queueRows counts the rows of queue q left in each table that holds rows
// of a queue, by table, leaving out the tables where none are left.
func queueRows(t *testing.T, s *Store, q string) map[string]int {
	t.Helper()
	left := map[string]int{}
	for _, table := range []string{"queue_counts", "stories", "messages", "dead_letters"} {
		var n int
		if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+table+` WHERE queue_id = $1`, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			left[table] = n
		}
	}
	return left
}

// TestPublishRacingConnectionDelete: a publish that routed to a queue
// before its connection's removal committed, and that writes the queue's
// first counter row, leaves nothing of the queue behind. Its commit waits
// for the removal (the foreign key's check of the new counter row, migration
// 0012), fails once the removal commits, and the publish runs again,
// routed without the queue. Before the key, the removal's statements did
// not see the publish's uncommitted rows and the publish did not wait: its
// story and message were left to the retention sweep, and its counter row
// stayed for good. The quick publish falls back to the full publish when
// it fails; the full publish (taken here by a call that repeats a message
// id) is run again by run.
//
// The removal is held open after its last statement until the publish
// waits on a lock (pg_stat_activity of the store's own sessions, by
// application name) or is done (without the key it does not wait).
func TestPublishRacingConnectionDelete(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		msgs []bus.PublishMessage
	}{
		{"Quick", []bus.PublishMessage{testMessage("m1", "s1")}},
		{"Full", []bus.PublishMessage{testMessage("m1", "s1"), testMessage("m1", "s1")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			app := "sombus_fk_" + strings.ToLower(bus.NewID(""))[:12]
			s := openURL(t, pgtest.URL(t)+"&application_name="+app)
			ctx := t.Context()
			ws, prod, q := setupQueue(t, s, 5)
			// The router is cached: the publish reads only the routing
			// version, which the open removal has not changed yet.
			if _, err := router(ctx, s.pool, &s.routes, ws); err != nil {
				t.Fatal(err)
			}

			removal, release := holdRemoval(t, s, q)

			type result struct {
				out []bus.PublishOutcome
				err error
			}
			published := make(chan result, 1)
			go func() {
				out, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
					Messages: c.msgs, Now: time.Now(), DedupWindow: time.Minute})
				published <- result{out, err}
			}()
			waitLockedOrEnded(t, s, app, published, "the publish neither waited for the removal nor ended")
			close(release)
			if err := <-removal; err != nil {
				t.Fatalf("removal: %v", err)
			}
			res := <-published
			if res.err != nil {
				t.Fatalf("publish: %v", res.err)
			}
			for i, o := range res.out {
				if o.Duplicate {
					continue
				}
				if o.Deliveries != 0 {
					t.Errorf("message %d went to %q, want nowhere (its only queue was removed)", i, o.QueueIDs)
				}
			}
			if left := queueRows(t, s, q); len(left) > 0 {
				t.Errorf("rows of the removed queue left: %v", left)
			}
			checkCounters(t, s)
		})
	}
}

// TestConnectionDeleteWaitsForCounterWriter: a transaction that changed a
// queue's counter row (here: published to it) before the removal of its
// connection started has its rows taken along: the removal's cascade waits
// for it on the counter row, and its statements after that see what it
// wrote. The publish is held open after its statement until the removal
// waits on a lock.
func TestConnectionDeleteWaitsForCounterWriter(t *testing.T) {
	t.Parallel()
	app := "sombus_fk_" + strings.ToLower(bus.NewID(""))[:12]
	s := openURL(t, pgtest.URL(t)+"&application_name="+app)
	ctx := t.Context()
	ws, prod, q := setupQueue(t, s, 5)
	// A counter row of every slot this test's publish may use, so that the
	// held publish updates one rather than inserting it.
	if _, err := s.pool.Exec(ctx, `INSERT INTO queue_counts (queue_id, slot, messages, dead_letters)
		SELECT $1, g, 0, 0 FROM generate_series(0, 63) AS g`, q); err != nil {
		t.Fatal(err)
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op once committed
	if _, err := publish(ctx, tx, &waker{}, &s.routes, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
		Messages: []bus.PublishMessage{testMessage("m1", "s1")}, Now: time.Now(), DedupWindow: time.Minute}); err != nil {
		t.Fatal(err)
	}

	removal := make(chan error, 1)
	go func() { removal <- s.Update(ctx, func(tx bus.Tx) error { return tx.ConnectionDelete(q) }) }()
	// A removal done without waiting fails the check below.
	waitLockedOrEnded(t, s, app, removal, "the removal neither waited for the publish nor ended")
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if err := <-removal; err != nil {
		t.Fatalf("removal: %v", err)
	}
	if left := queueRows(t, s, q); len(left) > 0 {
		t.Errorf("rows of the removed queue left: %v", left)
	}
}

// TestQueueCountsForeignKeyMigration: migration 0012 deletes the counter
// rows, messages, stories and dead letters of queues whose connection no
// longer exists (left by a publish that overlapped the removal, before the
// key), keeps the others, and from then on a connection's removal takes
// its counter rows along, and the retention sweep runs.
func TestQueueCountsForeignKeyMigration(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openURL(t, url)
	ctx := t.Context()
	ws, prod, q := setupQueue(t, s, 1)
	_, _, gone := setupQueue(t, s, 1)
	old := time.Now().Add(-time.Hour)
	if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
		Messages: []bus.PublishMessage{testMessage("a1", "a"), testMessage("b1", "b")}, Now: old, DedupWindow: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// Back to version 11, with a queue whose connection went but whose
	// rows stayed: a message, a story, a dead letter and the counter rows
	// their triggers wrote.
	if _, err := s.pool.Exec(ctx, `ALTER TABLE queue_counts DROP CONSTRAINT queue_counts_queue_id_fkey;
		DELETE FROM schema_migrations WHERE version >= 12`); err != nil {
		t.Fatal(err)
	}
	plantQueueRows(t, s, gone, old)
	if _, err := s.pool.Exec(ctx, `DELETE FROM connections WHERE id = $1`, gone); err != nil {
		t.Fatal(err)
	}
	if left := queueRows(t, s, gone); len(left) != 4 {
		t.Fatalf("setup: rows of the removed queue %v, want some in each table", left)
	}
	want := queueRows(t, s, q)

	s2 := openURL(t, url)
	if left := queueRows(t, s2, gone); len(left) > 0 {
		t.Errorf("rows of the removed queue after migration 0012: %v", left)
	}
	if got := queueRows(t, s2, q); len(got) != len(want) || got["queue_counts"] != want["queue_counts"] ||
		got["messages"] != want["messages"] || got["stories"] != want["stories"] {
		t.Errorf("rows of the live queue after migration 0012: %v, want %v", got, want)
	}
	checkCounters(t, s2)
	// The retention sweep deletes the live queue's messages (counted into
	// counter rows that exist).
	if res, err := s2.Maintain(ctx, &bus.MaintainParams{Now: time.Now(), Retention: time.Minute}); err != nil || res.Expired != 2 {
		t.Fatalf("retention after migration 0012: %+v, %v; want 2 expired", res, err)
	}
	if _, err := s2.pool.Exec(ctx, `DELETE FROM connections WHERE id = $1`, q); err != nil {
		t.Fatal(err)
	}
	if left := queueRows(t, s2, q); left["queue_counts"] != 0 {
		t.Errorf("%d counter rows after the removal of their connection, want 0", left["queue_counts"])
	}
}
