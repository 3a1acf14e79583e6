//go:build unix

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	sqlite3 "modernc.org/sqlite/lib"
)

// walWrites returns the underlying writes made so far to the WAL file at
// path through the gather VFS, by every connection.
func walWrites(path string) int64 {
	var n int64
	if p := gatherFiles.Load(); p != nil {
		for _, f := range *p {
			if f != nil && f.name == path {
				n += f.writes.Load()
			}
		}
	}
	return n
}

// openGatherDBs opens a database through the store's connection strings:
// one write connection and a read pool.
func openGatherDBs(t *testing.T) (path string, w, r *sql.DB) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "g.db")
	w, err := sql.Open("sqlite", dsn(path, commonPragmas, writePragmas))
	if err != nil {
		t.Fatal(err)
	}
	w.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = w.Close() })
	if _, err := w.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, bal INTEGER NOT NULL, pad BLOB NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	r, err = sql.Open("sqlite", dsn(path, commonPragmas, readPragmas))
	if err != nil {
		t.Fatal(err)
	}
	r.SetMaxOpenConns(4)
	t.Cleanup(func() { _ = r.Close() })
	return path, w, r
}

// insertPages inserts rows rows of size bytes each in one transaction and
// returns the bytes of WAL frames the commit appended (the WAL must not be
// reset meanwhile) and the underlying WAL writes it made.
func insertPages(t *testing.T, w *sql.DB, path string, first, rows, size int) (bytes, writes int64) {
	t.Helper()
	wal := path + "-wal"
	st, err := os.Stat(wal)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := w.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if _, err := tx.Exec(`INSERT INTO t (id, bal, pad) VALUES (?, 0, randomblob(?))`, first+i, size); err != nil {
			t.Fatal(err)
		}
	}
	before := walWrites(wal)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	writes = walWrites(wal) - before
	st2, err := os.Stat(wal)
	if err != nil {
		t.Fatal(err)
	}
	return st2.Size() - st.Size(), writes
}

// TestGatherOneWritePerCommit: a commit of several pages reaches the WAL
// file in one write, not two per page.
func TestGatherOneWritePerCommit(t *testing.T) {
	t.Parallel()
	if registerGatherVFS() == "" {
		t.Skip("no gather VFS on this platform")
	}
	path, w, _ := openGatherDBs(t)
	insertPages(t, w, path, 0, 1, 10) // the WAL exists, with its header
	for i := range 5 {
		bytes, writes := insertPages(t, w, path, 100+i*10, 10, 3000)
		frames := bytes / 4120
		if frames < 10 {
			t.Fatalf("commit %d appended %d bytes (%d frames); want at least 10 frames", i, bytes, frames)
		}
		if writes != 1 {
			t.Fatalf("commit %d of %d frames made %d writes to the WAL; want 1 (without gathering: %d)", i, frames, writes, 2*frames)
		}
	}
}

// TestGatherLargeCommit: a commit of far more than 128 KiB of frames is
// written in chunks below SQLite's 0x1ffff-byte limit on one write, and
// reads back whole, from the writer and from another connection.
func TestGatherLargeCommit(t *testing.T) {
	t.Parallel()
	if registerGatherVFS() == "" {
		t.Skip("no gather VFS on this platform")
	}
	path, w, r := openGatherDBs(t)
	insertPages(t, w, path, 0, 1, 10)
	bytes, writes := insertPages(t, w, path, 1000, 120, 3500)
	if bytes < 3*gatherMax {
		t.Fatalf("the commit appended %d bytes; want more than %d", bytes, 3*gatherMax)
	}
	frames := bytes / 4120
	chunks := (bytes + gatherMax - 4120 - 1) / (gatherMax - 4120)
	if writes < bytes/gatherMax+1 || writes > chunks {
		t.Fatalf("the commit of %d bytes (%d frames) made %d writes; want between %d and %d", bytes, frames, writes, bytes/gatherMax+1, chunks)
	}
	for _, db := range []*sql.DB{w, r} {
		var n, total int64
		if err := db.QueryRow(`SELECT count(*), sum(length(pad)) FROM t WHERE id >= 1000`).Scan(&n, &total); err != nil {
			t.Fatal(err)
		}
		if n != 120 || total != 120*3500 {
			t.Fatalf("read back %d rows of %d bytes; want 120 of %d", n, total, 120*3500)
		}
	}
	var check string
	if err := r.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q, %v", check, err)
	}
}

// TestGatherReadersSeeWholeCommits: while one connection commits
// transactions of many pages that keep the sum of a column constant, and
// rewrite every row's blob so that each commit rewrites most pages,
// readers in other goroutines (the read pool, other connections of the
// process) never see a commit whose frames are not in the WAL file: every
// read finds the invariants, and no read fails.
func TestGatherReadersSeeWholeCommits(t *testing.T) {
	t.Parallel()
	if registerGatherVFS() == "" {
		t.Skip("no gather VFS on this platform")
	}
	_, w, r := openGatherDBs(t)
	const rows, total = 300, 300 * 1000
	tx, err := w.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if _, err := tx.Exec(`INSERT INTO t (id, bal, pad) VALUES (?, 1000, zeroblob(700))`, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var commits, reads atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for gen := 1; !stop.Load(); gen++ {
			tx, err := w.Begin()
			if err != nil {
				errs <- err
				return
			}
			// Every row's pad holds the generation: a reader that finds
			// two generations read a torn commit.
			if _, err := tx.Exec(`UPDATE t SET pad = zeroblob(690) || CAST(printf('%010d', ?) AS BLOB)`, gen); err != nil {
				errs <- err
				return
			}
			for range 20 {
				a, b, amt := rng.IntN(rows), rng.IntN(rows), rng.IntN(50)
				if _, err := tx.Exec(`UPDATE t SET bal = bal - ? WHERE id = ?`, amt, a); err != nil {
					errs <- err
					return
				}
				if _, err := tx.Exec(`UPDATE t SET bal = bal + ? WHERE id = ?`, amt, b); err != nil {
					errs <- err
					return
				}
			}
			if err := tx.Commit(); err != nil {
				errs <- err
				return
			}
			commits.Add(1)
			if gen%200 == 0 {
				// Resets the WAL now and then, so that frames are written
				// over old ones: a reader that read past the published
				// frames would find stale data rather than an end of file.
				if _, err := w.Exec(`PRAGMA wal_checkpoint(RESTART)`); err != nil {
					errs <- err
					return
				}
			}
		}
	}()
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				var n, sum, gens int64
				err := r.QueryRow(`SELECT count(*), sum(bal), count(DISTINCT substr(pad, 691)) FROM t`).Scan(&n, &sum, &gens)
				if err != nil {
					errs <- fmt.Errorf("read: %w", err)
					return
				}
				if n != rows || sum != total || gens != 1 {
					errs <- fmt.Errorf("read %d rows, sum %d, %d generations; want %d, %d, 1", n, sum, gens, rows, total)
					return
				}
				reads.Add(1)
			}
		}()
	}
	select {
	case err := <-errs:
		stop.Store(true)
		wg.Wait()
		t.Fatalf("after %d commits and %d reads: %v", commits.Load(), reads.Load(), err)
	case <-time.After(3 * time.Second):
	}
	stop.Store(true)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("after %d commits and %d reads: %v", commits.Load(), reads.Load(), err)
	default:
	}
	if commits.Load() < 20 || reads.Load() < 20 {
		t.Fatalf("only %d commits and %d reads", commits.Load(), reads.Load())
	}
	t.Logf("%d commits, %d reads", commits.Load(), reads.Load())
}

// failWALWrites makes the underlying writes of the WAL file at path fail
// with rc while the returned function has not been called.
func failWALWrites(t *testing.T, path string, rc int32) (stop func()) {
	t.Helper()
	var on atomic.Bool
	on.Store(true)
	fn := func(name string) int32 {
		if on.Load() && name == path {
			return rc
		}
		return sqlite3.SQLITE_OK
	}
	if !gatherWriteFault.CompareAndSwap(nil, &fn) {
		t.Fatal("another test injects WAL write failures")
	}
	return func() {
		on.Store(false)
		gatherWriteFault.CompareAndSwap(&fn, nil)
	}
}

// faultMu serialises the tests that inject write failures (the hook is
// one for the process).
var faultMu sync.Mutex

// TestGatherFailedWriteFailsCommit: when the gathered frames cannot be
// written, the COMMIT fails with the write's error, no reader sees the
// transaction, and once writes work again the next transactions commit.
func TestGatherFailedWriteFailsCommit(t *testing.T) {
	t.Parallel()
	if registerGatherVFS() == "" {
		t.Skip("no gather VFS on this platform")
	}
	faultMu.Lock()
	defer faultMu.Unlock()
	path, w, r := openGatherDBs(t)
	insertPages(t, w, path, 0, 1, 10)
	stop := failWALWrites(t, path+"-wal", sqlite3.SQLITE_IOERR_WRITE)
	tx, err := w.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := tx.Exec(`INSERT INTO t (id, bal, pad) VALUES (?, 0, randomblob(3000))`, 10+i); err != nil {
			t.Fatal(err)
		}
	}
	err = tx.Commit()
	stop()
	if err == nil || !strings.Contains(err.Error(), "disk I/O error") {
		t.Fatalf("commit with failing WAL writes: %v; want a disk I/O error", err)
	}
	_, _ = w.Exec(`ROLLBACK`)
	var n int
	if err := r.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("a reader after the failed commit: %d rows, %v; want 1", n, err)
	}
	insertPages(t, w, path, 100, 10, 3000)
	if err := r.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil || n != 11 {
		t.Fatalf("a reader after the next commit: %d rows, %v; want 11", n, err)
	}
	var check string
	if err := r.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q, %v", check, err)
	}
}

// TestGatherFailedWriteFailsPublish: through the store, a publish whose
// commit cannot write the WAL fails (ErrUnavailable) and is not delivered;
// publishes work again once the writes do.
func TestGatherFailedWriteFailsPublish(t *testing.T) {
	t.Parallel()
	if registerGatherVFS() == "" {
		t.Skip("no gather VFS on this platform")
	}
	faultMu.Lock()
	defer faultMu.Unlock()
	ctx := context.Background()
	s := openTemp(t)
	ws, prod, q := setupQueue(t, s, 3)
	publish := func(id string) error {
		_, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg(id, "s-"+id)}, Now: t0, DedupWindow: bus.DedupWindow})
		return err
	}
	if err := publish("m1"); err != nil {
		t.Fatal(err)
	}
	stop := failWALWrites(t, s.Path()+"-wal", sqlite3.SQLITE_FULL)
	err := publish("m2")
	stop()
	if !errors.Is(err, bus.ErrUnavailable) {
		t.Fatalf("publish with failing WAL writes: %v; want ErrUnavailable", err)
	}
	if err := publish("m3"); err != nil {
		t.Fatalf("publish once writes work again: %v", err)
	}
	checkChains(t, s)
	checkHeads(t, s)
	if got := drainQueue(t, s, q, t0); got != 2 {
		t.Fatalf("delivered %d; want 2 (m1 and m3)", got)
	}
}

// TestGatherFailedSpillIsNotCommitted: a transaction larger than the page
// cache writes frames to the WAL before its commit (a spill). When one of
// the gathered writes fails, whatever SQLite does next (the statement's
// error is ignored here, and the transaction goes on to COMMIT, as the
// writer's savepoints do), no commit may reference the frames that were
// never written: the database stays intact, and the readers and the
// writer agree on its content.
func TestGatherFailedSpillIsNotCommitted(t *testing.T) {
	t.Parallel()
	if registerGatherVFS() == "" {
		t.Skip("no gather VFS on this platform")
	}
	faultMu.Lock()
	defer faultMu.Unlock()
	for _, failAt := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint("write", failAt), func(t *testing.T) {
			path, w, r := openGatherDBs(t)
			insertPages(t, w, path, 0, 1, 10)
			if _, err := w.Exec(`PRAGMA cache_size = 10`); err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int32
			fn := func(name string) int32 {
				if name == path+"-wal" && calls.Add(1) == int32(failAt) {
					return sqlite3.SQLITE_IOERR_WRITE
				}
				return sqlite3.SQLITE_OK
			}
			if !gatherWriteFault.CompareAndSwap(nil, &fn) {
				t.Fatal("another test injects WAL write failures")
			}
			defer gatherWriteFault.CompareAndSwap(&fn, nil)
			tx, err := w.Begin()
			if err != nil {
				t.Fatal(err)
			}
			var failed int
			for i := range 300 {
				if _, err := tx.Exec(`INSERT INTO t (id, bal, pad) VALUES (?, 0, randomblob(3000))`, 10+i); err != nil {
					failed++
				}
			}
			cerr := tx.Commit()
			if calls.Load() < int32(failAt) {
				t.Fatalf("only %d WAL writes; the transaction did not spill", calls.Load())
			}
			t.Logf("%d inserts failed, commit: %v", failed, cerr)
			gatherWriteFault.CompareAndSwap(&fn, nil)
			var check string
			if err := r.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
				t.Fatalf("integrity_check: %q, %v", check, err)
			}
			var nw, nr int
			if err := w.QueryRow(`SELECT count(*) FROM t`).Scan(&nw); err != nil {
				t.Fatalf("writer count: %v", err)
			}
			if err := r.QueryRow(`SELECT count(*) FROM t`).Scan(&nr); err != nil || nr != nw {
				t.Fatalf("reader count %d (%v), writer count %d", nr, err, nw)
			}
			if cerr == nil && nw != 1+300-failed {
				t.Fatalf("the commit succeeded with %d rows; want %d", nw, 1+300-failed)
			}
			insertPages(t, w, path, 1000, 10, 3000)
		})
	}
}
