// Package postgres is the PostgreSQL implementation of bus.Store, for
// several sombus nodes sharing one database.
//
// Correctness never rests on a process-local lock: every rule is held by
// transactions (READ COMMITTED) and row locks, so any number of processes
// may use one database at once. The story row (queue_id, story_key) is the
// lock of a story:
//
//   - publish upserts the story row first (tail_seq += n) and then inserts
//     the messages, so sequences follow commit order;
//   - receive claims story rows with FOR UPDATE SKIP LOCKED in a CTE (never
//     `IN (SELECT … LIMIT … FOR UPDATE SKIP LOCKED)`, PostgreSQL bug #15715);
//   - ack, nack, purge and retention lock the story rows (SELECT … FOR
//     UPDATE) and read the remaining messages in a later statement, under
//     the lock, so a publish that committed meanwhile is never orphaned.
//
// Batch operations take story locks sorted by (queue_id, story_key); a
// transaction that still deadlocks (40P01) or fails serialization (40001)
// is run again from the start, a few times.
//
// Wake-ups: the store sends the notifications itself. MessagePublish,
// MessageReceive (dead-letter moves), MessageAck, MessageNack,
// DeadLetterRedrive and Maintain hand the queues that got a ready message
// to the node's notifier once their transaction has committed (so a
// rolled-back change wakes nobody), and return without waiting for it. The
// notifier sends them with pg_notify('sombus_ready', ids), one send at a
// time: the ids that arrive while a send is on its way go together in the
// next one. Not inside the operations' transactions: a NOTIFY holds a
// database-wide lock from its pre-commit to the end of its commit, WAL
// flush included, so notifying transactions commit one at a time across
// every node; coalesced, the nodes send a few notifications instead of one
// per write. A notification lost to a crash delays a wake-up on another
// node as any lost notification does: a waiting poll reads nothing until
// woken, so it answers empty when its wait (at most 20 s) runs out, and
// its client's next receive finds the message. The Woken and QueueIDs
// fields are still filled so that a node wakes its own waiters at once,
// in process (bus.Service), without a notification.
//
// A node alone sends no notification at all (notify.go). Nobody needs
// one when no other session listens on sombus_ready: the node's Listen
// looks every second, and at once when its own listener (re)connects, in
// pg_stat_activity for another session of the database whose last
// statement is `LISTEN sombus_ready` (every listener, of this version or
// an earlier one, ends its set-up with it). While none is seen, posted ids
// are held, not sent; the moment one is seen they are sent, together with
// every later post. A listener that starts says so on sombus_listeners
// (its "hello"), which makes the others send at once rather than at their
// next check, so a node that has just started listening gets the wake-ups
// of every change committed after its LISTEN, a few milliseconds late.
// When the node cannot tell (no Listen running, its own listener down or
// not seen in pg_stat_activity, the check failing, or a session of another
// role whose statements its role may not see), it notifies every change,
// as before. With other nodes listening, a queue's changes are notified
// only to nodes whose polls said, on sombus_waiting, that they wait on it
// (WaitAnnounce, notify.go).
//
// Queue counts: each queue's messages and dead letters are counted by
// triggers into counter rows (queue_counts, migration 0008), one row per
// queue and writing transaction's slot, so no two concurrent transactions
// update the same row; the counts add them up (stats.go). A pool
// connection takes its slot when it connects (countslot.go).
//
// Times are stored as unix milliseconds (bigint) and returned in UTC.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/sombus/sombus/internal/bus"
)

// Store is the PostgreSQL store. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	// quick is the pool of the quick receive and the quick ack, whose
	// sessions plan as those statements want (quickPlanSettings).
	quick  *pgxpool.Pool
	logger *slog.Logger
	notify *notifier
	// routes keeps the compiled routing of recently used workspaces.
	routes bus.RouteCache
	// publishes, receives and acks gather concurrent quick publishes (by
	// workspace and producer), receives and acks (by queue) into shared
	// transactions (gather.go).
	publishes *gatherer[publishCall]
	receives  *gatherer[receiveCall]
	acks      *gatherer[ackCall]
	// idle remembers the queues whose latest claim took nothing, and
	// idleChecks gathers the reads of whether they have anything now
	// (idle.go).
	idle       idleQueues
	idleChecks *gatherer[idleCall]

	// bg counts the writes that run beside requests (goBackground); Close
	// waits for them before it closes the pool.
	bgMu     sync.Mutex
	bgClosed bool
	bg       sync.WaitGroup

	// vac is the node's vacuums of the busy tables (vacuum.go); stop ends
	// with Close, and cancels them.
	vacMu  sync.Mutex
	vac    vacuums
	stop   context.Context
	stopFn context.CancelFunc

	// migrationLockTimeout bounds each wait of a migration for a table
	// lock (applyMigration); zero means defaultMigrationLockTimeout. Only
	// tests set it, to a shorter time.
	migrationLockTimeout time.Duration

	closeOnce sync.Once
}

var _ bus.Store = (*Store)(nil)

// goBackground runs fn in a goroutine of its own that Close waits for;
// false, and fn not run, once Close has begun.
func (s *Store) goBackground(fn func()) bool {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.bgClosed {
		return false
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		fn()
	}()
	return true
}

// DefaultMaxConns is the pool size of a node whose URL does not set
// pool_max_conns.
const DefaultMaxConns = 20

// maxAttempts is how often a transaction is run when it keeps failing with
// a deadlock or serialization failure.
const maxAttempts = 5

// DefaultConnectTimeout bounds the opening of a connection when the URL
// sets no connect_timeout.
const DefaultConnectTimeout = 10 * time.Second

// noticeHook, when not nil, receives the notices of every connection of the
// stores opened while it is set. Only a test sets it (TestGenericPlansProbe
// reads auto_explain's plans from notices); a node leaves it nil, and pgx
// drops notices.
var noticeHook pgconn.NoticeHandler

// Open connects to the database at url (a PostgreSQL URL or key=value
// string), applies the embedded migrations and returns the store. Tables
// live in the first schema of the connection's search_path.
func Open(ctx context.Context, url string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse url: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgxpool's default, max(4, CPUs), is too few for a node: every
		// request of a workspace route takes a connection for its rate
		// limit and another for its store call, and long polls retry on
		// wake-ups. An operator's pool_max_conns in the URL wins (see
		// docs/several-nodes.md for sizing).
		cfg.MaxConns = max(DefaultMaxConns, cfg.MaxConns)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 && !strings.Contains(url, "connect_timeout") {
		// Without one, a connection to a host that does not answer (down,
		// or behind a firewall that drops packets) waits for the kernel's
		// TCP retries, minutes, holding its request. An operator's
		// connect_timeout in the URL wins.
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	rp := cfg.ConnConfig.RuntimeParams
	// A session left idle inside a transaction pins the xmin horizon: no
	// vacuum can remove the dead row versions that the queue tables make on
	// every delivery, and they bloat quickly. The store never waits on
	// anything but the database inside a transaction, so such a session is
	// a leak; the server ends it. An operator's own setting in the URL wins.
	if _, ok := rp["idle_in_transaction_session_timeout"]; !ok {
		rp["idle_in_transaction_session_timeout"] = "60000" // milliseconds
	}
	if _, ok := rp["application_name"]; !ok {
		rp["application_name"] = "sombus"
	}
	// Each connection takes its queue counter slot once (countslot.go)
	// and readies the quick publish (warm.go).
	// Connections made before this node's migrations are done (the tables
	// may not be there yet) are not readied.
	slot, migrated := takeCountSlot(logger), &atomic.Bool{}
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_ = slot(ctx, conn) // never fails
		if !migrated.Load() {
			return nil
		}
		return warmPublish(ctx, conn, logger)
	}
	if noticeHook != nil {
		cfg.ConnConfig.OnNotice = noticeHook
	}
	qcfg := quickPoolConfig(cfg, slot, logger)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", interpretError(err))
	}
	quick, err := pgxpool.NewWithConfig(ctx, qcfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect: %w", interpretError(err))
	}
	s := &Store{pool: pool, quick: quick, logger: logger, publishes: newPublishGatherer(),
		receives: newReceiveGatherer(), acks: newAckGatherer(), idleChecks: newIdleGatherer(), vac: newVacuums()}
	s.stop, s.stopFn = context.WithCancel(context.Background())
	s.notify = newNotifier(s)
	if err := s.migrate(ctx); err != nil {
		s.stopFn()
		quick.Close()
		pool.Close()
		return nil, err
	}
	migrated.Store(true)
	return s, nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	// Reachable is not enough: a standby (after a failover) or a database
	// set read-only answers, but takes no writes.
	var readOnly string
	if err := s.pool.QueryRow(ctx, `SELECT current_setting('transaction_read_only')`).Scan(&readOnly); err != nil {
		return fmt.Errorf("postgres: ping: %w", interpretError(err))
	}
	if readOnly != "off" {
		return fmt.Errorf("postgres: ping: the database takes no writes (transaction_read_only is %s: a standby?): %w", readOnly, bus.ErrUnavailable)
	}
	return nil
}

// Close waits for pending notifications and background writes, and
// closes the pools.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.bgMu.Lock()
		s.bgClosed = true
		s.bgMu.Unlock()
		s.stopFn() // a vacuum under way ends; writes run to their end
		s.bg.Wait()
		s.notify.close()
		s.quick.Close()
		s.pool.Close()
	})
	return nil
}

// txOptions: READ COMMITTED everywhere; the row locks give the guarantees.
func txOptions(readOnly bool) pgx.TxOptions {
	o := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	if readOnly {
		o.AccessMode = pgx.ReadOnly
	}
	return o
}

// run runs fn in a transaction, again from the start when it fails with a
// deadlock or serialization failure, and maps the final error once.
func (s *Store) run(ctx context.Context, readOnly bool, fn func(tx pgx.Tx) error) error {
	return s.runOn(ctx, s.pool, txOptions(readOnly), fn)
}

// runOn is run on db (the pool, or a connection of its own such as the
// migration's) with the transaction options opts.
func (s *Store) runOn(ctx context.Context, db interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, opts pgx.TxOptions, fn func(tx pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := pgx.BeginTxFunc(ctx, db, opts, fn)
		if err == nil {
			return nil
		}
		if attempt < maxAttempts && isRetryable(err) && ctx.Err() == nil {
			// Jitter, so the transactions that collided do not meet again.
			wait := time.Duration(attempt*attempt)*2*time.Millisecond + rand.N(5*time.Millisecond)
			s.logger.DebugContext(ctx, "postgres: retrying transaction", "attempt", attempt, "err", err)
			select {
			case <-time.After(wait):
				continue
			case <-ctx.Done():
			}
		}
		return interpretError(err)
	}
}

// write runs fn in a read-write transaction with a waker; the queues fn
// marks are handed to the notifier once the transaction has committed.
// It returns the queues woken by the attempt that committed.
func (s *Store) write(ctx context.Context, fn func(tx pgx.Tx, w *waker) error) ([]string, error) {
	var woken []string
	err := s.run(ctx, false, func(tx pgx.Tx) error {
		w := &waker{} // fresh per attempt: a rolled-back attempt woke nobody
		if err := fn(tx, w); err != nil {
			return err
		}
		woken = w.list()
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.notify.post(woken)
	return woken, nil
}

// retryableError marks a deadlock or serialization failure after
// interpretError dropped the driver type, so run still retries it.
type retryableError struct{ msg string }

func (e *retryableError) Error() string { return e.msg }

// isRetryable reports whether run runs a failed transaction again: a
// deadlock, a serialization failure, or a failed check of queueCountsKey,
// a transaction that wrote messages or dead letters of a queue whose
// connection was removed meanwhile. Run again, that one finds the queue
// gone: a publish routes without it (the removal changed the workspace's
// routing version), a receive or a settle finds none of its stories.
func isRetryable(err error) bool {
	var r *retryableError
	if errors.As(err, &r) {
		return true
	}
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "40P01" || pg.Code == "40001" ||
		pg.Code == "23503" && pg.ConstraintName == queueCountsKey)
}

// queueCountsKey is the foreign key from a counter row to its queue's
// connection (migration 0012).
const queueCountsKey = "queue_counts_queue_id_fkey"

// interpretError maps driver errors onto the bus sentinels, once, so that
// nothing above the store sees a pgx type: no rows -> bus.ErrNotFound,
// unique violation -> bus.ErrConflict, the database out of reach or unable
// to work now (unavailable) -> bus.ErrUnavailable, other server errors ->
// their text alone. Errors that are not the driver's pass through
// unchanged; a cancelled context stays a cancelled context (the caller
// went away).
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	var r *retryableError
	if errors.Is(err, bus.ErrNotFound) || errors.Is(err, bus.ErrConflict) ||
		errors.Is(err, bus.ErrUnavailable) || errors.As(err, &r) {
		return err
	}
	if errors.Unwrap(err) == context.Canceled { //nolint:errorlint // exactly one wrapping, no driver type inside
		return err
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %s", context.Canceled, err.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The database did not answer (or no pooled connection freed up)
		// within the caller's time: out of reach for now.
		return fmt.Errorf("%w: %w: %s", bus.ErrUnavailable, context.DeadlineExceeded, err.Error())
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s", bus.ErrNotFound, err.Error())
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case pg.Code == "23505":
			return fmt.Errorf("%w: %s", bus.ErrConflict, err.Error())
		case pg.Code == "23503":
			// A foreign key's referenced row does not exist (the skills
			// of a connection removed meanwhile), as on SQLite; or the
			// counter row of a queue removed meanwhile, once run gave up
			// running the transaction again (isRetryable).
			return fmt.Errorf("%w: %s", bus.ErrNotFound, err.Error())
		case pg.Code == "40P01" || pg.Code == "40001":
			// Retried by run; still failing after maxAttempts, it is a
			// fault (500), not the database being out of reach.
			return &retryableError{msg: err.Error()}
		case unavailableSQLState(pg.Code):
			return fmt.Errorf("%w: %s", bus.ErrUnavailable, err.Error())
		}
		return errors.New(err.Error())
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, puddle.ErrClosedPool) ||
		pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return fmt.Errorf("%w: %s", bus.ErrUnavailable, err.Error())
	}
	// Anything else is not the driver's (fn's own errors, our own
	// messages): it passes unchanged, so callers can still match it.
	return err
}

// unavailableSQLState reports whether a server error says the database
// cannot do any work right now, whatever was asked: a connection exception
// (class 08), insufficient resources (class 53: disk full, out of memory,
// too many connections), the server shutting down, crashed or starting up
// (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now),
// an I/O error (58030), a lock or a statement that ran past its timeout
// (55P03 lock_not_available under lock_timeout, 57014 query_canceled under
// statement_timeout). Every other error names a fault of the request or
// of sombus. (A database that takes no writes, a standby after a failover,
// answers writes with 25006, which stays a fault here: the store's own
// read-only transactions give it too when sombus writes in one by
// mistake. Ping reports such a database not ready instead.)
func unavailableSQLState(code string) bool {
	if len(code) != 5 {
		return false
	}
	switch code[:2] {
	case "08", "53":
		return true
	}
	switch code {
	case "57P01", "57P02", "57P03", "58030", "55P03", "57014":
		return true
	}
	return false
}

// ms converts a time to the stored unix milliseconds.
func ms(t time.Time) int64 { return t.UnixMilli() }

// fromMS converts stored unix milliseconds to a UTC time.
func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

// msPtr converts an optional time.
func msPtr(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	v := ms(*t)
	return &v
}

// fromMSPtr converts an optional stored time.
func fromMSPtr(v *int64) *time.Time {
	if v == nil {
		return nil
	}
	t := fromMS(*v)
	return &t
}

// newNonce returns a fresh random positive int63 for a delivery.
func newNonce() int64 { return rand.Int64N(1<<63-1) + 1 }
