package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sombus/sombus/internal/bus"
)

// TestInterpretCode is the classification of SQLite result codes: which
// are the database out of reach or unable to work now (bus.ErrUnavailable,
// answered 503 with Retry-After) and which are faults (500), conflicts or
// missing rows.
func TestInterpretCode(t *testing.T) {
	for _, c := range []struct {
		name        string
		code        int
		is          error // errors.Is target, if any
		unavailable bool
	}{
		{"unique", sqlite3.SQLITE_CONSTRAINT_UNIQUE, bus.ErrConflict, false},
		{"primary key", sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, bus.ErrConflict, false},
		{"foreign key", sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY, bus.ErrNotFound, false},
		{"not null", sqlite3.SQLITE_CONSTRAINT_NOTNULL, nil, false},
		{"check", sqlite3.SQLITE_CONSTRAINT_CHECK, nil, false},
		{"busy", sqlite3.SQLITE_BUSY, nil, true},
		{"busy snapshot", sqlite3.SQLITE_BUSY_SNAPSHOT, nil, true},
		{"locked", sqlite3.SQLITE_LOCKED, nil, true},
		{"locked shared cache", sqlite3.SQLITE_LOCKED_SHAREDCACHE, nil, true},
		{"protocol", sqlite3.SQLITE_PROTOCOL, nil, true},
		{"io error", sqlite3.SQLITE_IOERR, nil, true},
		{"io error on fsync", sqlite3.SQLITE_IOERR_FSYNC, nil, true},
		{"io error on write", sqlite3.SQLITE_IOERR_WRITE, nil, true},
		{"short read", sqlite3.SQLITE_IOERR_SHORT_READ, nil, true},
		{"disk full", sqlite3.SQLITE_FULL, nil, true},
		{"cannot open", sqlite3.SQLITE_CANTOPEN, nil, true},
		{"no memory", sqlite3.SQLITE_NOMEM, nil, true},
		{"generic error", sqlite3.SQLITE_ERROR, nil, false},
		{"corrupt", sqlite3.SQLITE_CORRUPT, nil, false},
		{"read only", sqlite3.SQLITE_READONLY, nil, false},
		{"misuse", sqlite3.SQLITE_MISUSE, nil, false},
		{"too big", sqlite3.SQLITE_TOOBIG, nil, false},
		{"mismatch", sqlite3.SQLITE_MISMATCH, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := interpretCode(c.code, "driver message")
			if c.is != nil && !errors.Is(got, c.is) {
				t.Errorf("interpretCode(%d) = %v, want errors.Is %v", c.code, got, c.is)
			}
			if bus.IsUnavailable(got) != c.unavailable {
				t.Errorf("interpretCode(%d) = %v: unavailable %v, want %v", c.code, got, !c.unavailable, c.unavailable)
			}
		})
	}
	for _, c := range []struct {
		name        string
		in          error
		unavailable bool
	}{
		{"connection done", fmt.Errorf("exec: %w", sql.ErrConnDone), true},
		{"closed store", errClosed, true},
		{"not the driver's", errors.New("fn's own"), false},
	} {
		if got := interpretError(c.in); bus.IsUnavailable(got) != c.unavailable {
			t.Errorf("%s: interpretError(%v) = %v: unavailable %v, want %v", c.name, c.in, got, !c.unavailable, c.unavailable)
		}
	}
	if got := interpretError(sql.ErrNoRows); !errors.Is(got, bus.ErrNotFound) {
		t.Errorf("no rows: %v, want bus.ErrNotFound", got)
	}
}

// TestDriverErrorsAreClassified goes through the driver: a unique
// violation is a conflict, a file that cannot be opened is unavailability,
// and every call on a closed store is unavailability.
func TestDriverErrorsAreClassified(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	create := func() error {
		return s.Update(ctx, func(tx bus.Tx) error {
			return tx.WorkspaceCreate(bus.Workspace{ID: "w1", Name: "x", CreatedAt: t0})
		})
	}
	if err := create(); err != nil {
		t.Fatal(err)
	}
	if err := create(); !errors.Is(err, bus.ErrConflict) || bus.IsUnavailable(err) {
		t.Fatalf("second create: %v, want bus.ErrConflict", err)
	}

	// A directory where the database file should be: SQLITE_CANTOPEN.
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "db"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, filepath.Join(dir, "db"), testLogger(t)); !bus.IsUnavailable(err) {
		t.Fatalf("open of a directory: %v, want bus.ErrUnavailable", err)
	}

	closed, err := Open(ctx, filepath.Join(t.TempDir(), "c.db"), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"ping":   closed.Ping(ctx),
		"update": closed.Update(ctx, func(tx bus.Tx) error { return nil }),
		"view":   closed.View(ctx, func(tx bus.Tx) error { return nil }),
	} {
		if !bus.IsUnavailable(err) {
			t.Errorf("%s after Close: %v, want bus.ErrUnavailable", name, err)
		}
	}
}
