package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unsafe"

	"modernc.org/libc"
	"modernc.org/libc/sys/types"
	sqlite3 "modernc.org/sqlite/lib"
)

// The writer's statements run on SQLite's own interface (modernc.org/sqlite/lib)
// instead of through database/sql and the driver, which per statement
// allocate the argument lists, a Rows object with its column names and
// types, a box for each value read, and a copy of each value scanned:
// about 30 of the 53 allocations a drained message cost. Here a statement
// is prepared once, its arguments are bound in place, and a row's columns
// are read straight into the caller's variables. The SQL, the transaction
// frame (BEGIN IMMEDIATE, savepoints, COMMIT, all run by the writer as
// before) and the durability are unchanged: only how a statement runs is.

// rawConn is the write connection's SQLite handle and the libc thread
// state the driver uses with it. Only the writer goroutine uses it, and
// only while the driver's connection is idle (the writer owns the
// *sql.Conn: nothing else runs on it).
type rawConn struct {
	tls *libc.TLS
	db  uintptr // *sqlite3
	// scratch is C memory that arguments are copied to for binding.
	scratch    uintptr
	scratchLen int
}

// driverConnLayout is the start of modernc.org/sqlite's connection type:
// the SQLite handle and the libc thread state (checked in rawHandle).
type driverConnLayout struct {
	db  uintptr
	tls *libc.TLS
}

// rawHandle reads the SQLite handle of a modernc.org/sqlite connection, as
// (*sql.Conn).Raw hands it over. The driver does not export it, so its
// layout is checked by reflection first: a driver version that changed it
// is refused (every store test then fails at Open) rather than misread.
func rawHandle(dc any) (*rawConn, error) {
	t := reflect.TypeOf(dc)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("sqlite: the driver's connection is a %v, not a modernc.org/sqlite connection", t)
	}
	s := t.Elem()
	if s.PkgPath() != "modernc.org/sqlite" || s.Name() != "conn" || s.NumField() < 2 ||
		s.Field(0).Name != "db" || s.Field(0).Type.Kind() != reflect.Uintptr || s.Field(0).Offset != 0 ||
		s.Field(1).Name != "tls" || s.Field(1).Type != reflect.TypeOf((*libc.TLS)(nil)) ||
		s.Field(1).Offset != reflect.TypeOf(driverConnLayout{}).Field(1).Offset {
		return nil, fmt.Errorf("sqlite: modernc.org/sqlite's connection (%v) does not have the layout this build reads", t)
	}
	l := (*driverConnLayout)(reflect.ValueOf(dc).UnsafePointer()) //nolint:gosec // G103: the layout was checked above
	if l.db == 0 || l.tls == nil {
		return nil, errors.New("sqlite: the driver's connection is closed")
	}
	return &rawConn{tls: l.tls, db: l.db}, nil
}

// cbytes is a view of n bytes of C memory at p (libc's heap, SQLite's
// memory: never moved nor collected by Go), valid while the memory is.
func cbytes(p uintptr, n int) []byte {
	return unsafe.Slice(*(**byte)(unsafe.Pointer(&p)), n) //nolint:gosec // G103: C memory, see above
}

// cword reads the pointer-sized word of C memory at p.
func cword(p uintptr) uintptr {
	return *(*uintptr)(*(*unsafe.Pointer)(unsafe.Pointer(&p))) //nolint:gosec // G103: C memory, see cbytes
}

// ptrSize is the size of a C pointer.
const ptrSize = 4 << (^uintptr(0) >> 63)

// sqliteError is an error of an SQLite call, with its result code; the
// message is the driver's ("errstr: errmsg (code)").
type sqliteError struct {
	code int
	msg  string
}

func (e *sqliteError) Error() string { return e.msg }

// errstr builds the error of result code rc, as the driver words it.
func (c *rawConn) errstr(rc int32) error {
	str := libc.GoString(sqlite3.Xsqlite3_errstr(c.tls, rc))
	var busy string
	if rc == sqlite3.SQLITE_BUSY {
		busy = " (SQLITE_BUSY)"
	}
	msg := libc.GoString(sqlite3.Xsqlite3_errmsg(c.tls, c.db))
	if msg == str {
		return &sqliteError{code: int(rc), msg: fmt.Sprintf("%s (%v)%s", str, rc, busy)}
	}
	return &sqliteError{code: int(rc), msg: fmt.Sprintf("%s: %s (%v)%s", str, msg, rc, busy)}
}

// totalChanges is SQLite's total_changes(): the rows changed since the
// connection opened.
func (c *rawConn) totalChanges() int64 {
	return sqlite3.Xsqlite3_total_changes64(c.tls, c.db)
}

// prepare compiles one statement.
func (c *rawConn) prepare(query string) (*wstmt, error) {
	z, err := libc.CString(query)
	if err != nil {
		return nil, err
	}
	defer libc.Xfree(c.tls, z)
	out := libc.Xcalloc(c.tls, 2, ptrSize) // the statement, the tail
	if out == 0 {
		return nil, c.errstr(sqlite3.SQLITE_NOMEM)
	}
	defer libc.Xfree(c.tls, out)
	tail := out + ptrSize
	if rc := sqlite3.Xsqlite3_prepare_v2(c.tls, c.db, z, -1, out, tail); rc != sqlite3.SQLITE_OK {
		return nil, c.errstr(rc)
	}
	p := cword(out)
	if p == 0 {
		return nil, fmt.Errorf("sqlite: no statement in %q", query)
	}
	if rest := strings.Trim(libc.GoString(cword(tail)), " \t\r\n;"); rest != "" {
		sqlite3.Xsqlite3_finalize(c.tls, p)
		return nil, fmt.Errorf("sqlite: more than one statement in %q", query)
	}
	st := &wstmt{c: c, p: p, ncol: int(sqlite3.Xsqlite3_column_count(c.tls, p))}
	st.nparam = int(sqlite3.Xsqlite3_bind_parameter_count(c.tls, p))
	st.last = make([]string, st.ncol)
	return st, nil
}

// wstmt is a prepared statement of the write connection. busy: arguments
// are bound or a step ran, and it was not reset yet.
type wstmt struct {
	c      *rawConn
	p      uintptr // *sqlite3_stmt
	ncol   int
	nparam int
	busy   bool
	cached bool // kept by the cache (else finalized when its rows close)
	// last holds the last text read of each column: the same text again is
	// answered with the same string (a queue's messages mostly share their
	// type, topic and producer).
	last []string
	// gen counts the statement's runs: rows of an earlier run are closed.
	gen uint64
}

// maxInterned bounds the texts that last keeps.
const maxInterned = 256

// bind binds args (positional) after a reset.
func (s *wstmt) bind(args []any) error {
	if len(args) != s.nparam {
		return fmt.Errorf("sqlite: %d arguments for %d parameters", len(args), s.nparam)
	}
	s.busy = true
	for i, a := range args {
		if err := s.bindOne(int32(i+1), a); err != nil {
			return err
		}
	}
	return nil
}

func (s *wstmt) bindOne(i int32, a any) error {
	tls, p := s.c.tls, s.p
	var rc int32
	switch v := a.(type) {
	case nil:
		rc = sqlite3.Xsqlite3_bind_null(tls, p, i)
	case int64:
		rc = sqlite3.Xsqlite3_bind_int64(tls, p, i, v)
	case *int64: // argList
		if v == nil {
			rc = sqlite3.Xsqlite3_bind_null(tls, p, i)
		} else {
			rc = sqlite3.Xsqlite3_bind_int64(tls, p, i, *v)
		}
	case *string: // argList
		if v == nil {
			rc = sqlite3.Xsqlite3_bind_null(tls, p, i)
		} else {
			rc = s.bindText(i, *v)
		}
	case int:
		rc = sqlite3.Xsqlite3_bind_int64(tls, p, i, int64(v))
	case int32:
		rc = sqlite3.Xsqlite3_bind_int64(tls, p, i, int64(v))
	case bool:
		rc = sqlite3.Xsqlite3_bind_int64(tls, p, i, int64(boolInt(v)))
	case float64:
		rc = sqlite3.Xsqlite3_bind_double(tls, p, i, v)
	case string:
		rc = s.bindText(i, v)
	case []byte:
		rc = s.bindBlob(i, v)
	case sql.NullInt64:
		if !v.Valid {
			rc = sqlite3.Xsqlite3_bind_null(tls, p, i)
		} else {
			rc = sqlite3.Xsqlite3_bind_int64(tls, p, i, v.Int64)
		}
	case sql.NullString:
		if !v.Valid {
			rc = sqlite3.Xsqlite3_bind_null(tls, p, i)
		} else {
			rc = s.bindText(i, v.String)
		}
	default:
		// A named kind (a string type, json.RawMessage, …), as database/sql
		// converts it.
		switch v := reflect.ValueOf(a); v.Kind() {
		case reflect.String:
			rc = s.bindText(i, v.String())
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			rc = sqlite3.Xsqlite3_bind_int64(tls, p, i, v.Int())
		case reflect.Uint8, reflect.Uint16, reflect.Uint32:
			rc = sqlite3.Xsqlite3_bind_int64(tls, p, i, int64(v.Uint()))
		case reflect.Bool:
			rc = sqlite3.Xsqlite3_bind_int64(tls, p, i, int64(boolInt(v.Bool())))
		case reflect.Slice:
			if v.Type().Elem().Kind() != reflect.Uint8 {
				return fmt.Errorf("sqlite: argument %d: unsupported type", i)
			}
			rc = s.bindBlob(i, v.Bytes())
		default:
			return fmt.Errorf("sqlite: argument %d: unsupported type", i)
		}
	}
	if rc != sqlite3.SQLITE_OK {
		return s.c.errstr(rc)
	}
	return nil
}

// bindText binds text v: its bytes are copied into C memory (a Go
// address may move, a goroutine stack's when it grows), from which SQLite
// copies them during the call (SQLITE_TRANSIENT).
func (s *wstmt) bindText(i int32, v string) int32 {
	p, rc := s.c.grow(len(v))
	if rc != sqlite3.SQLITE_OK {
		return rc
	}
	copy(cbytes(p, len(v)), v)
	if rc != sqlite3.SQLITE_OK {
		return rc
	}
	return sqlite3.Xsqlite3_bind_text(s.c.tls, s.p, i, p, int32(len(v)), sqlite3.SQLITE_TRANSIENT)
}

// bindBlob binds blob v as bindText binds text (nil is an empty blob).
func (s *wstmt) bindBlob(i int32, v []byte) int32 {
	p, rc := s.c.grow(len(v))
	if rc != sqlite3.SQLITE_OK {
		return rc
	}
	copy(cbytes(p, len(v)), v)
	if rc != sqlite3.SQLITE_OK {
		return rc
	}
	return sqlite3.Xsqlite3_bind_blob(s.c.tls, s.p, i, p, int32(len(v)), sqlite3.SQLITE_TRANSIENT)
}

// grow makes the connection's C buffer hold at least n bytes and returns
// its address.
func (c *rawConn) grow(size int) (uintptr, int32) {
	if size > math.MaxInt32-1 {
		return 0, sqlite3.SQLITE_TOOBIG
	}
	if size+1 > c.scratchLen {
		n := max(256, 2*c.scratchLen, size+1)
		p := libc.Xrealloc(c.tls, c.scratch, types.Size_t(n))
		if p == 0 {
			return 0, sqlite3.SQLITE_NOMEM
		}
		c.scratch, c.scratchLen = p, n
	}
	return c.scratch, sqlite3.SQLITE_OK
}

// free frees the connection's C buffer.
func (c *rawConn) free() {
	if c.scratch != 0 {
		libc.Xfree(c.tls, c.scratch)
		c.scratch, c.scratchLen = 0, 0
	}
}

// reset ends a run of the statement: its rows and bindings are dropped.
func (s *wstmt) reset() {
	if !s.busy {
		return
	}
	s.busy = false
	sqlite3.Xsqlite3_reset(s.c.tls, s.p)
	sqlite3.Xsqlite3_clear_bindings(s.c.tls, s.p)
}

// finalize frees the statement.
func (s *wstmt) finalize() {
	if s.p != 0 {
		sqlite3.Xsqlite3_finalize(s.c.tls, s.p)
		s.p = 0
	}
}

// step runs the statement one row further: true with a row, false when
// done.
func (s *wstmt) step() (bool, error) {
	s.busy = true
	switch rc := sqlite3.Xsqlite3_step(s.c.tls, s.p); rc {
	case sqlite3.SQLITE_ROW:
		return true, nil
	case sqlite3.SQLITE_DONE:
		return false, nil
	default:
		return false, s.c.errstr(rc)
	}
}

// exec runs the statement to its end (a RETURNING clause's rows are
// dropped) and returns the number of rows it changed.
func (s *wstmt) exec(args []any) (int64, error) {
	s.gen++
	defer s.reset()
	if err := s.bind(args); err != nil {
		return 0, err
	}
	for {
		more, err := s.step()
		if err != nil {
			return 0, err
		}
		if !more {
			return sqlite3.Xsqlite3_changes64(s.c.tls, s.c.db), nil
		}
	}
}

// column stores column i of the current row in dest, as database/sql's
// Scan would for the kinds of destination the store reads into.
func (s *wstmt) column(i int, dest any) error {
	tls, p := s.c.tls, s.p
	ct := sqlite3.Xsqlite3_column_type(tls, p, int32(i))
	switch d := dest.(type) {
	case *int64:
		if ct != sqlite3.SQLITE_INTEGER {
			return s.convert(i, ct, hide(dest))
		}
		*d = sqlite3.Xsqlite3_column_int64(tls, p, int32(i))
	case *int:
		if ct != sqlite3.SQLITE_INTEGER {
			return s.convert(i, ct, hide(dest))
		}
		*d = int(sqlite3.Xsqlite3_column_int64(tls, p, int32(i)))
	case *float64:
		switch ct {
		case sqlite3.SQLITE_FLOAT:
			*d = sqlite3.Xsqlite3_column_double(tls, p, int32(i))
		case sqlite3.SQLITE_INTEGER:
			*d = float64(sqlite3.Xsqlite3_column_int64(tls, p, int32(i)))
		default:
			return s.convert(i, ct, hide(dest))
		}
	case *bool:
		if ct != sqlite3.SQLITE_INTEGER {
			return s.convert(i, ct, hide(dest))
		}
		*d = sqlite3.Xsqlite3_column_int64(tls, p, int32(i)) != 0
	case *string:
		switch ct {
		case sqlite3.SQLITE_TEXT, sqlite3.SQLITE_BLOB:
			*d = s.text(i)
		case sqlite3.SQLITE_INTEGER:
			*d = strconv.FormatInt(sqlite3.Xsqlite3_column_int64(tls, p, int32(i)), 10)
		default:
			return s.convert(i, ct, hide(dest))
		}
	case *[]byte:
		switch ct {
		case sqlite3.SQLITE_NULL:
			*d = nil
		case sqlite3.SQLITE_TEXT, sqlite3.SQLITE_BLOB:
			*d = s.blob(i)
		default:
			return s.convert(i, ct, hide(dest))
		}
	case *sql.NullInt64:
		switch ct {
		case sqlite3.SQLITE_NULL:
			*d = sql.NullInt64{}
		case sqlite3.SQLITE_INTEGER:
			*d = sql.NullInt64{Int64: sqlite3.Xsqlite3_column_int64(tls, p, int32(i)), Valid: true}
		default:
			return s.convert(i, ct, hide(dest))
		}
	case *sql.NullString:
		switch ct {
		case sqlite3.SQLITE_NULL:
			*d = sql.NullString{}
		case sqlite3.SQLITE_TEXT, sqlite3.SQLITE_BLOB:
			*d = sql.NullString{String: s.text(i), Valid: true}
		default:
			return s.convert(i, ct, hide(dest))
		}
	default:
		return s.convert(i, ct, hide(dest))
	}
	return nil
}

// hide returns x with its origin hidden from escape analysis, so that the
// destinations of a Scan (and the arguments of a statement) can stay on
// their caller's stack although the rare conversions (convertValue:
// reflection, sql.Scanner; readArgs: reflection) would let them escape.
// It is sound because those keep no reference to x once they return
// (readArgs copies what it reads; a sql.Scanner keeping its receiver
// would be a bug of its own).
func hide(x any) any {
	p := uintptr(unsafe.Pointer(&x))                       //nolint:gosec // G103: see above
	return *(*any)(*(*unsafe.Pointer)(unsafe.Pointer(&p))) //nolint:gosec // G103: see above
}

// convert is the uncommon case of column: the value goes through
// database/sql's own conversion (sql.Scanner, other kinds of destination).
func (s *wstmt) convert(i int, ct int32, dest any) error {
	var v any
	switch ct {
	case sqlite3.SQLITE_INTEGER:
		v = sqlite3.Xsqlite3_column_int64(s.c.tls, s.p, int32(i))
	case sqlite3.SQLITE_FLOAT:
		v = sqlite3.Xsqlite3_column_double(s.c.tls, s.p, int32(i))
	case sqlite3.SQLITE_TEXT:
		v = s.text(i)
	case sqlite3.SQLITE_BLOB:
		v = s.blob(i)
	}
	return convertValue(i, v, dest)
}

// text reads column i as a string (see last).
func (s *wstmt) text(i int) string {
	p := sqlite3.Xsqlite3_column_text(s.c.tls, s.p, int32(i))
	n := int(sqlite3.Xsqlite3_column_bytes(s.c.tls, s.p, int32(i)))
	if p == 0 || n == 0 {
		return ""
	}
	c := cbytes(p, n)
	if last := s.last[i]; last == string(c) {
		return last
	}
	v := string(c)
	if n <= maxInterned {
		s.last[i] = v
	}
	return v
}

// blob reads column i as a fresh byte slice (nil when empty, as the
// driver reads it).
func (s *wstmt) blob(i int) []byte {
	p := sqlite3.Xsqlite3_column_blob(s.c.tls, s.p, int32(i))
	n := int(sqlite3.Xsqlite3_column_bytes(s.c.tls, s.p, int32(i)))
	if p == 0 || n == 0 {
		return nil
	}
	b := make([]byte, n)
	copy(b, cbytes(p, n))
	return b
}

// convertValue stores a column's value v (nil, int64, float64, string or
// []byte) in dest: every value the read path reads (database/sql reads it
// into an any), and the writer's values that column does not read
// directly.
func convertValue(i int, v any, dest any) error {
	switch d := dest.(type) {
	case *any:
		*d = v
		return nil
	case *int64:
		if x, ok := v.(int64); ok {
			*d = x
			return nil
		}
	case *int:
		if x, ok := v.(int64); ok {
			*d = int(x)
			return nil
		}
	case *bool:
		if x, ok := v.(int64); ok {
			*d = x != 0
			return nil
		}
	case *float64:
		switch x := v.(type) {
		case float64:
			*d = x
			return nil
		case int64:
			*d = float64(x)
			return nil
		}
	case *string:
		switch x := v.(type) {
		case string:
			*d = x
			return nil
		case []byte:
			*d = string(x)
			return nil
		case int64:
			*d = strconv.FormatInt(x, 10)
			return nil
		}
	case *[]byte:
		switch x := v.(type) {
		case nil:
			*d = nil
			return nil
		case []byte:
			*d = x
			return nil
		case string:
			*d = []byte(x)
			return nil
		}
	}
	if sc, ok := dest.(sql.Scanner); ok {
		return sc.Scan(v)
	}
	switch d := dest.(type) {
	case *int64, *int, *bool:
		if s, ok := v.(string); ok {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return fmt.Errorf("sql: Scan error on column index %d: converting %q: %w", i, s, err)
			}
			switch d := d.(type) {
			case *int64:
				*d = n
			case *int:
				*d = int(n)
			case *bool:
				*d = n != 0
			}
			return nil
		}
	}
	// A named kind ([]byte as json.RawMessage, a string type, an integer
	// type), as database/sql converts through reflection.
	if dv := reflect.ValueOf(dest); dv.Kind() == reflect.Pointer && !dv.IsNil() {
		e := dv.Elem()
		switch x := v.(type) {
		case []byte:
			switch {
			case e.Kind() == reflect.Slice && e.Type().Elem().Kind() == reflect.Uint8:
				e.SetBytes(x)
				return nil
			case e.Kind() == reflect.String:
				e.SetString(string(x))
				return nil
			}
		case string:
			switch {
			case e.Kind() == reflect.String:
				e.SetString(x)
				return nil
			case e.Kind() == reflect.Slice && e.Type().Elem().Kind() == reflect.Uint8:
				e.SetBytes([]byte(x))
				return nil
			}
		case int64:
			switch e.Kind() {
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
				if !e.OverflowInt(x) {
					e.SetInt(x)
					return nil
				}
			}
		case nil:
			if e.Kind() == reflect.Slice {
				e.SetZero()
				return nil
			}
		}
	}
	return fmt.Errorf("sql: Scan error on column index %d: cannot store %T into %T", i, v, dest)
}

// rows is the result of dbq.query: the rows of a writer's statement, or of
// a read transaction (database/sql). It is a value, so that it costs no
// allocation; rows of a statement that ran again since are closed.
type rows struct {
	st     *wstmt
	gen    uint64 // the statement's run these rows are of
	sr     *sql.Rows
	vals   []any // the read path: a row's values, then converted
	err    error
	closed bool
}

// done reports whether the rows of a writer's statement are closed.
func (r *rows) done() bool { return r.closed || r.gen != r.st.gen }

// Next advances to the next row; false at the end or on an error (Err).
func (r *rows) Next() bool {
	if r.sr != nil {
		return r.sr.Next()
	}
	if r.done() {
		return false
	}
	more, err := r.st.step()
	if err != nil || !more {
		r.err = err
		_ = r.Close()
		return false
	}
	return true
}

// Scan copies the current row's columns into dest.
func (r *rows) Scan(dest ...any) error {
	if r.sr != nil {
		return r.scanRead(dest)
	}
	if r.done() {
		return errors.New("sql: Rows are closed")
	}
	if len(dest) != r.st.ncol {
		return fmt.Errorf("sql: expected %d destination arguments in Scan, not %d", r.st.ncol, len(dest))
	}
	for i, d := range dest {
		if err := r.st.column(i, d); err != nil {
			return err
		}
	}
	return nil
}

// scanRead is Scan on the read path: database/sql reads the values,
// which then go through the writer's conversions (dest does not escape).
func (r *rows) scanRead(dest []any) error {
	if len(r.vals) != len(dest) {
		r.vals = make([]any, len(dest))
	}
	ptrs := make([]any, len(dest))
	for i := range r.vals {
		ptrs[i] = &r.vals[i]
	}
	if err := r.sr.Scan(ptrs...); err != nil {
		return err
	}
	for i, d := range dest {
		if err := convertValue(i, r.vals[i], hide(d)); err != nil {
			return err
		}
	}
	return nil
}

// Err is the error that ended Next, if any.
func (r *rows) Err() error {
	if r.sr != nil {
		return r.sr.Err()
	}
	return r.err
}

// Close ends the rows (and resets the statement).
func (r *rows) Close() error {
	if r.sr != nil {
		return r.sr.Close()
	}
	if !r.done() {
		r.closed = true
		r.st.reset()
		if !r.st.cached {
			r.st.finalize()
		}
	}
	return nil
}

// row is the result of dbq.row: at most one row, read by Scan.
type row struct {
	r   rows
	err error
}

// Scan reads the first row into dest and closes; sql.ErrNoRows when there
// is none.
func (w row) Scan(dest ...any) error {
	if w.err != nil {
		return w.err
	}
	defer w.r.Close()
	if !w.r.Next() {
		if err := w.r.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	return w.r.Scan(dest...)
}
