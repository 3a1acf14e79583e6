package postgres

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/store/postgres/pgtest"
	"github.com/sombus/sombus/internal/store/storetest"
)

// testLogger returns a logger that writes to t.Log until the test ends.
func testLogger(t testing.TB) *slog.Logger { return storetest.Logger(t) }

// OpenTest opens a store on a fresh schema (see pgtest.URL), logging to t,
// and closes it when the test ends. The package's external tests reach it
// as postgres.OpenTest.
func OpenTest(t testing.TB) *Store {
	t.Helper()
	u := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, u, storetest.Logger(t))
	if err != nil {
		t.Fatalf("postgres: open test store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() }) // runs before the schema drop
	return s
}

// waitLockedOrEnded polls until a session whose application_name is app
// waits for a lock (false) or the buffered channel ended holds a value
// (true; the value stays there for the caller). After 10 s it fails the
// test with stuck.
func waitLockedOrEnded[T any](t *testing.T, s *Store, app string, ended chan T, stuck string) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if len(ended) > 0 {
			return true
		}
		var waiting int
		if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return false
		}
		if time.Now().After(deadline) {
			t.Fatal(stuck)
		}
	}
}
