// Package pgtest gives tests a PostgreSQL schema of their own and a logger
// that writes to the test's log. Only tests import it, so the sombus binary
// does not link the testing package.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// URLEnv names the environment variable with the PostgreSQL URL that
// tests use.
const URLEnv = "SOMBUS_TEST_POSTGRES_URL"

// defaultURL is used when URLEnv is not set.
const defaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

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
		admin.base = os.Getenv(URLEnv)
		if admin.base == "" {
			admin.base = defaultURL
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
			t.Fatalf("postgres: test database unreachable (set %s): %v", URLEnv, admin.err)
		}
		t.Skipf("postgres: test database unreachable, skipping (set %s to a reachable database): %v", URLEnv, admin.err)
	}
	return admin.pool, admin.base
}

// URL creates a fresh schema t_<random> and returns a URL whose
// search_path is that schema alone (so a query that names another schema,
// or forgets its own, fails). The schema is dropped when the test ends.
// Tests of the postgres package open a store on it with OpenTest; tests that
// start server processes pass it on.
func URL(t testing.TB) string {
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

// Database creates a fresh database t_<random> and returns a URL for it
// (its public schema). The database is dropped, with any session still on
// it, when the test ends. It is for tests that must see no session of
// other tests: LISTEN/NOTIFY and pg_stat_activity are per database, not
// per schema.
func Database(t testing.TB) string {
	t.Helper()
	pool, base := adminPool(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("postgres: create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, `DROP DATABASE `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
			t.Errorf("postgres: drop test database %s: %v", name, err)
		}
	})
	return withDatabase(t, base, name)
}

// withDatabase names the database on a URL or key=value connection string.
func withDatabase(t testing.TB, base, name string) string {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatalf("postgres: %s: %v", URLEnv, err)
		}
		u.Path = "/" + name
		return u.String()
	}
	return base + " dbname=" + name
}

// withSearchPath sets search_path on a URL or key=value connection string.
func withSearchPath(t testing.TB, base, schema string) string {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatalf("postgres: %s: %v", URLEnv, err)
		}
		q := u.Query()
		// pgx sends unknown parameters as run-time parameters.
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return base + " search_path=" + schema
}
