package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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
	// locks are fine here, outside the hot path. It is waited for without a
	// timeout: only the migrations of other starting nodes take it, and a
	// node that waits here holds back no one but other starting nodes.
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
		if err := s.applyMigration(ctx, conn, m); err != nil {
			return err
		}
		s.logger.InfoContext(ctx, "postgres: applied migration", "version", m.version, "name", m.name, "schema", *schema)
	}
	return nil
}

// defaultMigrationLockTimeout is the lock_timeout of a migration's
// transaction when the store sets none of its own (Store.migrationLockTimeout).
const defaultMigrationLockTimeout = 2 * time.Second

// Between two attempts of a migration that could not take its locks, the
// pause starts at migrationRetryFirst and doubles up to migrationRetryMax;
// the wait is a random time between half the pause and the whole of it.
const (
	migrationRetryFirst = 50 * time.Millisecond
	migrationRetryMax   = 2 * time.Second
)

// errMigrationLockTimeout is what a migration's transaction returns when a
// statement waited longer than its lock_timeout for a lock (SQLSTATE
// 55P03). It is a plain value, not the driver's error, so that it passes
// runOn's interpretError unchanged and applyMigration can tell it apart.
var errMigrationLockTimeout = errors.New("lock_timeout: another session holds a lock the migration needs")

// applyMigration runs m and records it in schema_migrations, in one
// transaction on conn (the connection that holds the migration lock).
//
// Several migrations lock tables that running nodes write all the time
// (0008 messages and dead_letters, 0011 connections and skills; ALTER
// TABLE takes an ACCESS EXCLUSIVE lock). During a rolling upgrade a node of
// the previous version may hold a long transaction on such a table; a lock
// request that waits for it sits in the table's lock queue, and every later
// request that conflicts with it, the other nodes' plain inserts and
// deletes included, queues behind it. Waiting without bound would stall
// the whole bus for as long as that one transaction lasts. So each attempt
// waits at most lock_timeout for any lock; when it runs out the
// transaction is rolled back (its queued request leaves the queue and the
// writes behind it proceed) and the migration is tried again after a
// growing pause, until ctx ends.
func (s *Store) applyMigration(ctx context.Context, conn *pgxpool.Conn, m migration) error {
	timeout := s.migrationLockTimeout
	if timeout <= 0 {
		timeout = defaultMigrationLockTimeout
	}
	// SET takes no parameters; the value is a whole number of
	// milliseconds, at least 1 (0 would mean no timeout at all).
	setTimeout := fmt.Sprintf("SET LOCAL lock_timeout = %d", max(timeout.Milliseconds(), 1))
	pause := migrationRetryFirst
	for attempt := 1; ; attempt++ {
		// A migration that locks tables the other nodes write (0008 locks
		// messages and dead_letters) can deadlock with a transaction that
		// writes them in the other order; the database then ends one of
		// the two, and runOn runs the migration's transaction again.
		err := s.runOn(ctx, conn, pgx.TxOptions{}, func(tx pgx.Tx) error {
			// SET LOCAL: the setting ends with the transaction, so the
			// session's later statements (the advisory unlock) are not
			// bounded by it.
			if _, err := tx.Exec(ctx, setTimeout); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return lockTimeoutOr(err)
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name)
			return lockTimeoutOr(err)
		})
		if err == nil {
			return nil
		}
		if attempt > 1 && ctx.Err() != nil {
			// ctx ended during an attempt that was again waiting for a lock.
			return migrationLocksError(m, attempt, ctx.Err())
		}
		if !errors.Is(err, errMigrationLockTimeout) {
			return fmt.Errorf("postgres: migration %s: %w", m.name, err)
		}
		// Jitter, so that the attempts do not fall into step with writers
		// whose transactions come at regular times (a periodic job) and
		// meet one of them every time.
		wait := pause/2 + rand.N(pause/2+1)
		s.logger.WarnContext(ctx, "postgres: migration waits for a lock that another session holds; it will try again",
			"name", m.name, "attempt", attempt, "lock_timeout", timeout, "retry_in", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return migrationLocksError(m, attempt, ctx.Err())
		}
		pause = min(2*pause, migrationRetryMax)
	}
}

// migrationLocksError is migrate's error when ctx ended while m was still
// trying to take its locks.
func migrationLocksError(m migration, attempts int, ctxErr error) error {
	return fmt.Errorf("postgres: migration %s: could not take its locks: another session held a lock it needs through %d attempts: %w",
		m.name, attempts, ctxErr)
}

// lockTimeoutOr returns errMigrationLockTimeout for a lock wait that ran
// out of lock_timeout, else err.
func lockTimeoutOr(err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "55P03" {
		return fmt.Errorf("%w (%s)", errMigrationLockTimeout, pg.Message)
	}
	return err
}
