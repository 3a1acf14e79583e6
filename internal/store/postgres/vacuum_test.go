package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
)

// TestMaintainVacuums: a maintenance round vacuums, in the background, the
// busy tables whose dead rows passed autovacuum's threshold, and leaves
// alone one whose autovacuum_enabled is off and one with no dead rows,
// whether or not the server's autovacuum is on.
func TestMaintainVacuums(t *testing.T) {
	s := OpenTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 2,000 dead rows each in dedup_records (due: its threshold is 50 plus
	// 2 % of no live rows) and ack_records, which an operator took out of
	// vacuuming. attempts gets none.
	for _, q := range []string{
		`ALTER TABLE ack_records SET (autovacuum_enabled = false)`,
		`INSERT INTO dedup_records (producer_id, message_id, accepted_at, deliveries)
			SELECT 'p', 'm' || i, 0, 1 FROM generate_series(1, 2000) AS i`,
		`DELETE FROM dedup_records`,
		`INSERT INTO ack_records (queue_id, story_id, seq, nonce, acked_at)
			SELECT 'q', i, 1, 1, 0 FROM generate_series(1, 2000) AS i`,
		`DELETE FROM ack_records`,
		// The session's counts reach the statistics at its next idle
		// moment, not up to ten seconds later.
		`SELECT pg_stat_force_next_flush()`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Release()

	vacuums := func() map[string]int64 {
		t.Helper()
		rows, err := s.pool.Query(ctx, `SELECT relname::text, vacuum_count FROM pg_stat_user_tables
			WHERE relid IN (to_regclass('dedup_records'), to_regclass('ack_records'), to_regclass('attempts'))`)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for rows.Next() {
			var name string
			var n int64
			if err := rows.Scan(&name, &n); err != nil {
				t.Fatal(err)
			}
			got[name] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	before := vacuums()

	// Which tables are due, as the node reads it.
	rows, err := s.pool.Query(ctx, vacuumDueSQL, vacuumTables)
	if err != nil {
		t.Fatal(err)
	}
	due, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(due, "dedup_records") || slices.Contains(due, "ack_records") || slices.Contains(due, "attempts") {
		t.Fatalf("tables due for a vacuum: %q, want dedup_records and neither ack_records nor attempts", due)
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := s.Maintain(ctx, &bus.MaintainParams{Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		got := vacuums()
		if got["dedup_records"] > before["dedup_records"] {
			if got["ack_records"] != before["ack_records"] || got["attempts"] != before["attempts"] {
				t.Fatalf("vacuum counts went from %v to %v: only dedup_records should have been vacuumed", before, got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dedup_records was not vacuumed within 30 s of maintenance rounds (vacuum counts %v, before %v)", got, before)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestVacuumAndClose: Close returns with a vacuum just started, and no
// vacuum starts once Close has begun.
func TestVacuumAndClose(t *testing.T) {
	s := OpenTest(t)
	s.startVacuum()
	done := make(chan struct{})
	go func() {
		_ = s.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return within 30 s of a vacuum's start")
	}
	if s.vacuuming.Load() {
		t.Fatal("a vacuum is still marked under way after Close")
	}
	// After Close, no vacuum starts.
	s.startVacuum()
	if s.vacuuming.Load() {
		t.Fatal("startVacuum after Close marked a vacuum under way")
	}
}
