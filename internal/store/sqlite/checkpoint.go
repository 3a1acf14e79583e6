package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"sync/atomic"
	"time"
)

// Checkpointing off the writer's path.
//
// SQLite's automatic checkpoint (wal_autocheckpoint, every 1000 pages) runs
// inside the COMMIT of the connection whose commit crossed the threshold:
// on the writer, the store's one serial path. It copies the WAL's pages back
// into the database file and fsyncs it, and under a backlog (an ack touches
// old pages) it took about a sixth of the writer's time. The write
// connection therefore runs with wal_autocheckpoint=0, and a checkpointer
// goroutine with a connection of its own runs PASSIVE checkpoints, which
// neither wait for nor block the writer or the readers: they copy what no
// reader still needs, and the writer starts the WAL over from its beginning
// at its next commit once everything was copied and no reader is using it.
//
// The writer wakes the checkpointer (without ever waiting for it) once it
// has written ckptPages pages to the WAL since the last wake-up; its ticker
// wakes it too. The writer keeps its TRUNCATE checkpoint past
// walTruncateBytes (maybeCheckpoint): the bound of the WAL file when
// readers keep a PASSIVE checkpoint from ever reaching the WAL's end.
//
// Durability: the checkpoint connection runs with synchronous=NORMAL, under
// which SQLite fsyncs the WAL before copying its pages and the database file
// after, before the copied frames count as checkpointed (and so before the
// WAL may be started over or truncated). A failed checkpoint (disk full, an
// I/O error) changes nothing that was committed: the frames stay in the WAL,
// which is the database's truth until a later checkpoint copies them, and
// the writer goes on; the next wake-up tries again.

// ckptPages is how many pages the writer writes to the WAL between two
// wake-ups of the checkpointer (SQLite's own default threshold).
const ckptPages = 1000

// Pragmas of the checkpoint connection.
var ckptPragmas = []string{
	// Sync the WAL before, and the database file after, copying pages (see
	// above). NORMAL is enough: a checkpoint syncs under NORMAL as under FULL.
	"synchronous(NORMAL)",
	// The connection reads no table: a small page cache.
	"cache_size(-256)",
}

// checkpointer runs PASSIVE checkpoints on its own connection when woken.
type checkpointer struct {
	db   *sql.DB
	log  *slog.Logger
	kick chan struct{} // (1) a wake-up
	quit chan struct{}
	done chan struct{}
	// halted says whether checkpoints must stop for good (the writer's
	// failed state: after a failed fsync nothing more goes from the WAL to
	// the database file).
	halted func() bool
	// ran counts the checkpoints run (tests).
	ran atomic.Int64
}

func newCheckpointer(db *sql.DB, log *slog.Logger) *checkpointer {
	return &checkpointer{
		db:   db,
		log:  log,
		kick: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
}

// start runs the checkpointer goroutine; halted is checked before each
// checkpoint.
func (c *checkpointer) start(halted func() bool) {
	c.halted = halted
	go c.loop()
}

// wake asks for a checkpoint; it never blocks.
func (c *checkpointer) wake() {
	select {
	case c.kick <- struct{}{}:
	default: // one is already asked for
	}
}

// stop ends the goroutine, after the checkpoint it runs, if any.
func (c *checkpointer) stop() {
	select {
	case <-c.quit:
	default:
		close(c.quit)
	}
	<-c.done
}

func (c *checkpointer) loop() {
	defer close(c.done)
	var lastWarn time.Time
	for {
		select {
		case <-c.quit:
			return
		case <-c.kick:
		}
		if c.halted() {
			continue
		}
		var busy, logPages, done int
		err := c.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &logPages, &done)
		c.ran.Add(1)
		if err != nil {
			// Nothing is lost: the frames stay in the WAL. Logged at most
			// once a minute, as a disk full would repeat it at every wake-up.
			if time.Since(lastWarn) >= time.Minute {
				lastWarn = time.Now()
				c.log.Warn("sqlite wal checkpoint failed", slog.String("mode", "PASSIVE"), slog.Any("error", interpretError(err)))
			}
			continue
		}
	}
}
