package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// TestCheckpointerOffTheWriter: the write connection runs no automatic
// checkpoint; the checkpointer's connection syncs as a checkpoint must; once
// the writer wrote ckptPages pages to the WAL the checkpointer copies them
// into the database file; nothing is lost, and the store reopens with all.
func TestCheckpointerOffTheWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	s, err := Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	var auto int
	if err := s.w.do(ctx, func(d *dbq) error { return d.row(`PRAGMA wal_autocheckpoint`).Scan(&auto) }); err != nil {
		t.Fatal(err)
	}
	var sync int
	if err := s.cdb.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if auto != 0 || sync != 1 {
		t.Fatalf("write connection wal_autocheckpoint %d, checkpoint connection synchronous %d; want 0, 1 (NORMAL)", auto, sync)
	}

	ws, prod, cons := setupQueue(t, s, 5)
	dbSize := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := dbSize()
	big := make([]byte, 64<<10)
	const n = 80 // 80 × 16 pages of 4 KiB: past ckptPages
	for i := range n {
		m := msg(fmt.Sprint("m", i), "s")
		m.Envelope = big
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: []bus.PublishMessage{m}, Now: t0}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.w.ckpt.ran.Load() == 0 || dbSize() < before+(ckptPages-100)*4096 {
		if time.Now().After(deadline) {
			t.Fatalf("checkpoints run %d, database file %d bytes (was %d): the WAL was not copied into it", s.w.ckpt.ran.Load(), dbSize(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, err := s.QueueStats(ctx, cons, t0)
	if err != nil || st.Ready != n {
		t.Fatalf("stats after checkpoint: %+v, %v; want %d ready", st, err, n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s2.Close() }()
	st, err = s2.QueueStats(ctx, cons, t0)
	if err != nil || st.Ready != n {
		t.Fatalf("stats after reopening: %+v, %v; want %d ready", st, err, n)
	}
}

// TestPagesWritten: the writer's page counter moves with what a commit
// writes to the WAL.
func TestPagesWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	ws, prod, _ := setupQueue(t, s, 5)
	var a, b int32
	_ = s.w.do(ctx, func(d *dbq) error { a, _ = d.stmts.conn.pagesWritten(); return nil })
	m := msg("m", "s")
	m.Envelope = make([]byte, 64<<10)
	if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: []bus.PublishMessage{m}, Now: t0}); err != nil {
		t.Fatal(err)
	}
	_ = s.w.do(ctx, func(d *dbq) error { b, _ = d.stmts.conn.pagesWritten(); return nil })
	if b-a < 16 {
		t.Fatalf("pages written went from %d to %d for a 64 KiB message; want 16 or more", a, b)
	}
}
