package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// Group commit settings.
const (
	// maxBatch bounds how many operations share one transaction.
	maxBatch = 256
	// maxCollect bounds how long the writer keeps collecting a batch while
	// operations keep arriving. The writer never waits on an empty queue:
	// operations that arrive while a batch commits (its fsync) make the next
	// batch, so batches grow with load and a lone operation pays no delay.
	maxCollect = time.Millisecond
	// maxAttempts bounds how often an operation is run again when a batch
	// it was in had to be abandoned because of another operation.
	maxAttempts = 3
	// checkpointEvery is how often the writer looks at the size of the WAL.
	checkpointEvery = 5 * time.Second
	// walTruncateBytes: past this size the writer runs
	// wal_checkpoint(TRUNCATE). SQLite's automatic checkpoint (every 1000
	// pages) is PASSIVE: with readers always active it may never reach the
	// end of the WAL, and the WAL file would then grow without bound.
	walTruncateBytes = 64 << 20
)

// errClosed is returned to operations submitted after Close.
var errClosed = fmt.Errorf("sqlite store is closed: %w", bus.ErrUnavailable)

// Operation states: the caller may cancel only while pending.
const (
	opPending int32 = iota
	opRunning
	opCancelled
)

// op is one write operation waiting for the writer.
type op struct {
	ctx      context.Context
	run      func(d *dbq) error
	state    atomic.Int32
	done     chan error // buffered 1: the writer never blocks on an answer
	err      error
	panicked any // a panic of run, raised again in the caller
	attempts int
}

// walPolicy says when the writer checkpoints (tests shrink it).
type walPolicy struct {
	every      time.Duration // how often to look at the WAL's size
	limitBytes int64         // truncate the WAL once it is this big
}

// defaultWAL is the production policy.
var defaultWAL = walPolicy{every: checkpointEvery, limitBytes: walTruncateBytes}

// writer owns the one write connection and commits operations in groups.
type writer struct {
	wal     walPolicy
	conn    *sql.Conn
	stmts   *stmtCache
	walPath string
	log     *slog.Logger
	ops     chan *op
	quit    chan struct{} // closed by Close
	once    sync.Once
	stopped chan struct{} // closed when the loop has returned
}

func newWriter(conn *sql.Conn, walPath string, wal walPolicy, log *slog.Logger) *writer {
	w := &writer{
		wal:     wal,
		conn:    conn,
		stmts:   newStmtCache(conn),
		walPath: walPath,
		log:     log,
		ops:     make(chan *op, maxBatch),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go w.loop()
	return w
}

// do runs fn in the writer's next transaction and waits until that
// transaction committed (nil, or fn's own error) or failed. When ctx ends
// before fn started, fn is not run and ctx's error is returned.
func (w *writer) do(ctx context.Context, fn func(d *dbq) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o := &op{ctx: ctx, run: fn, done: make(chan error, 1)}
	select {
	case <-w.quit:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	case w.ops <- o:
	}
	var err error
	select {
	case err = <-o.done:
	case <-ctx.Done():
		if o.state.CompareAndSwap(opPending, opCancelled) {
			return ctx.Err() // not run, and now never will be
		}
		err = <-o.done // already running: its outcome is the answer
	case <-w.stopped:
		select {
		case err = <-o.done: // answered just before the writer stopped
		default:
			return errClosed // queued after the final drain: never run
		}
	}
	if o.panicked != nil {
		panic(o.panicked)
	}
	return err
}

// loop is the writer goroutine.
func (w *writer) loop() {
	defer close(w.stopped)
	tick := time.NewTicker(w.wal.every)
	defer tick.Stop()
	for {
		select {
		case o := <-w.ops:
			w.commit(w.collect(o))
		case <-tick.C:
			w.maybeCheckpoint()
		case <-w.quit:
			// Finish what was submitted before Close; later submitters see
			// quit or stopped and get errClosed.
			for {
				select {
				case o := <-w.ops:
					w.commit(w.collect(o))
				default:
					w.stmts.close()
					w.checkpoint("TRUNCATE") // leave a small WAL behind
					return
				}
			}
		}
	}
}

// collect takes the operations already waiting, up to maxBatch or
// maxCollect, after first.
func (w *writer) collect(first *op) []*op {
	batch := []*op{first}
	deadline := time.Now().Add(maxCollect)
	for len(batch) < maxBatch && time.Now().Before(deadline) {
		select {
		case o := <-w.ops:
			batch = append(batch, o)
		default:
			return batch
		}
	}
	return batch
}

// commit runs a batch (again, for operations of an abandoned transaction)
// until every operation has its answer.
func (w *writer) commit(batch []*op) {
	for len(batch) > 0 {
		batch = w.runBatch(batch)
	}
}

// runBatch runs the batch's operations in one BEGIN IMMEDIATE transaction,
// each in its own savepoint, commits once and answers each caller. An
// operation that fails rolls back only its savepoint. It returns the
// operations to run again when the transaction itself was lost.
func (w *writer) runBatch(batch []*op) (again []*op) {
	ctx := context.Background() // callers' contexts never interrupt a shared transaction
	live := batch[:0:0]
	for _, o := range batch {
		switch {
		case o.state.Load() == opRunning: // a retry of an abandoned batch
			live = append(live, o)
		case o.ctx.Err() != nil:
			if o.state.CompareAndSwap(opPending, opCancelled) {
				o.done <- o.ctx.Err()
			}
		case o.state.CompareAndSwap(opPending, opRunning):
			live = append(live, o)
		}
		// else: the caller cancelled; nobody waits for an answer.
	}
	if len(live) == 0 {
		return nil
	}
	if _, err := w.exec(ctx, "BEGIN IMMEDIATE"); err != nil {
		w.answerAll(live, fmt.Errorf("begin: %w", interpretError(err)))
		return nil
	}
	d := &dbq{ctx: ctx, q: w.conn, stmts: w.stmts}
	for i, o := range live {
		o.attempts++
		if _, err := w.exec(ctx, "SAVEPOINT op"); err != nil {
			return w.abandon(live, i, fmt.Errorf("savepoint: %w", interpretError(err)))
		}
		o.panicked, o.err = runOp(o, d)
		if o.err == nil {
			if _, err := w.exec(ctx, "RELEASE op"); err != nil {
				return w.abandon(live, i, fmt.Errorf("release savepoint: %w", interpretError(err)))
			}
			continue
		}
		// Undo this operation only. If even that fails, SQLite has rolled
		// the whole transaction back (disk full, I/O error, …).
		if _, err := w.exec(ctx, "ROLLBACK TO op"); err != nil {
			return w.abandon(live, i, o.err)
		}
		if _, err := w.exec(ctx, "RELEASE op"); err != nil {
			return w.abandon(live, i, o.err)
		}
	}
	if _, err := w.exec(ctx, "COMMIT"); err != nil {
		_, _ = w.conn.ExecContext(ctx, "ROLLBACK")
		w.answerAll(live, fmt.Errorf("commit: %w", interpretError(err)))
		return nil
	}
	for _, o := range live {
		o.done <- o.err
	}
	return nil
}

// abandon ends a transaction that cannot go on because of live[culprit]:
// that operation gets err, the others run again in a new transaction (their
// work was rolled back with the transaction; Update allows a rerun).
func (w *writer) abandon(live []*op, culprit int, err error) []*op {
	_, _ = w.conn.ExecContext(context.Background(), "ROLLBACK") // may fail: already rolled back
	w.log.Warn("sqlite write transaction abandoned", slog.Int("batch", len(live)), slog.Any("error", err))
	live[culprit].done <- err
	var again []*op
	for i, o := range live {
		if i == culprit {
			continue
		}
		if o.attempts >= maxAttempts {
			o.done <- fmt.Errorf("write transaction abandoned %d times: %w", o.attempts, err)
			continue
		}
		o.panicked, o.err = nil, nil
		again = append(again, o)
	}
	return again
}

func (w *writer) answerAll(ops []*op, err error) {
	for _, o := range ops {
		o.panicked = nil
		o.done <- err
	}
}

// runOp runs one operation, turning a panic into an error for the
// savepoint's sake and keeping the value to raise it in the caller.
func runOp(o *op, d *dbq) (panicked any, err error) {
	defer func() {
		if r := recover(); r != nil {
			panicked, err = r, fmt.Errorf("panic in write operation: %v", r)
		}
	}()
	return nil, o.run(d)
}

// exec runs a statement of the transaction's frame through the cache.
func (w *writer) exec(ctx context.Context, query string) (sql.Result, error) {
	st, err := w.stmts.get(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx)
}

// maybeCheckpoint truncates the WAL once it grew past the policy's limit.
func (w *writer) maybeCheckpoint() {
	fi, err := os.Stat(w.walPath)
	if err != nil || fi.Size() < w.wal.limitBytes {
		return
	}
	w.checkpoint("TRUNCATE")
}

// checkpoint runs PRAGMA wal_checkpoint(mode) on the write connection.
func (w *writer) checkpoint(mode string) {
	var busy, logPages, done int
	err := w.conn.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &logPages, &done)
	if err != nil {
		w.log.Warn("sqlite wal checkpoint failed", slog.String("mode", mode), slog.Any("error", interpretError(err)))
		return
	}
	if busy != 0 {
		// Readers kept it from finishing; the next tick tries again.
		w.log.Debug("sqlite wal checkpoint incomplete", slog.String("mode", mode), slog.Int("wal_pages", logPages), slog.Int("checkpointed", done))
	}
}

// stop ends the writer after the operations already submitted.
func (w *writer) stop() {
	w.once.Do(func() { close(w.quit) })
	<-w.stopped
}
