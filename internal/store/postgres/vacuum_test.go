package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
	"github.com/sombus/sombus/internal/store/storetest"
)

// makeDead runs the statements on one connection of s, then has that
// session's counts reach the statistics at once (PostgreSQL 15 and later;
// before that, within ten seconds of its going idle).
func makeDead(ctx context.Context, t *testing.T, s *Store, stmts ...string) {
	t.Helper()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version >= 150000 {
		stmts = append(stmts, `SELECT pg_stat_force_next_flush()`)
	}
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// vacuumCounts returns vacuum_count (the vacuums other than autovacuum's)
// of the tables.
func vacuumCounts(ctx context.Context, t *testing.T, s *Store, tables ...string) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	var name string
	var n int64
	rows, _ := s.pool.Query(ctx, `SELECT t, coalesce(pg_stat_get_vacuum_count(to_regclass(t)), 0) FROM unnest($1::text[]) AS t`, tables)
	if _, err := pgx.ForEachRow(rows, []any{&name, &n}, func() error { got[name] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestMaintainVacuums: maintenance rounds vacuum, in the background, the
// busy tables whose dead rows passed autovacuum's threshold, taken from
// the table's storage parameters when set there, and leave alone one whose
// autovacuum_enabled is off and one with no dead rows.
func TestMaintainVacuums(t *testing.T) {
	s := OpenTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The messages' counter rows refer to a connection (migration 0012).
	_, _, q := setupQueue(t, s, 5)

	makeDead(ctx, t, s,
		// dedup_records: 2,000 dead rows and no live one, due whatever
		// the threshold.
		`INSERT INTO dedup_records (producer_id, message_id, accepted_at, deliveries)
			SELECT 'p', 'm' || i, 0, 1 FROM generate_series(1, 2000) AS i`,
		`DELETE FROM dedup_records`,
		// messages: 160 dead rows beside 9,840 live ones, due at its own
		// scale factor (0.01, set by the migrations: 50 + 98.4) but not at
		// the server's default (0.2: 50 + 1,968).
		`INSERT INTO messages (story_id, seq, queue_id, message_id, message_type, topic,
				correlation_id, producer_id, enqueued_at, envelope)
			SELECT i, 1, '`+q+`', 'm' || i, 't', 'x', 'c', 'p', 0, '\x00' FROM generate_series(1, 10000) AS i`,
		`DELETE FROM messages WHERE story_id <= 160`,
		// ack_records: 2,000 dead rows, but an operator took it out.
		`ALTER TABLE ack_records SET (autovacuum_enabled = false)`,
		`INSERT INTO ack_records (queue_id, story_id, seq, nonce, acked_at)
			SELECT 'q', i, 1, 1, 0 FROM generate_series(1, 2000) AS i`,
		`DELETE FROM ack_records`,
		// attempts: none.
	)
	tables := []string{"dedup_records", "messages", "ack_records", "attempts"}
	before := vacuumCounts(ctx, t, s, tables...)

	rows, err := s.pool.Query(ctx, vacuumDueSQL, vacuumTables)
	if err != nil {
		t.Fatal(err)
	}
	due, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"messages", "dedup_records"}; !slices.Equal(due, want) {
		t.Fatalf("tables due for a vacuum: %q, want %q", due, want)
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := s.Maintain(ctx, &bus.MaintainParams{Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		got := vacuumCounts(ctx, t, s, tables...)
		if got["dedup_records"] > before["dedup_records"] && got["messages"] > before["messages"] {
			if got["ack_records"] != before["ack_records"] || got["attempts"] != before["attempts"] {
				t.Fatalf("vacuum counts went from %v to %v: ack_records and attempts should not have been vacuumed", before, got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dedup_records and messages were not both vacuumed within 30 s of maintenance rounds (vacuum counts %v, before %v)", got, before)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestVacuumEndsWithClose: Close cancels a vacuum under way (here a
// statement that would take a minute) and returns, and the server's
// session stops running it.
func TestVacuumEndsWithClose(t *testing.T) {
	u := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, u, storetest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	const slow = `SELECT pg_sleep(60) /* TestVacuumEndsWithClose */`
	s.vac.sql = func(string) string { return slow }
	makeDead(ctx, t, s,
		`INSERT INTO dedup_records (producer_id, message_id, accepted_at, deliveries)
			SELECT 'p', 'm' || i, 0, 1 FROM generate_series(1, 2000) AS i`,
		`DELETE FROM dedup_records`)

	watch, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	running := func() bool {
		var n int
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = $1`, slow).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	deadline := time.Now().Add(30 * time.Second)
	for !running() {
		if time.Now().After(deadline) {
			t.Fatal("no vacuum started within 30 s of maintenance rounds")
		}
		if _, err := s.Maintain(ctx, &bus.MaintainParams{Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	closed := make(chan struct{})
	go func() {
		_ = s.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10 s with a vacuum under way")
	}
	for deadline = time.Now().Add(10 * time.Second); running(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the vacuum's statement still runs 10 s after Close returned")
		}
	}
	// Once closed, no vacuum starts.
	s.startVacuum()
	s.vacMu.Lock()
	checking := s.vac.checking
	s.vacMu.Unlock()
	if checking {
		t.Fatal("startVacuum after Close started a read of the tables due")
	}
}

// TestVacuumWarn: a table's failing vacuum is logged once a
// vacuumWarnEvery, each table (and the read of the tables due) apart.
func TestVacuumWarn(t *testing.T) {
	s := &Store{vac: newVacuums()}
	if !s.vacuumWarn("stories") || !s.vacuumWarn("") {
		t.Fatal("the first failures were not to be logged")
	}
	if s.vacuumWarn("stories") || s.vacuumWarn("") {
		t.Fatal("a second failure within vacuumWarnEvery was to be logged")
	}
	if !s.vacuumWarn("messages") {
		t.Fatal("another table's first failure was not to be logged")
	}
	s.vac.warned["stories"] = time.Now().Add(-vacuumWarnEvery)
	if !s.vacuumWarn("stories") {
		t.Fatal("a failure a vacuumWarnEvery after the last logged one was not to be logged")
	}
}
