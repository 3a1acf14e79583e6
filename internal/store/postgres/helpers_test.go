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
