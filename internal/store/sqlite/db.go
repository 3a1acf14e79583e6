package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
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
	heads *heads     // the writer's index of story heads; nil on the read pool
	acked *ackedRows // the writer's count of rows waiting in acked_messages; nil on the read pool
}

// execResult is what an exec changed.
type execResult struct{ affected int64 }

// RowsAffected is the number of rows the statement changed.
func (r execResult) RowsAffected() (int64, error) { return r.affected, nil }

func (d *dbq) exec(query string, args ...any) (execResult, error) {
	if d.stmts != nil {
		st, err := d.stmts.get(query)
		if err != nil {
			return execResult{}, err
		}
		n, err := st.exec(args)
		st.release()
		return execResult{affected: n}, err
	}
	res, err := d.q.ExecContext(d.ctx, query, readArgs(args)...)
	if err != nil {
		return execResult{}, err
	}
	n, err := res.RowsAffected()
	return execResult{affected: n}, err
}

func (d *dbq) query(query string, args ...any) (rows, error) {
	if d.stmts != nil {
		st, err := d.stmts.get(query)
		if err != nil {
			return rows{}, err
		}
		st.gen++
		if err := st.bind(args); err != nil {
			st.reset()
			st.release()
			return rows{}, err
		}
		return rows{st: st, gen: st.gen}, nil
	}
	r, err := d.q.QueryContext(d.ctx, query, readArgs(args)...)
	if err != nil {
		return rows{}, err
	}
	return rows{sr: r}, nil
}

// row runs a query of at most one row; its Scan reports sql.ErrNoRows.
func (d *dbq) row(query string, args ...any) row {
	r, err := d.query(query, args...)
	return row{r: r, err: err}
}

// readArgs copies statement arguments for database/sql (the read path):
// each value is copied out of its interface, so that the caller's
// arguments need not live on the heap (the writer's path keeps none).
func readArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case nil:
		case int64:
			out[i] = v
		case *int64: // argList
			if v != nil {
				out[i] = *v
			}
		case *string: // argList
			if v != nil {
				out[i] = *v
			}
		case int:
			out[i] = v
		case int32:
			out[i] = v
		case bool:
			out[i] = v
		case float64:
			out[i] = v
		case string:
			out[i] = v
		case []byte:
			out[i] = v
		case sql.NullInt64:
			out[i] = v
		case sql.NullString:
			out[i] = v
		default:
			// A named kind, as the writer's path binds it (wconn.go). The
			// value is copied (it may live on the caller's stack, which
			// hide keeps from escape analysis: see hide).
			switch v := reflect.ValueOf(hide(a)); v.Kind() {
			case reflect.String:
				out[i] = strings.Clone(v.String())
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
				out[i] = v.Int()
			case reflect.Uint8, reflect.Uint16, reflect.Uint32:
				out[i] = int64(v.Uint())
			case reflect.Bool:
				out[i] = v.Bool()
			case reflect.Slice:
				if v.Type().Elem().Kind() == reflect.Uint8 {
					out[i] = bytes.Clone(v.Bytes())
					break
				}
				fallthrough
			default:
				out[i] = unsupportedArg{}
			}
		}
	}
	return out
}

// unsupportedArg stands for an argument of a type neither path binds: the
// driver refuses it, as it refused it before.
type unsupportedArg struct{}

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
	conn  *rawConn
	stmts map[string]*wstmt
	// used are the statements handed out since the last settle.
	used []*wstmt
	// args is the writer's reused argument list (dbq.argList).
	args argList
}

func newStmtCache(c *rawConn) *stmtCache {
	return &stmtCache{conn: c, stmts: make(map[string]*wstmt)}
}

// get returns the prepared statement of query. One in use (its rows are
// being read) is not handed out twice: a statement of its own is prepared
// for the nested use, and finalized when done.
func (c *stmtCache) get(query string) (*wstmt, error) {
	st, ok := c.stmts[query]
	if !ok || st.busy {
		var err error
		if st, err = c.conn.prepare(query); err != nil {
			return nil, err
		}
		if !ok {
			st.cached = true
			c.stmts[query] = st
		}
	}
	c.used = append(c.used, st)
	return st, nil
}

// release ends a statement's use when it was not cached (see get).
func (s *wstmt) release() {
	if !s.cached {
		s.finalize()
	}
}

// settle resets the statements an operation left running (rows it did not
// close, a panic mid-read): a statement still running would keep the
// transaction's savepoint and COMMIT from completing.
func (c *stmtCache) settle() {
	for i, st := range c.used {
		st.reset()
		if !st.cached {
			st.finalize()
		}
		c.used[i] = nil
	}
	c.used = c.used[:0]
}

func (c *stmtCache) close() {
	c.settle()
	for q, st := range c.stmts {
		st.finalize()
		delete(c.stmts, q)
	}
	c.conn.free()
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
	var re *sqliteError
	if errors.As(err, &re) {
		return interpretCode(re.code, re.msg)
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
