// Package sqlite is the embedded store of sombus: one SQLite file in WAL
// mode, for a single node. All writes go through one writer goroutine that
// owns the only write connection and commits operations in groups (one
// fsync per group); reads use a separate pool of read-only connections.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sombus/sombus/internal/bus"
	_ "modernc.org/sqlite" // registers the "sqlite" driver (pure Go)
)

// Store is the SQLite implementation of bus.Store.
type Store struct {
	path string
	log  *slog.Logger
	wdb  *sql.DB // one connection, owned by w
	w    *writer
	rdb  *sql.DB  // read-only pool
	lock *os.File // the exclusive lock on PATH-lock (lockfile.go); nil where there is none

	// routes keeps the compiled routing of recently used workspaces.
	routes bus.RouteCache
	// samples holds each queue's latest committed sample (samples.go).
	samples lastSamples

	// wake is the function Listen was given (nil before): the node's own
	// waiters are woken by the bus, but the store gives messages back by
	// itself after a receive whose caller had timed out (queue.go).
	wake atomic.Pointer[func(queueID string)]

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ bus.Store = (*Store)(nil)

// Pragmas of every connection. The driver applies busy_timeout first.
var commonPragmas = []string{
	// Wait up to 10 s for a lock held by another process (an operator
	// command, a backup) rather than failing at once with SQLITE_BUSY.
	"busy_timeout(10000)",
	// Enforce the REFERENCES clauses: they delete a connection's queue
	// data with it and refuse rows pointing at nothing.
	"foreign_keys(1)",
}

// Pragmas of the write connection.
var writePragmas = []string{
	// WAL: readers never block the writer nor it them, and a commit is one
	// append to the WAL (plus its fsync) instead of rewriting pages.
	"journal_mode(WAL)",
	// NORMAL: SQLite itself does not fsync the WAL at each commit (it still
	// syncs around checkpoints, so the file is never corrupted). Durability
	// is the writer's: with the default synchronous=full it fsyncs the WAL
	// after each commit and answers no caller of that commit before the
	// fsync returned, so an accepted publish (202) survives a power loss
	// just as under PRAGMA synchronous=FULL; but the fsync runs beside the
	// next batch instead of holding the write connection (see writer.go).
	"synchronous(NORMAL)",
	// 4 MiB page cache (negative = KiB). Not more: SQLite walks the whole
	// hash table of the page cache at the end of most write transactions
	// (a B-tree balance renumbers pages through the lock-byte page's
	// number, 262145 with 4 KiB pages, which leaves the cache's highest
	// key far beyond the end of the file; the commit's truncation of the
	// cache to the file's size then takes the path that visits every hash
	// slot). That walk costs in proportion to the cache's size: with 64
	// MiB it took a fifth of the writer's CPU on a drain of 30,000 queued
	// 1 KiB messages, with 8 MiB 7% (4.5 µs a message drained). The hot
	// pages (the oldest heads and the newest rows) fit in 4 MiB; the rest
	// comes from the OS cache: against 8 MiB, the drain through HTTP kept
	// a larger share of the floor and the drains of 300,000 queued used
	// less CPU a message, for 0-3% more bytes read.
	"cache_size(-4096)",
	// Savepoint journals (one per operation of a group commit) in memory:
	// past 64 KiB SQLite would otherwise spill each to a temporary file.
	"temp_store(MEMORY)",
	// After a checkpoint resets the WAL, truncate the file down to 64 MiB
	// so one burst does not leave a huge WAL file behind for ever.
	"journal_size_limit(67108864)",
}

// Pragmas of the read-only pool.
var readPragmas = []string{
	// Refuse every write on these connections: writes belong to the writer.
	"query_only(1)",
	// 4 MiB page cache per read connection: a read connection drops its
	// whole cache whenever the database changed since its last read, so
	// under writes a large cache holds little, and dropping it visits
	// every slot of its hash table (which never shrinks).
	"cache_size(-4096)",
}

// dsn builds the driver's connection string: a plain file path with the
// pragmas as _pragma parameters, run on every new connection. Every
// connection, the writer's and the read pool's, opens its files through
// the gather VFS (gathervfs.go) where it exists. Only the writer writes
// the WAL, so only its frames are gathered; the readers go through the
// same VFS so that every connection of the store opens its files one way
// (a read connection's WAL handle holds an unused 128 KiB buffer). The
// driver takes the vfs parameter from a plain path too.
func dsn(path string, pragmas ...[]string) string {
	var b strings.Builder
	b.WriteString(path)
	sep := "?"
	if vfs := registerGatherVFS(); vfs != "" {
		b.WriteString(sep + "vfs=" + vfs)
		sep = "&"
	}
	for _, list := range pragmas {
		for _, p := range list {
			b.WriteString(sep + "_pragma=" + p)
			sep = "&"
		}
	}
	return b.String()
}

// Open opens (creating it if need be) the SQLite database at path, applies
// the schema migrations this binary carries, and starts the writer. It
// refuses a database whose schema is newer than this binary knows. logger
// may be nil.
//
// path may end in store parameters, as in "./sombus.db?synchronous=normal":
//
//   - synchronous=full (the default): a write is answered only once the
//     WAL holding its commit has been fsynced; nothing answered is lost on
//     a power loss or an OS crash.
//   - synchronous=normal: a write is answered at its commit, before the
//     WAL's fsync. A process crash loses nothing, and the file is never
//     corrupted, but a power loss or an OS crash may lose the commits of
//     the last moments (those since the last checkpoint's fsync), even
//     though they were answered.
func Open(ctx context.Context, path string, logger *slog.Logger) (*Store, error) {
	return open(ctx, path, logger, defaultWAL)
}

// options are the store parameters after the path.
type options struct {
	// syncCommits: fsync the WAL after each commit before answering.
	syncCommits bool
}

// parseOptions splits "path?name=value&…" into the path and its options.
func parseOptions(spec string) (string, options, error) {
	o := options{syncCommits: true}
	path, query, has := strings.Cut(spec, "?")
	if !has {
		return path, o, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", o, fmt.Errorf("sqlite: parameters %q: %w", query, err)
	}
	for name, vs := range q {
		if len(vs) != 1 {
			return "", o, fmt.Errorf("sqlite: parameter %s is given %d times", name, len(vs))
		}
		switch v := strings.ToLower(vs[0]); {
		case name == "synchronous" && v == "full":
			o.syncCommits = true
		case name == "synchronous" && v == "normal":
			o.syncCommits = false
		case name == "synchronous":
			return "", o, fmt.Errorf("sqlite: synchronous=%s: must be full or normal", vs[0])
		default:
			return "", o, fmt.Errorf("sqlite: unknown parameter %q (the parameters are: synchronous)", name)
		}
	}
	return path, o, nil
}

// ParseSpec checks a store spec as Open takes it (a path, perhaps with
// parameters) without opening anything, and returns the path.
func ParseSpec(spec string) (string, error) {
	path, _, err := splitSpec(spec)
	return path, err
}

// splitSpec splits a spec into its path and options, refusing a path that
// does not name a file.
func splitSpec(spec string) (string, options, error) {
	path, opts, err := parseOptions(spec)
	if err != nil {
		return "", opts, err
	}
	if path == "" || strings.ContainsAny(path, "?#") || strings.HasPrefix(path, "file:") || path == ":memory:" {
		// The driver reads "?" as the start of parameters, and the read pool
		// must see the same file as the writer (not a private memory db).
		return "", opts, fmt.Errorf("sqlite: path %q must name a file, without '#'", path)
	}
	return path, opts, nil
}

func open(ctx context.Context, spec string, logger *slog.Logger, wal walPolicy) (*Store, error) {
	return openUpTo(ctx, spec, logger, wal, 0)
}

// openUpTo is open applying the migrations up to version upTo only (0:
// all): tests make databases of an older schema with it.
func openUpTo(ctx context.Context, spec string, logger *slog.Logger, wal walPolicy, upTo int) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	path, opts, err := splitSpec(spec)
	if err != nil {
		return nil, err
	}
	ms, err := loadMigrations()
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if upTo > 0 && upTo < len(ms) {
		ms = ms[:upTo]
	}
	lock, err := lockFile(path)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok && lock != nil {
			_ = lock.Close() // releases the lock
		}
	}()

	wdb, err := sql.Open("sqlite", dsn(path, commonPragmas, writePragmas))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, interpretError(err))
	}
	// Exactly one write connection, never closed by the pool.
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	wconn, err := wdb.Conn(ctx)
	if err != nil {
		_ = wdb.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, interpretError(err))
	}
	var mode string
	if err := wconn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || !strings.EqualFold(mode, "wal") {
		_ = wconn.Close()
		_ = wdb.Close()
		return nil, fmt.Errorf("sqlite: open %s: WAL mode could not be set (journal_mode %q): %w", path, mode, interpretError(err))
	}
	from, to, err := migrate(ctx, wconn, ms)
	if err != nil {
		_ = wconn.Close()
		_ = wdb.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if from != to {
		logger.InfoContext(ctx, "sqlite schema migrated", slog.String("path", path), slog.Int("from", from), slog.Int("to", to))
	}

	rdb, err := sql.Open("sqlite", dsn(path, commonPragmas, readPragmas))
	if err != nil {
		_ = wconn.Close()
		_ = wdb.Close()
		return nil, fmt.Errorf("sqlite: open %s for reading: %w", path, interpretError(err))
	}
	// Readers run in parallel in WAL mode; a few per CPU is plenty.
	n := max(4, runtime.GOMAXPROCS(0))
	rdb.SetMaxOpenConns(n)
	rdb.SetMaxIdleConns(n)
	if err := rdb.PingContext(ctx); err != nil {
		_ = rdb.Close()
		_ = wconn.Close()
		_ = wdb.Close()
		return nil, fmt.Errorf("sqlite: open %s for reading: %w", path, interpretError(err))
	}

	var raw *rawConn
	if err := wconn.Raw(func(dc any) (err error) { raw, err = rawHandle(dc); return err }); err != nil {
		_ = rdb.Close()
		_ = wconn.Close()
		_ = wdb.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}

	s := &Store{path: path, log: logger, wdb: wdb, rdb: rdb, lock: lock}
	s.w = newWriter(wconn, raw, path+"-wal", wal, opts.syncCommits, logger)
	ok = true
	return s, nil
}

// Path returns the database file's path as given to Open.
func (s *Store) Path() string { return s.path }

// Close stops the writer once the writes under way have finished, with
// what they leave to do: the give-back of a receive answered before its
// claim was durable (past its deadline, or with its fsync's error), which
// is the one write taken while Close waits, and which wakes the queue's
// long polls through the function Listen was given. Other writes that come
// after Close began, reads and Ping get an error wrapping
// bus.ErrUnavailable. Then it closes every connection. Calls after the
// first return the first's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.w.stop() // also closes the write connection's statements
		err := errors.Join(s.w.conn.Close(), s.wdb.Close(), s.rdb.Close())
		if s.lock != nil {
			err = errors.Join(err, s.lock.Close()) // releases the lock, last
		}
		if err != nil {
			s.closeErr = fmt.Errorf("sqlite: close: %w", interpretError(err))
		}
	})
	return s.closeErr
}

// Ping checks that both the read pool and the writer answer. After a
// failed fsync of the WAL it fails for good with an error wrapping
// bus.ErrUnavailable: the store takes no more writes (see writer.fail), so
// the node is not ready until it is restarted.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return errClosed
	}
	if err := s.rdb.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping: %w", interpretError(err))
	}
	return s.w.do(ctx, func(d *dbq) error { return nil })
}

// Update runs fn in the writer's next transaction, inside its own
// savepoint: fn's writes commit together, or (fn returned an error) none of
// them do. fn runs on the writer goroutine, so it must not call other
// methods of the Store (that would wait for itself). fn may be run again
// if the shared transaction had to be abandoned.
func (s *Store) Update(ctx context.Context, fn func(tx bus.Tx) error) error {
	return s.w.do(ctx, func(d *dbq) error { return fn(&tx{d: d}) })
}

// View runs fn in a read-only transaction of the read pool: fn sees one
// consistent snapshot, and any write fails.
func (s *Store) View(ctx context.Context, fn func(tx bus.Tx) error) error {
	return s.read(ctx, func(d *dbq) error { return fn(&tx{d: d}) })
}

// read runs fn in a read transaction of the read pool.
func (s *Store) read(ctx context.Context, fn func(d *dbq) error) error {
	if s.closed.Load() {
		return errClosed
	}
	t, err := s.rdb.BeginTx(ctx, nil)
	if err != nil {
		if s.closed.Load() {
			return errClosed // closed meanwhile ("sql: database is closed")
		}
		return fmt.Errorf("sqlite: begin read: %w", interpretError(err))
	}
	defer func() { _ = t.Rollback() }()
	if err := fn(&dbq{ctx: ctx, q: t}); err != nil {
		return err
	}
	return interpretError(t.Commit())
}

// Listen returns nil when ctx ends: a single node wakes its own waiters,
// but for the messages the store gives back by itself (see wake), which
// it tells fn of meanwhile. fn must not block: Close waits for the
// give-backs that call it.
func (s *Store) Listen(ctx context.Context, fn func(queueID string)) error {
	s.wake.Store(&fn)
	<-ctx.Done()
	s.wake.CompareAndSwap(&fn, nil)
	return nil
}
