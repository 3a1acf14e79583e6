package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// This file is not a _test file so that other packages' tests (storetest,
// the server's end-to-end tests) can open a PostgreSQL store of their own.

// TestURLEnv names the environment variable with the PostgreSQL URL that
// tests use.
const TestURLEnv = "SOMBUS_TEST_POSTGRES_URL"

// defaultTestURL is used when TestURLEnv is not set.
const defaultTestURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// admin is the lazily made pool that creates and drops test schemas, shared
// by every test of the process.
var admin struct {
	once sync.Once
	pool *pgxpool.Pool
	base string
	err  error
}

// adminPool returns the admin pool, or fails or skips the test when the
// database cannot be reached: it fails under CI (CI=true), where a missing
// database must never pass unnoticed, and skips elsewhere.
func adminPool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	admin.once.Do(func() {
		admin.base = os.Getenv(TestURLEnv)
		if admin.base == "" {
			admin.base = defaultTestURL
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		admin.pool, admin.err = pgxpool.New(ctx, admin.base)
		if admin.err == nil {
			admin.err = admin.pool.Ping(ctx)
		}
	})
	if admin.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("postgres: test database unreachable (set %s): %v", TestURLEnv, admin.err)
		}
		t.Skipf("postgres: test database unreachable, skipping (set %s to a reachable database): %v", TestURLEnv, admin.err)
	}
	return admin.pool, admin.base
}

// TestURL creates a fresh schema t_<random> and returns a URL whose
// search_path is that schema alone (so a query that names another schema,
// or forgets its own, fails). The schema is dropped when the test ends.
// It is for tests that start server processes; in-process tests use
// OpenTest.
func TestURL(t testing.TB) string {
	t.Helper()
	pool, base := adminPool(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("postgres: create test schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("postgres: drop test schema %s: %v", schema, err)
		}
	})
	return withSearchPath(t, base, schema)
}

// withSearchPath sets search_path on a URL or key=value connection string.
func withSearchPath(t testing.TB, base, schema string) string {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatalf("postgres: %s: %v", TestURLEnv, err)
		}
		q := u.Query()
		// pgx sends unknown parameters as run-time parameters.
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return base + " search_path=" + schema
}

// OpenTest opens a store on a fresh schema (see TestURL), logging to t,
// and closes it when the test ends.
func OpenTest(t testing.TB) *Store {
	t.Helper()
	u := TestURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, u, TestLogger(t))
	if err != nil {
		t.Fatalf("postgres: open test store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() }) // runs before the schema drop
	return s
}

// TestLogger returns a logger that writes to t.Log until the test ends.
func TestLogger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	// Registered first, so it runs after every later cleanup (which may
	// still log); from then on lines are dropped, since t.Log after the
	// test ended panics.
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testWriter sends log lines to t.Log.
type testWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
