//go:build unix

package sqlite

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	sqlite3 "modernc.org/sqlite/lib"
)

// TestGatherCommitAfterRecoveryFailsOnFailedWrite: after a crash the WAL
// holds a committed frame followed by a stale one (from before a restart),
// so recovery's last read is at the offset where the next frame goes. A
// commit of one page then writes its commit-frame header at that offset.
// When writing the commit's page fails, the COMMIT must fail: its frame
// must not be published with the page never written.
func TestGatherCommitAfterRecoveryFailsOnFailedWrite(t *testing.T) {
	if registerGatherVFS() == "" {
		t.Skip("no gather VFS on this platform")
	}
	faultMu.Lock()
	defer faultMu.Unlock()
	dir := t.TempDir()
	path := filepath.Join(dir, "a.db")
	w, err := sql.Open("sqlite", dsn(path, commonPragmas, writePragmas))
	if err != nil {
		t.Fatal(err)
	}
	w.SetMaxOpenConns(1)
	defer w.Close()
	for _, q := range []string{
		`CREATE TABLE a (id INTEGER PRIMARY KEY, pad BLOB NOT NULL)`,
		`CREATE TABLE b (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)`,
		`INSERT INTO b VALUES (1, 0)`,
		`WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 50) INSERT INTO a SELECT i, randomblob(3000) FROM s`,
		`PRAGMA wal_checkpoint(RESTART)`,
		// The WAL starts again: one frame (a page of a) with new salts,
		// the old frames after it.
		`UPDATE a SET pad = randomblob(3000) WHERE id = 1`,
	} {
		if _, err := w.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The crash: copy the database and its WAL as they are.
	crash := filepath.Join(dir, "crash")
	if err := os.Mkdir(crash, 0o700); err != nil {
		t.Fatal(err)
	}
	cpath := filepath.Join(crash, "a.db")
	for _, sfx := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + sfx)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cpath+sfx, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := sql.Open("sqlite", dsn(cpath, commonPragmas, writePragmas))
	if err != nil {
		t.Fatal(err)
	}
	c.SetMaxOpenConns(1)
	defer c.Close()
	tx, err := c.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`UPDATE b SET n = n + 1 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	// Fail every WAL write after the first of the commit.
	var calls atomic.Int32
	fn := func(name string) int32 {
		if name == cpath+"-wal" && calls.Add(1) >= 2 {
			return sqlite3.SQLITE_IOERR_WRITE
		}
		return sqlite3.SQLITE_OK
	}
	if !gatherWriteFault.CompareAndSwap(nil, &fn) {
		t.Fatal("another test injects WAL write failures")
	}
	cerr := tx.Commit()
	gatherWriteFault.CompareAndSwap(&fn, nil)
	if calls.Load() < 2 {
		t.Fatalf("the commit made %d WAL writes; want 2", calls.Load())
	}
	// What another connection reads: the commit, whole, or not at all.
	r, err := sql.Open("sqlite", dsn(cpath, commonPragmas, readPragmas))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var n int
	rerr := r.QueryRow(`SELECT n FROM b WHERE id = 1`).Scan(&n)
	if cerr == nil || !strings.Contains(cerr.Error(), "disk I/O error") {
		t.Fatalf("commit whose page could not be written: %v (a reader then reads n=%d, %v); want a disk I/O error", cerr, n, rerr)
	}
	if rerr != nil || n != 0 {
		t.Fatalf("a reader after the failed commit: n=%d, %v; want 0", n, rerr)
	}
}
