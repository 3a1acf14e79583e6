package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
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
	// syncQueue bounds how many committed batches may wait for their fsync
	// while the writer goes on; past it the writer waits for the disk.
	syncQueue = 64
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
	// unsynced: run committed, but the caller is answered with the error
	// of the fsync that was to make it durable (or of the failed state)
	// instead of run's own outcome (set before the answer is sent).
	unsynced bool
	// st: the times of its way through the writer, when it was handed to
	// the writer while RecordStages records (else nil). Each is set before
	// the hand-off after it; the caller reads them once answered.
	st *opStamps
}

// opStamps are the times of an operation's way through the writer, for
// the recording log.
type opStamps struct {
	log                                             *stageLog
	queued, ran, commit, committed, syncing, synced time.Time
}

// Stages are the average times that write operations spent in each
// stretch of the writer's pipeline, recorded between RecordStages and the
// function it returns. Only the operations answered with their own
// success after an fsync of the WAL count: not those answered at the
// commit (synchronous=normal), nor those of a group that wrote nothing
// (no fsync), nor those answered with an error. Benchmarks report them
// (SOMBUS_BENCH_STAGES, docs/benchmarks.md).
type Stages struct {
	Ops      int           // operations recorded
	Queued   time.Duration // handed to the writer → the writer runs it (its last attempt)
	Open     time.Duration // run → its group's COMMIT begins
	Commit   time.Duration // the COMMIT
	Handover time.Duration // committed → the syncer begins the fsync
	Sync     time.Duration // the fsync of the WAL
	Answer   time.Duration // fsync done → the caller has its answer
}

// stageLog sums what RecordStages records.
type stageLog struct {
	mu  sync.Mutex
	n   int
	sum [6]time.Duration
}

// stageRec is the recording under way, nil when none.
var stageRec atomic.Pointer[stageLog]

// RecordStages starts recording Stages for the writes of every store of
// the process, ending any recording under way; the result ends this
// recording and returns what it holds (again at each call). An operation
// is recorded when it was handed to the writer after the start and
// answered before the end.
func RecordStages() (stop func() Stages) {
	r := &stageLog{}
	stageRec.Store(r)
	return func() Stages {
		stageRec.CompareAndSwap(r, nil)
		r.mu.Lock()
		defer r.mu.Unlock()
		st := Stages{Ops: r.n}
		if r.n > 0 {
			n := time.Duration(r.n)
			st.Queued, st.Open, st.Commit = r.sum[0]/n, r.sum[1]/n, r.sum[2]/n
			st.Handover, st.Sync, st.Answer = r.sum[3]/n, r.sum[4]/n, r.sum[5]/n
		}
		return st
	}
}

// record adds the stretches of st, answered at answered.
func (r *stageLog) record(st *opStamps, answered time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	r.sum[0] += st.ran.Sub(st.queued)
	r.sum[1] += st.commit.Sub(st.ran)
	r.sum[2] += st.committed.Sub(st.commit)
	r.sum[3] += st.syncing.Sub(st.committed)
	r.sum[4] += st.synced.Sub(st.syncing)
	r.sum[5] += answered.Sub(st.synced)
}

// stamp sets the time that at picks of each stamped operation of ops to
// now, or to the current time (read once, only when an operation is
// stamped) when now is zero; it returns the time it set, if any.
func stamp(ops []*op, now time.Time, at func(st *opStamps) *time.Time) time.Time {
	for _, o := range ops {
		if o.st != nil {
			if now.IsZero() {
				now = time.Now()
			}
			*at(o.st) = now
		}
	}
	return now
}

// walPolicy says when the writer checkpoints (tests shrink it).
type walPolicy struct {
	every      time.Duration // how often to look at the WAL's size
	limitBytes int64         // truncate the WAL once it is this big
}

// defaultWAL is the production policy.
var defaultWAL = walPolicy{every: checkpointEvery, limitBytes: walTruncateBytes}

// writer owns the one write connection and commits operations in groups.
//
// Durability (syncCommits): the connection runs with PRAGMA
// synchronous=NORMAL, so COMMIT writes the WAL frames without an fsync; the
// writer then hands the committed batch to the syncer goroutine, which
// fsyncs the WAL and only then answers the batch's callers. While the
// syncer waits on the disk, the writer already runs the next batch: commits
// are pipelined instead of holding the write connection through every
// fsync. An answered write is as durable as under synchronous=FULL: its
// commit frame was written before the fsync began. What differs is
// visibility: a commit is visible to other transactions (the next batch,
// the read pool) up to one fsync before it is durable. A writer's answer
// never depends on it early (batches are answered in commit order, each
// after an fsync that covers every earlier commit); a read of the read pool
// may, for that one fsync's time, show a write whose caller has not been
// answered yet and that a power loss would undo.
type writer struct {
	wal   walPolicy
	conn  *sql.Conn
	stmts *stmtCache
	heads *heads    // the in-memory index of story heads (heads.go)
	acked ackedRows // acknowledged rows waiting to be deleted (acked.go)
	// bigCache: the page cache was raised to 64 MiB (maybeGrowCache).
	bigCache bool
	// bigWAL: checkpoints come every bigWALPages (maybeGrowCache).
	bigWAL  bool
	walPath string
	log     *slog.Logger
	ops     chan *op
	quit    chan struct{} // closed by Close
	once    sync.Once
	stopped chan struct{} // closed when the loop and the syncer have returned

	syncCommits bool            // fsync the WAL before answering a commit
	synced      chan *committed // committed batches waiting for their fsync
	inflight    atomic.Int64    // batches sent to synced and not yet answered
	syncIdle    chan struct{}   // (1) a token after the syncer answered a group
	syncerDone  chan struct{}   // closed when the syncer has returned
	changes     int64           // total_changes() after the last commit
	commits     atomic.Int64    // transactions committed (benchmarks read it)

	// syncFile fsyncs the file at a path; nil is fsyncFile (tests put a
	// failing one in its place).
	syncFile atomic.Pointer[func(path string) error]
	// failed is set, once and for good, by the first failed fsync of the
	// WAL; from then on every write is refused with it (see fail).
	failed atomic.Pointer[error]

	// busy counts the calls of doOr under way and the goroutines of
	// goLate; once closing is set (by stop), doOr refuses every caller but
	// those goroutines' (lateContext), and stop waits until busy is zero
	// (idle) before the writer takes no more operations. All under busyMu.
	busyMu  sync.Mutex
	busy    int
	closing bool
	idle    *sync.Cond
}

// committed is a committed batch whose callers wait for the WAL's fsync.
type committed struct {
	ops   []*op
	wrote bool // the batch changed rows (else there is nothing to sync)
}

func newWriter(conn *sql.Conn, raw *rawConn, walPath string, wal walPolicy, syncCommits bool, log *slog.Logger) *writer {
	w := &writer{
		wal:         wal,
		conn:        conn,
		stmts:       newStmtCache(raw),
		heads:       newHeads(),
		walPath:     walPath,
		log:         log,
		ops:         make(chan *op, maxBatch),
		quit:        make(chan struct{}),
		stopped:     make(chan struct{}),
		syncCommits: syncCommits,
		synced:      make(chan *committed, syncQueue),
		syncIdle:    make(chan struct{}, 1),
		syncerDone:  make(chan struct{}),
	}
	w.idle = sync.NewCond(&w.busyMu)
	w.heads.snaps.load = w.loadQueue
	w.maybeGrowCache()
	// Ack records left in ack_log count toward the next move, so that
	// restarts do not let the log (which a re-ack scans) grow past it.
	_ = conn.QueryRowContext(context.Background(), "SELECT count(*) FROM ack_log").Scan(&w.acked.logged)
	go w.syncer()
	go w.loop()
	return w
}

// do runs fn in the writer's next transaction and waits until that
// transaction committed (nil, or fn's own error) or failed. When ctx ends
// before fn started, fn is not run and ctx's error is returned.
func (w *writer) do(ctx context.Context, fn func(d *dbq) error) error {
	return w.doOr(ctx, fn, nil)
}

// doOr is do, with late run once fn's outcome is known (its error) when
// the caller was answered before it: a caller past the node's deadline
// (bus.TimedOut) is not held by a write that waits for a disk that does not
// answer, and late undoes what the write did for it (a receive gives back
// what it claimed). A panic of fn is then logged, as nobody raises it.
// late also runs, with nil, beside a caller answered with the error of an
// fsync that could not be made (the WAL would not open) although fn
// committed: the caller tries again, and what fn did for it is undone.
func (w *writer) doOr(ctx context.Context, fn func(d *dbq) error, late func(err error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !w.enter(ctx) {
		return errClosed
	}
	defer w.leave()
	if err := w.failure(); err != nil {
		return err
	}
	o := &op{ctx: ctx, run: fn, done: make(chan error, 1)}
	if r := stageRec.Load(); r != nil {
		o.st = &opStamps{log: r, queued: time.Now()}
	}
	select {
	case <-w.quit: // a safeguard: stop waits for this call before closing quit
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
		if bus.TimedOut(ctx) {
			// Already running, or committed and waiting for its fsync, past
			// the node's time for the request (a disk that does not answer):
			// the caller is told to try again (publishes and acks are
			// idempotent), and late deals with the outcome when it comes.
			w.goLate(func() {
				err := <-o.done
				if o.panicked != nil {
					w.log.Error("sqlite: a write whose caller had timed out panicked", slog.Any("panic", o.panicked))
					return
				}
				if o.unsynced {
					err = nil // fn's own outcome: committed
				}
				if late != nil && (err != nil || w.failure() == nil) {
					late(err)
				}
			})
			return fmt.Errorf("sqlite: the write did not finish in time: %w", context.Cause(ctx))
		}
		err = <-o.done // already running: its outcome is the answer
	case <-w.stopped:
		// A safeguard, as for quit above: the writer does not stop while
		// this call is counted.
		select {
		case err = <-o.done:
		default:
			return errClosed
		}
	}
	if o.panicked != nil {
		panic(o.panicked)
	}
	if o.st != nil && err == nil && !o.st.synced.IsZero() && stageRec.Load() == o.st.log {
		o.st.log.record(o.st, time.Now())
	}
	if o.unsynced && late != nil && w.failure() == nil {
		// Committed, and answered with the error of its fsync: undone
		// beside, as for a caller that timed out. (In the failed state
		// the store takes no write that could undo it.)
		w.goLate(func() { late(nil) })
	}
	return err
}

// lateKey marks the context of a write made by a goroutine of goLate.
type lateKey struct{}

// lateContext is the context for the writes of a goroutine of goLate:
// they are taken while the store closes, as stop waits for them.
func lateContext() context.Context {
	return context.WithValue(context.Background(), lateKey{}, true)
}

// enter counts a call of doOr, unless the store is closing and ctx is not
// a lateContext.
func (w *writer) enter(ctx context.Context) bool {
	w.busyMu.Lock()
	defer w.busyMu.Unlock()
	if w.closing && ctx.Value(lateKey{}) == nil {
		return false
	}
	w.busy++
	return true
}

// leave ends what enter or goLate counted.
func (w *writer) leave() {
	w.busyMu.Lock()
	if w.busy--; w.busy == 0 {
		w.idle.Broadcast()
	}
	w.busyMu.Unlock()
}

// goLate runs fn, which deals with the outcome of a write whose caller was
// answered before it, on a goroutine of its own; its writes take
// lateContext. It is counted before the doOr that starts it returns, and
// stop waits for it before the writer stops taking operations: what fn
// undoes (a receive's give-back is a write) is not dropped when the store
// closes meanwhile.
func (w *writer) goLate(fn func()) {
	w.busyMu.Lock()
	w.busy++
	w.busyMu.Unlock()
	go func() {
		defer w.leave()
		fn()
	}()
}

// loop is the writer goroutine.
func (w *writer) loop() {
	defer close(w.stopped)
	tick := time.NewTicker(w.wal.every)
	defer tick.Stop()
	for {
		select {
		case o := <-w.ops:
			w.group(o)
		case <-tick.C:
			w.maybeCheckpoint()
			w.maybeGrowCache()
		case <-w.quit:
			// stop closes quit once every call of doOr has its answer (and
			// later ones are refused by enter): what is left in ops is
			// operations their callers cancelled. Run what remains.
			for {
				select {
				case o := <-w.ops:
					w.group(o)
				default:
					// Every committed batch is answered before stopped is
					// closed: a caller that sees stopped without an answer
					// was never run.
					close(w.synced)
					<-w.syncerDone
					w.stmts.close()
					if w.failure() == nil {
						w.checkpoint("TRUNCATE") // leave a small WAL behind
					}
					return
				}
			}
		}
	}
}

// txn is the writer's open transaction: the operations run in it so far.
type txn struct {
	open bool
	live []*op
}

// group runs first and the operations that arrive after it in one BEGIN
// IMMEDIATE transaction, each in its own savepoint, and commits once. It
// commits when no operation is waiting and the previous commit's fsync
// has finished (or after maxCollect of steady arrivals, or at maxBatch):
// while the syncer waits on the disk, arriving operations already run in
// the open transaction, and the next commit takes them all.
func (w *writer) group(first *op) {
	var t txn
	start := time.Now()
	pending := []*op{first}
	for {
		for len(pending) > 0 {
			pending = w.run(&t, pending)
		}
		if !t.open {
			return // nothing to commit: cancelled, or BEGIN failed
		}
		if len(t.live) >= maxBatch {
			break
		}
		idle := w.inflight.Load() == 0
		if idle && time.Since(start) >= maxCollect {
			break
		}
		select {
		case o := <-w.ops:
			pending = append(pending, o)
			continue
		default:
		}
		if idle {
			break
		}
		select {
		case o := <-w.ops:
			pending = append(pending, o)
		case <-w.syncIdle:
		}
	}
	w.commit(&t)
}

// run runs ops in t, opening it if need be. An operation that fails rolls
// back only its savepoint. When the transaction itself is lost, the
// operations it held and those not yet run are returned to run again in a
// new one.
func (w *writer) run(t *txn, ops []*op) (again []*op) {
	ctx := context.Background() // callers' contexts never interrupt a shared transaction
	for i, o := range ops {
		switch {
		case o.state.Load() == opRunning: // a retry of an abandoned transaction
		case o.ctx.Err() != nil:
			if o.state.CompareAndSwap(opPending, opCancelled) {
				o.done <- o.ctx.Err()
			}
			continue
		case !o.state.CompareAndSwap(opPending, opRunning):
			continue // the caller cancelled; nobody waits for an answer
		}
		if !t.open {
			err := w.failure()
			if err == nil {
				if _, err = w.exec(ctx, "BEGIN IMMEDIATE"); err != nil {
					err = fmt.Errorf("begin: %w", interpretError(err))
				}
			}
			if err != nil {
				for _, o := range ops[i:] {
					if o.state.Load() == opRunning || o.state.CompareAndSwap(opPending, opRunning) {
						o.panicked = nil
						o.done <- err
					}
				}
				return nil
			}
			t.open = true
		}
		o.attempts++
		if o.st != nil {
			o.st.ran = time.Now()
		}
		if err := w.runOne(ctx, o); err != nil {
			return w.abandon(t, o, err, ops[i+1:])
		}
		t.live = append(t.live, o)
	}
	return nil
}

// runOne runs o in its own savepoint of the open transaction. A non-nil
// result means the transaction is lost (o.err is o's own outcome).
func (w *writer) runOne(ctx context.Context, o *op) error {
	if _, err := w.exec(ctx, "SAVEPOINT op"); err != nil {
		return fmt.Errorf("savepoint: %w", interpretError(err))
	}
	before := w.heads.changes
	o.panicked, o.err = runOp(o, &dbq{ctx: ctx, q: w.conn, stmts: w.stmts, heads: w.heads, acked: &w.acked})
	w.stmts.settle()
	if o.err != nil && w.heads.changes != before {
		// The savepoint's rollback undoes what o wrote; the index cannot
		// undo o's changes, so it loads again from the tables.
		w.heads.reset()
	}
	if o.err == nil {
		if _, err := w.exec(ctx, "RELEASE op"); err != nil {
			return fmt.Errorf("release savepoint: %w", interpretError(err))
		}
		return nil
	}
	// Undo this operation only. If even that fails, SQLite has rolled
	// the whole transaction back (disk full, I/O error, …).
	if _, err := w.exec(ctx, "ROLLBACK TO op"); err != nil {
		return o.err
	}
	if _, err := w.exec(ctx, "RELEASE op"); err != nil {
		return o.err
	}
	return nil
}

// commit commits t and answers its operations; after a failed fsync it
// rolls t back instead.
func (w *writer) commit(t *txn) {
	if err := w.failure(); err != nil {
		_, _ = w.conn.ExecContext(context.Background(), "ROLLBACK")
		w.heads.reset()
		w.answerAll(t.live, err)
		return
	}
	w.heads.commitBegins()
	stamp(t.live, time.Time{}, func(st *opStamps) *time.Time { return &st.commit })
	if _, err := w.exec(context.Background(), "COMMIT"); err != nil {
		_, _ = w.conn.ExecContext(context.Background(), "ROLLBACK")
		w.heads.reset()
		w.heads.commitEnds()
		w.answerAll(t.live, fmt.Errorf("commit: %w", interpretError(err)))
		return
	}
	stamp(t.live, time.Time{}, func(st *opStamps) *time.Time { return &st.committed })
	w.heads.publish()
	w.heads.commitEnds()
	w.commits.Add(1)
	w.committed(t.live)
}

// committed answers the callers of a committed batch: at once without
// syncCommits, else through the syncer once the WAL is on disk.
func (w *writer) committed(live []*op) {
	if !w.syncCommits {
		for _, o := range live {
			o.done <- o.err
		}
		return
	}
	// A batch that changed no row (receives of an empty queue, reads)
	// wrote no WAL frame: it needs no fsync of its own, but is answered
	// after the batches before it, whose writes it may have read.
	n := w.stmts.conn.totalChanges()
	wrote := n != w.changes
	w.changes = n
	idle := w.inflight.Add(1) == 1
	w.synced <- &committed{ops: live, wrote: wrote}
	if idle && wrote {
		// The send readied the syncer, waiting on the channel, on this
		// thread, after the writer: until the writer blocked, the disk sat
		// idle while the callers of this batch waited for its fsync
		// (95 us on average in a trace of BenchmarkDrain, the writer
		// running the next operations meanwhile). Yield, so that the
		// fsync starts now; the writer goes on once a core is free.
		runtime.Gosched()
	}
}

// syncer answers committed batches in commit order, after an fsync of the
// WAL that began after their commit. One fsync covers every batch that
// committed while the previous one ran.
func (w *writer) syncer() {
	defer close(w.syncerDone)
	for c := range w.synced {
		group := []*committed{c}
	more:
		for {
			select {
			case c, ok := <-w.synced:
				if !ok {
					break more
				}
				group = append(group, c)
			default:
				break more
			}
		}
		wrote := false
		for _, c := range group {
			wrote = wrote || c.wrote
		}
		var err error
		if wrote {
			// The stamps of Stages: only a group that is synced has them.
			var at time.Time
			for _, c := range group {
				at = stamp(c.ops, at, func(st *opStamps) *time.Time { return &st.syncing })
			}
			err = w.syncWAL()
			at = time.Time{}
			for _, c := range group {
				at = stamp(c.ops, at, func(st *opStamps) *time.Time { return &st.synced })
			}
		}
		if err == nil {
			// After a failed fsync no later one can be trusted (the kernel
			// may have dropped the pages that failed and report success
			// next time): the batches committed since are not durable.
			err = w.failure()
		}
		for _, c := range group {
			for _, o := range c.ops {
				if err != nil && o.err == nil && o.panicked == nil {
					o.unsynced = true
					o.done <- err
					continue
				}
				o.done <- o.err
			}
		}
		// The disk is free: the writer may commit its next batch. Told
		// after the answers, not before: each answer readies a caller's
		// goroutine, and the runtime runs the goroutine readied last
		// first on this thread once the syncer waits again; that should
		// be the writer, whose commit starts the next fsync that every
		// caller still waiting depends on (with the wake-up first, the
		// callers readied after it pushed it behind them: 175-220 us from
		// this token to the writer's commit, 140-180 us after the change).
		w.inflight.Add(-int64(len(group)))
		select {
		case w.syncIdle <- struct{}{}:
		default: // a token is already there
		}
	}
}

// syncWAL fsyncs the WAL file; a failed fsync puts the writer in its
// failed state (see fail), and so does a WAL that is gone. A WAL that
// could not be opened for the fsync for want of a descriptor or memory
// (too many open files) was never synced, so the kernel dropped nothing:
// the batches it was to cover are answered unavailable (their
// callers try again: publishes and acks are idempotent; a receive gives
// back what it claimed, see doOr), and the next fsync, which covers them
// too, may well succeed.
func (w *writer) syncWAL() error {
	sync := fsyncFile
	if f := w.syncFile.Load(); f != nil {
		sync = *f
	}
	if err := sync(w.walPath); err != nil {
		if pe, ok := errors.AsType[*os.PathError](err); ok && pe.Op == "open" &&
			(errors.Is(pe.Err, syscall.EMFILE) || errors.Is(pe.Err, syscall.ENFILE) || errors.Is(pe.Err, syscall.ENOMEM)) {
			w.log.Warn("sqlite: the WAL could not be opened for its fsync; the writes it was to make durable are refused, to be tried again",
				slog.String("wal", w.walPath), slog.Any("error", err))
			return fmt.Errorf("sqlite: open the WAL for its fsync: %w: %w", err, bus.ErrUnavailable)
		}
		return w.fail(err)
	}
	return nil
}

// fail puts the writer in its failed state for good, after a failed fsync
// of the WAL, and returns the error every write gets from then on (it
// wraps bus.ErrUnavailable: 503, and the node reports not ready). As
// PostgreSQL does, the store does not try again: after a failed fsync the
// kernel may already have dropped the pages it could not write and call
// them clean, so the page cache no longer tells what is on disk, and a
// later fsync that succeeds proves nothing. Only a restart, recovering
// from what is on disk, is safe. Reads go on. Logged once, loudly.
func (w *writer) fail(cause error) error {
	err := fmt.Errorf("sqlite: fsync of the WAL failed (%w); the store takes no writes until the process is restarted: %w",
		cause, bus.ErrUnavailable)
	if w.failed.CompareAndSwap(nil, &err) {
		w.log.Error("sqlite: FSYNC OF THE WAL FAILED: the last commits may not be on disk and the page cache can no longer be trusted; "+
			"every write is refused from now on and the node reports not ready. RESTART THE PROCESS: the database recovers from what is on disk.",
			slog.String("wal", w.walPath), slog.Any("error", cause))
	}
	return *w.failed.Load()
}

// failure is the error of the failed state, nil while the writer works.
func (w *writer) failure() error {
	if p := w.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// abandon ends a transaction that cannot go on because of culprit: that
// operation gets err, the others of t run again in a new transaction
// (their work was rolled back with it; Update allows a rerun), followed by
// rest, the operations not yet run.
func (w *writer) abandon(t *txn, culprit *op, err error, rest []*op) []*op {
	_, _ = w.conn.ExecContext(context.Background(), "ROLLBACK") // may fail: already rolled back
	w.heads.reset()                                             // the index held the rolled back changes
	w.log.Warn("sqlite write transaction abandoned", slog.Int("operations", len(t.live)+1), slog.Any("error", err))
	culprit.done <- err
	var again []*op
	for _, o := range t.live {
		if o.attempts >= maxAttempts {
			o.panicked = nil
			o.done <- fmt.Errorf("write transaction abandoned %d times: %w", o.attempts, err)
			continue
		}
		o.panicked, o.err = nil, nil
		again = append(again, o)
	}
	*t = txn{}
	return append(again, rest...)
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
func (w *writer) exec(ctx context.Context, query string) (execResult, error) {
	d := dbq{ctx: ctx, stmts: w.stmts}
	res, err := d.exec(query)
	w.stmts.settle()
	return res, err
}

// maybeCheckpoint truncates the WAL once it grew past the policy's limit.
func (w *writer) maybeCheckpoint() {
	if w.failure() != nil {
		return // nothing more goes from the WAL to the database file
	}
	fi, err := os.Stat(w.walPath)
	if err != nil || fi.Size() < w.wal.limitBytes {
		return
	}
	w.checkpoint("TRUNCATE")
}

// lockByteOffset: a database file longer than this holds SQLite's
// lock-byte page, and its commits no longer walk the page cache (see the
// cache_size pragma in store.go): the writer's cache may then grow.
const lockByteOffset = 1 << 30

// bigWALFile: a database file longer than this checkpoints every
// bigWALPages WAL pages instead of SQLite's default 1,000 (4 MiB).
// With a backlog, the acks delete rows from pages written long before:
// each is a page of its own for the checkpoint to copy, while on a short
// queue the same few pages take the writes of many operations. Fewer,
// larger checkpoints copy a page written by several operations once
// (TestDepthWALPages counts them) and sync the database file a quarter
// as often. The WAL may then reach 16 MiB before it is copied back: small
// beside a file of this size.
const (
	bigWALFile  = 256 << 20
	bigWALPages = 4000
)

// maybeGrowCache raises the write connection's page cache from 8 to 64
// MiB once the database file is past 1 GiB (a file never shrinks), where a
// deep backlog's B-tree pages need the room and the page-cache walk of a
// smaller file no longer happens; and the checkpoint interval to
// bigWALPages once it is past bigWALFile.
func (w *writer) maybeGrowCache() {
	if w.bigCache {
		return
	}
	var pages, size int64
	ctx := context.Background()
	if err := w.conn.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		return
	}
	if err := w.conn.QueryRowContext(ctx, "PRAGMA page_size").Scan(&size); err != nil {
		return
	}
	if !w.bigWAL && pages*size > bigWALFile {
		if _, err := w.conn.ExecContext(ctx, fmt.Sprintf("PRAGMA wal_autocheckpoint(%d)", bigWALPages)); err == nil {
			w.bigWAL = true
		}
	}
	if pages*size <= lockByteOffset {
		return
	}
	if _, err := w.conn.ExecContext(ctx, "PRAGMA cache_size(-65536)"); err == nil {
		w.bigCache = true
	}
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

// stop ends the writer: from now on doOr refuses new callers (but the
// writes of goLate's goroutines); once the calls under way have their
// answers and those goroutines are done, the writer runs what is left and
// stops.
func (w *writer) stop() {
	w.once.Do(func() {
		w.busyMu.Lock()
		w.closing = true
		for w.busy > 0 {
			w.idle.Wait()
		}
		w.busyMu.Unlock()
		close(w.quit)
	})
	<-w.stopped
}

// loadQueue loads a consumer queue's index of heads, if it exists and is
// not loaded: its out set is published with the commit.
func (w *writer) loadQueue(queueID string) {
	_ = w.do(context.Background(), func(d *dbq) error {
		if d.heads.loaded(queueID) != nil {
			return nil
		}
		var one int
		err := d.row(`SELECT 1 FROM connections WHERE id = ? AND kind = ?`, queueID, string(bus.KindConsumer)).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // gone, or not a queue: nothing to load
		}
		if err != nil {
			return interpretError(err)
		}
		_, err = d.heads.queue(d, queueID)
		return err
	})
}
