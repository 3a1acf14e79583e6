package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// migrationFiles are the numbered schema migrations, NNNN_name.sql, applied
// in order. A migration once released is never edited: add a new one.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one numbered schema change.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations sorted by version.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %q: name must start with a positive number and '_'", e.Name())
		}
		b, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := range ms {
		if ms[i].version != i+1 {
			return nil, fmt.Errorf("migration %q: versions must be 1, 2, 3, … without gaps", ms[i].name)
		}
	}
	return ms, nil
}

// migrationLockKey is the first half of the advisory lock key that
// serializes migrations; the second half is a hash of the schema, so nodes
// of different schemas (tests) do not wait for each other.
const migrationLockKey = 0x50b05

// migrate applies the pending migrations. It holds a session advisory lock
// while it reads and changes the schema, so when several nodes start at
// once one migrates and the others then find nothing to do. It refuses a
// database whose schema is newer than this binary knows: an older binary
// must not write to tables whose meaning it does not know.
func (s *Store) migrate(ctx context.Context) error {
	all, err := migrations()
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", interpretError(err))
	}
	defer conn.Release()

	// The lock is taken on this one connection (a session lock); advisory
	// locks are fine here, outside the hot path.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1, hashtext(coalesce(current_schema(), '')))`, migrationLockKey); err != nil {
		return fmt.Errorf("postgres: migrate: lock: %w", interpretError(err))
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1, hashtext(coalesce(current_schema(), '')))`, migrationLockKey); err != nil {
			// Closing the session releases its locks for sure.
			s.logger.Warn("postgres: migrate: unlock failed; closing the connection", "err", err)
			_ = conn.Conn().Close(uctx)
		}
	}()

	var schema *string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return fmt.Errorf("postgres: migrate: %w", interpretError(err))
	}
	if schema == nil {
		return fmt.Errorf("postgres: migrate: no schema of the search_path exists; create it or fix search_path")
	}

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("postgres: migrate: %w", interpretError(err))
	}
	var current int
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("postgres: migrate: %w", interpretError(err))
	}
	if current > len(all) {
		return fmt.Errorf("postgres: database schema %q is at version %d but this sombus knows only up to %d: run a newer sombus", *schema, current, len(all))
	}
	for _, m := range all[current:] {
		// A migration that locks tables the other nodes write (0008 locks
		// messages and dead_letters) can deadlock with a transaction that
		// writes them in the other order; the database then ends one of
		// the two, and runOn runs the migration's transaction again.
		err := s.runOn(ctx, conn, pgx.TxOptions{}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("postgres: migration %s: %w", m.name, err)
		}
		s.logger.InfoContext(ctx, "postgres: applied migration", "version", m.version, "name", m.name, "schema", *schema)
	}
	return nil
}
