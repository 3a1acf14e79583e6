package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sombus/sombus/internal/bus"
	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// querier is what *sql.Conn and *sql.Tx have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// dbq runs statements either on the write connection (inside the writer's
// transaction, with a cache of prepared statements) or in a read
// transaction of the read pool (stmts nil).
type dbq struct {
	ctx   context.Context
	q     querier
	stmts *stmtCache
	heads *heads // the writer's index of story heads; nil on the read pool
}

func (d *dbq) exec(query string, args ...any) (sql.Result, error) {
	if d.stmts != nil {
		st, err := d.stmts.get(d.ctx, query)
		if err != nil {
			return nil, err
		}
		return st.ExecContext(d.ctx, args...)
	}
	return d.q.ExecContext(d.ctx, query, args...)
}

func (d *dbq) query(query string, args ...any) (*sql.Rows, error) {
	if d.stmts != nil {
		st, err := d.stmts.get(d.ctx, query)
		if err != nil {
			return nil, err
		}
		return st.QueryContext(d.ctx, args...)
	}
	return d.q.QueryContext(d.ctx, query, args...)
}

// row runs a query of at most one row; its Scan reports sql.ErrNoRows.
func (d *dbq) row(query string, args ...any) *sql.Row {
	if d.stmts != nil {
		st, err := d.stmts.get(d.ctx, query)
		if err != nil {
			// Let the error surface from Scan, through the plain path.
			return d.q.QueryRowContext(d.ctx, query, args...)
		}
		return st.QueryRowContext(d.ctx, args...)
	}
	return d.q.QueryRowContext(d.ctx, query, args...)
}

// affected runs an exec and returns the number of rows it changed.
func (d *dbq) affected(query string, args ...any) (int64, error) {
	res, err := d.exec(query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// stmtCache keeps the write connection's prepared statements by their text.
// Only the writer goroutine uses it, so it needs no lock.
type stmtCache struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
}

func newStmtCache(c *sql.Conn) *stmtCache {
	return &stmtCache{conn: c, stmts: make(map[string]*sql.Stmt)}
}

func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := c.stmts[query]; ok {
		return st, nil
	}
	st, err := c.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.stmts[query] = st
	return st, nil
}

func (c *stmtCache) close() {
	for q, st := range c.stmts {
		_ = st.Close()
		delete(c.stmts, q)
	}
}

// interpretError maps a driver error onto the bus sentinels, once, so that
// nothing above the store sees a driver type: no row is bus.ErrNotFound, a
// uniqueness violation bus.ErrConflict, a missing referenced row (foreign
// key) bus.ErrNotFound, and the database out of reach or unable to work
// now (see unavailableCode; a closed connection too) bus.ErrUnavailable.
// Other driver errors become plain errors carrying the driver's message.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return bus.ErrNotFound
	}
	if errors.Is(err, sql.ErrConnDone) {
		return fmt.Errorf("sqlite: %w: %w", bus.ErrUnavailable, err)
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	return interpretCode(se.Code(), se.Error())
}

// interpretCode maps an SQLite result code (extended or primary) and its
// message onto the bus sentinels, for interpretError.
func interpretCode(code int, msg string) error {
	switch code {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return fmt.Errorf("%s: %w", msg, bus.ErrConflict)
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return fmt.Errorf("%s (a referenced row does not exist): %w", msg, bus.ErrNotFound)
	}
	if unavailableCode(code) {
		return fmt.Errorf("sqlite: %s: %w", msg, bus.ErrUnavailable)
	}
	return fmt.Errorf("sqlite: %s", msg)
}

// unavailableCode reports whether an SQLite result code says the database
// cannot do the work right now, whatever was asked: a lock held past the
// busy timeout (BUSY, LOCKED, PROTOCOL), the disk failing or full (IOERR
// and its extended codes, FULL), the file out of reach (CANTOPEN), or no
// memory (NOMEM). Constraint violations, corruption, misuse and every
// other code name a fault of the request or of sombus.
func unavailableCode(code int) bool {
	switch code & 0xff { // the primary result code
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_PROTOCOL,
		sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_NOMEM:
		return true
	}
	return false
}

// ms is how a time is stored: unix milliseconds.
func ms(t time.Time) int64 { return t.UnixMilli() }

// fromMS reads a stored time back, in UTC.
func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

// nullMS stores an optional time (NULL when nil).
func nullMS(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

// fromNullMS reads an optional time back.
func fromNullMS(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMS(v.Int64)
	return &t
}

// boolInt stores a bool as 0 or 1.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
