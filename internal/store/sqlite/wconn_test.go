package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"testing"

	"github.com/sombus/sombus/internal/bus"
)

// kvSchema is a scratch table of the tests below.
const kvSchema = `CREATE TABLE kv(k TEXT PRIMARY KEY, n INTEGER, b BLOB, s TEXT, f REAL)`

type kvName string

// kvRow is one row of kv as the tests read it.
type kvRow struct {
	k    kvName
	n    sql.NullInt64
	b    json.RawMessage
	s    sql.NullString
	f    float64
	raw  []byte
	flag bool
	text string
}

func kvPut(t *testing.T, s *Store) {
	t.Helper()
	err := s.w.do(context.Background(), func(d *dbq) error {
		if _, err := d.exec(kvSchema); err != nil {
			return err
		}
		for _, args := range [][]any{
			{kvName("a"), int64(1), json.RawMessage(`{"x":1}`), "one", 1.5},
			{"b", 2, []byte{}, sql.NullString{String: "two", Valid: true}, int64(2)},
			{"c", sql.NullInt64{}, nil, sql.NullString{}, float64(0)},
			{"d", true, []byte("blob"), "", 0},
		} {
			if _, err := d.exec(`INSERT INTO kv(k, n, b, s, f) VALUES (?, ?, ?, ?, ?)`, args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// kvRead reads kv through d in key order.
func kvRead(d *dbq) ([]kvRow, error) {
	rows, err := d.query(`SELECT k, n, b, s, f, b, n, k FROM kv ORDER BY k`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kvRow
	for rows.Next() {
		var r kvRow
		if err := rows.Scan(&r.k, &r.n, &r.b, &r.s, &r.f, &r.raw, &r.n, &r.text); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var flag int64
	if err := d.row(`SELECT n FROM kv WHERE k = ?`, kvName("d")).Scan(&flag); err != nil {
		return nil, err
	}
	out[3].flag = flag == 1
	return out, nil
}

// TestWriterStatementsReadAsDatabaseSQL: the writer's statements bind and
// scan the kinds of values the store uses as database/sql does on the read
// pool: named kinds, NULLs, empty blobs, floats.
func TestWriterStatementsReadAsDatabaseSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	kvPut(t, s)
	var wrote, read []kvRow
	if err := s.w.do(ctx, func(d *dbq) (err error) { wrote, err = kvRead(d); return err }); err != nil {
		t.Fatal(err)
	}
	if err := s.read(ctx, func(d *dbq) (err error) { read, err = kvRead(d); return err }); err != nil {
		t.Fatal(err)
	}
	if len(wrote) != 4 || len(read) != 4 {
		t.Fatalf("rows: writer %d, read pool %d, want 4", len(wrote), len(read))
	}
	for i := range wrote {
		w, r := wrote[i], read[i]
		if w.k != r.k || w.n != r.n || !bytes.Equal(w.b, r.b) || (w.b == nil) != (r.b == nil) || w.s != r.s || w.f != r.f ||
			!bytes.Equal(w.raw, r.raw) || (w.raw == nil) != (r.raw == nil) || w.flag != r.flag || w.text != r.text {
			t.Errorf("row %d: writer %+v, read pool %+v", i, w, r)
		}
	}
	if a := wrote[0]; a.k != "a" || string(a.b) != `{"x":1}` || a.s.String != "one" || a.f != 1.5 || a.n.Int64 != 1 {
		t.Errorf("row a: %+v", a)
	}
	if c := wrote[2]; c.n.Valid || c.b != nil || c.s.Valid {
		t.Errorf("row c (NULLs): %+v", c)
	}
	if !wrote[3].flag {
		t.Errorf("row d: the bool was stored as %+v", wrote[3])
	}

	// NULL into a string is an error on both paths.
	for name, run := range map[string]func(func(d *dbq) error) error{
		"writer":    func(fn func(d *dbq) error) error { return s.w.do(ctx, fn) },
		"read pool": func(fn func(d *dbq) error) error { return s.read(ctx, fn) },
	} {
		var str string
		if err := run(func(d *dbq) error { return d.row(`SELECT s FROM kv WHERE k = 'c'`).Scan(&str) }); err == nil {
			t.Errorf("%s: NULL scanned into a string without an error", name)
		}
		if err := run(func(d *dbq) error { return d.row(`SELECT s FROM kv WHERE k = 'z'`).Scan(&str) }); !errors.Is(err, sql.ErrNoRows) {
			t.Errorf("%s: no row: %v, want sql.ErrNoRows", name, err)
		}
	}
}

// TestWriterStatementEdges: a statement in use is not handed out twice,
// rows left open or a panic mid-read do not keep the transaction from
// committing, and a constraint violation maps as before.
func TestWriterStatementEdges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	kvPut(t, s)
	const all = `SELECT k FROM kv ORDER BY k`

	// The same query again while its rows are read.
	err := s.w.do(ctx, func(d *dbq) error {
		outer, err := d.query(all)
		if err != nil {
			return err
		}
		defer outer.Close()
		pairs := 0
		for outer.Next() {
			inner, err := d.query(all)
			if err != nil {
				return err
			}
			for inner.Next() {
				pairs++
			}
			if err := inner.Err(); err != nil {
				return err
			}
		}
		if pairs != 16 {
			t.Errorf("nested reads: %d pairs, want 16", pairs)
		}
		return outer.Err()
	})
	if err != nil {
		t.Fatal(err)
	}

	// Rows of an earlier run of a statement are closed: closing them again
	// leaves the statement's next run alone.
	err = s.w.do(ctx, func(d *dbq) error {
		first, err := d.query(all)
		if err != nil {
			return err
		}
		for first.Next() {
		}
		second, err := d.query(all)
		if err != nil {
			return err
		}
		second.Next()
		_ = first.Close()
		if first.Next() {
			t.Error("rows of an earlier run read a row")
		}
		n := 1
		for second.Next() {
			n++
		}
		if n != 4 || second.Err() != nil {
			t.Errorf("the second run read %d rows (%v) after the first's Close, want 4", n, second.Err())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Rows left open, then a panic mid-read: the writes after them commit.
	if err := s.w.do(ctx, func(d *dbq) error {
		rows, err := d.query(all)
		if err != nil {
			return err
		}
		rows.Next()
		_, err = d.exec(`UPDATE kv SET n = 10 WHERE k = 'a'`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != "mid-read" {
				t.Errorf("recovered %v, want the operation's panic", r)
			}
		}()
		_ = s.w.do(ctx, func(d *dbq) error {
			if _, err := d.exec(`UPDATE kv SET n = 99 WHERE k = 'a'`); err != nil {
				return err
			}
			rows, err := d.query(all)
			if err != nil {
				return err
			}
			rows.Next()
			panic("mid-read")
		})
	}()
	if err := s.w.do(ctx, func(d *dbq) error {
		_, err := d.exec(`UPDATE kv SET n = n + 1 WHERE k = 'b'`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var a, b int64
	if err := s.read(ctx, func(d *dbq) error {
		if err := d.row(`SELECT n FROM kv WHERE k = 'a'`).Scan(&a); err != nil {
			return err
		}
		return d.row(`SELECT n FROM kv WHERE k = 'b'`).Scan(&b)
	}); err != nil {
		t.Fatal(err)
	}
	if a != 10 || b != 3 {
		t.Errorf("after the open rows and the panic: a = %d (want 10: the panicking operation rolled back), b = %d (want 3)", a, b)
	}

	// A statement with a trailing semicolon is one statement; two are
	// refused.
	err = s.w.do(ctx, func(d *dbq) error {
		var n int
		if err := d.row("SELECT count(*) FROM kv;\n").Scan(&n); err != nil || n != 4 {
			t.Errorf("trailing semicolon: %d, %v", n, err)
		}
		if _, err := d.exec("UPDATE kv SET n = 0; UPDATE kv SET n = 1"); err == nil {
			t.Error("two statements in one exec: no error")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A unique violation through the writer's statements.
	err = s.w.do(ctx, func(d *dbq) error {
		_, err := d.exec(`INSERT INTO kv(k) VALUES (?)`, "a")
		return interpretError(err)
	})
	if !errors.Is(err, bus.ErrConflict) || bus.IsUnavailable(err) {
		t.Errorf("duplicate key: %v, want bus.ErrConflict", err)
	}
}

// TestWriterStatementsAllocate: a prepared statement runs, and a row is
// read into the caller's variables, without allocating.
func TestWriterStatementsAllocate(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	kvPut(t, s)
	var execs, reads float64
	bad := false
	err := s.w.do(ctx, func(d *dbq) error {
		key, n := "a", int64(0)
		execs = testing.AllocsPerRun(100, func() {
			n++
			if _, err := d.exec(`UPDATE kv SET n = ?, f = ? WHERE k = ?`, n, 2.5, key); err != nil {
				t.Error(err)
			}
		})
		reads = testing.AllocsPerRun(100, func() {
			var got int64
			var f float64
			var str string
			if err := d.row(`SELECT n, f, s FROM kv WHERE k = ?`, key).Scan(&got, &f, &str); err != nil || got != n || f != 2.5 || str != "one" {
				bad = true
			}
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if bad {
		t.Error("the one-row read read other values")
	}
	if execs != 0 || reads != 0 {
		t.Errorf("allocations: %v an exec, %v a one-row read; want 0", execs, reads)
	}
}
