package postgres

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// lockWarnings counts the warnings that migration 0011 could not take its
// locks, and passes every record on to the test's log.
type lockWarnings struct {
	slog.Handler
	n *atomic.Int64
}

func (h lockWarnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.Contains(r.Message, "migration waits for a lock") {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "name" && a.Value.String() == "0011_skills_connection_key.sql" {
				h.n.Add(1)
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

func (h lockWarnings) WithAttrs(as []slog.Attr) slog.Handler {
	return lockWarnings{Handler: h.Handler.WithAttrs(as), n: h.n}
}

func (h lockWarnings) WithGroup(name string) slog.Handler {
	return lockWarnings{Handler: h.Handler.WithGroup(name), n: h.n}
}

// skillsHeld is a schema taken back to version 10, before migration 0011
// (which locks connections and skills in SHARE ROW EXCLUSIVE mode), with a
// transaction that holds an uncommitted insert into skills, as a long
// transaction of a node of the previous version would.
type skillsHeld struct {
	s *Store
	// mig is the migrating node, whose migrate the test runs; its
	// lock_timeout is 100 ms.
	mig    *Store
	holder pgx.Tx
	// q is a connection whose skills row is committed.
	q string
	// warned counts mig's warnings that 0011 waits for a lock.
	warned *atomic.Int64
}

func holdSkills(t *testing.T) skillsHeld {
	t.Helper()
	url := pgtest.URL(t)
	ctx := t.Context()
	h := skillsHeld{s: openURL(t, url), warned: &atomic.Int64{}}
	_, _, h.q = setupQueue(t, h.s, 1)
	// Opened now, mig finds the schema up to date; the schema then goes
	// back to version 10.
	var err error
	h.mig, err = Open(ctx, url, slog.New(lockWarnings{Handler: testLogger(t).Handler(), n: h.warned}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.mig.Close() })
	h.mig.migrationLockTimeout = 100 * time.Millisecond
	if _, err := h.s.pool.Exec(ctx, `ALTER TABLE skills DROP CONSTRAINT skills_connection_id_fkey;
		ALTER TABLE queue_counts DROP CONSTRAINT queue_counts_queue_id_fkey;
		DELETE FROM schema_migrations WHERE version >= 11`); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.pool.Exec(ctx, `INSERT INTO skills (connection_id, registrations, updated_at) VALUES ($1, '[]', 1)`, h.q); err != nil {
		t.Fatal(err)
	}
	h.holder, err = h.s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.holder.Rollback(context.Background()) })
	if _, err := h.holder.Exec(ctx, `INSERT INTO skills (connection_id, registrations, updated_at) VALUES ('c_gone', '[]', 1)`); err != nil {
		t.Fatal(err)
	}
	return h
}

// migrate runs mig's migrate in a goroutine of its own; its error is in
// *err once done is closed. A cleanup ends the holder's transaction and
// waits for the migration, so that it is over before the schema is dropped.
func (h skillsHeld) migrate(t *testing.T, ctx context.Context) (done <-chan struct{}, err *error) {
	ch := make(chan struct{})
	var e error
	go func() {
		defer close(ch)
		e = h.mig.migrate(ctx)
	}()
	t.Cleanup(func() {
		_ = h.holder.Rollback(context.Background())
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Error("the migration did not end after the holder's transaction did")
		}
	})
	return ch, &e
}

// migrationQueued: mig's request for its lock on skills waits (behind the
// holder).
func (h skillsHeld) migrationQueued(t *testing.T) bool {
	var ok bool
	if err := h.s.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_locks
		WHERE locktype = 'relation' AND relation = 'skills'::regclass
			AND mode = 'ShareRowExclusiveLock' AND NOT granted)`).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestMigrationLockTimeout: a migration that needs a table lock which a
// long transaction of another node holds does not hold back the other
// nodes' writes to that table. Migration 0011 waits for the holder's
// uncommitted insert into skills (ROW EXCLUSIVE). A lock request that
// waited without bound would queue every later write to skills behind it
// until the holder's transaction ends; with the migration's lock_timeout
// it leaves the queue after the timeout, so a third session's write to
// skills completes while the holder's transaction is still open, and the
// migration, tried again, is applied once that transaction commits.
func TestMigrationLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	h := holdSkills(t)
	all, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	done, migErr := h.migrate(t, ctx)
	running := func() {
		t.Helper()
		select {
		case <-done:
			t.Fatalf("the migration ended while the holder's transaction was open: %v", *migErr)
		default:
		}
	}

	// Each round starts the write while the migration's request is in the
	// queue, so the write queues behind it and goes through only when the
	// request leaves the queue. Three rounds show that the migration keeps
	// coming back after its timeouts.
	for round := range 3 {
		waitUntil(t, func() bool { running(); return h.migrationQueued(t) })
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := h.s.pool.Exec(wctx, `UPDATE skills SET updated_at = updated_at + 1 WHERE connection_id = $1`, h.q)
		cancel()
		if err != nil {
			t.Fatalf("round %d: a write to skills beside the waiting migration: %v (it waited behind the migration's lock request)", round, err)
		}
	}
	running()
	if n := h.warned.Load(); n < 1 {
		t.Errorf("%d warnings that migration 0011 waits for a lock, want at least 1", n)
	}
	if vs := appliedVersions(t, h.s); len(vs) != 10 {
		t.Fatalf("schema_migrations = %v while the holder's transaction is open, want 1..10", vs)
	}

	if err := h.holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		if *migErr != nil {
			t.Fatalf("migrate after the holder committed: %v", *migErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the migration was not applied within 30 s of the holder's commit")
	}
	if vs := appliedVersions(t, h.s); len(vs) != len(all) || vs[10] != 11 {
		t.Fatalf("schema_migrations = %v, want 1..%d", vs, len(all))
	}
	// The migration ran whole: the holder's row, of no connection, is gone.
	var n int
	if err := h.s.pool.QueryRow(ctx, `SELECT count(*) FROM skills WHERE connection_id = 'c_gone'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the skills row of no connection is still there after migration 0011")
	}
}

// TestMigrationLockTimeoutGivesUp: when the start's context ends while a
// migration still cannot take its locks, migrate returns an error naming
// the migration and saying so, and records nothing.
func TestMigrationLockTimeoutGivesUp(t *testing.T) {
	t.Parallel()
	h := holdSkills(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	done, migErr := h.migrate(t, ctx)
	<-done // ctx bounds it
	if *migErr == nil || !strings.Contains((*migErr).Error(), "0011_skills_connection_key.sql") ||
		!strings.Contains((*migErr).Error(), "could not take its locks") {
		t.Fatalf("migrate = %v, want migration 0011's error that it could not take its locks", *migErr)
	}
	if n := h.warned.Load(); n < 1 {
		t.Errorf("%d warnings that migration 0011 waits for a lock, want at least 1", n)
	}
	if vs := appliedVersions(t, h.s); len(vs) != 10 {
		t.Fatalf("schema_migrations = %v, want 1..10", vs)
	}
}
