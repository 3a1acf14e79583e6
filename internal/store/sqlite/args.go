package sqlite

// The drain's statements (receive and ack) bind a few integers per
// message: row ids, story ids, nonces. Passed as int64 values in an any,
// each of them outside 0-255 costs an allocation (the value is boxed);
// passed as a pointer to an int64 that stays put, none. argList holds
// the integers of one statement in a buffer the writer reuses, and hands
// the statement pointers into it, which bind reads through (wconn.go,
// readArgs). Together with statement texts built once per size
// (sizedSQL), a drained message costs about ten allocations fewer.

// argList builds the arguments of one statement. Use it through
// dbq.argList: its values are valid until the next call of that.
type argList struct {
	ints []int64
	args []any
}

// reset empties the list, with room for n integers.
func (a *argList) reset(n int) *argList {
	if cap(a.ints) < n {
		a.ints = make([]int64, 0, n)
	}
	a.ints = a.ints[:0]
	clear(a.args)
	a.args = a.args[:0]
	return a
}

// int appends an integer argument. An append that outgrows ints leaves
// the earlier pointers in the old array, which keeps their values.
func (a *argList) int(v int64) {
	a.ints = append(a.ints, v)
	a.args = append(a.args, &a.ints[len(a.ints)-1])
}

// str appends a text argument through a pointer that outlives the
// statement (a field of the caller's parameters).
func (a *argList) str(s *string) { a.args = append(a.args, s) }

// argList returns the writer's reused list (a fresh one off the writer),
// empty, with room for n integers.
func (d *dbq) argList(n int) *argList {
	if d.stmts == nil {
		return new(argList).reset(n)
	}
	return d.stmts.args.reset(n)
}

// sizedSQL is a statement text that depends on how many items it takes
// (its placeholders), built once for each size up to sizedSQLMemo (a
// receive or an ack of up to 10, as the drain does) and on each call for
// larger ones.
type sizedSQL struct {
	build func(n int) string
	memo  [sizedSQLMemo + 1]string
}

const sizedSQLMemo = 16

func newSizedSQL(build func(n int) string) *sizedSQL {
	s := &sizedSQL{build: build}
	for n := 1; n <= sizedSQLMemo; n++ {
		s.memo[n] = build(n)
	}
	return s
}

// text is the statement for n items.
func (s *sizedSQL) text(n int) string {
	if n >= 1 && n <= sizedSQLMemo {
		return s.memo[n]
	}
	return s.build(n)
}
