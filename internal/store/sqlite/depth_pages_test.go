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

// TestDepthWALPages is a diagnostic, run with SOMBUS_DIAG=1: it counts
// the pages each operation of BenchmarkDepthOps writes to the WAL (with
// checkpoints off, so the WAL only grows), by B-tree (dbstat names each
// page; "new/free" are pages allocated after the count began), for an
// empty queue and 30,000 messages over shallow and over deep stories.
// What an operation writes, a checkpoint writes again and fsyncs.
func TestDepthWALPages(t *testing.T) {
	if os.Getenv("SOMBUS_DIAG") == "" {
		t.Skip("a diagnostic: SOMBUS_DIAG=1")
	}
	for _, sh := range []depthShape{{"empty", 0, 100}, {"shallow", 30000, 3000}, {"deep", 30000, 100}} {
		ctx := context.Background()
		s, path, ws, prod, q := diagStore(t, sh)
		walSize := func() int64 {
			fi, err := os.Stat(path + "-wal")
			if err != nil {
				t.Fatal(err)
			}
			return fi.Size()
		}
		owner := pageOwners(t, s)
		frames := func(from, to int64, into map[string]int) {
			walPages(t, path, from, to, func(pg uint32) {
				n := owner[pg]
				if n == "" {
					n = "new/free"
				}
				into[n]++
			})
		}
		byOp := map[string]map[string]int{"pub9": {}, "pub1": {}, "recv": {}, "ack": {}}
		k := 0
		var pub9, pub1, recv, ack int64
		const rounds = 200
		for i := 0; i < rounds+20; i++ {
			ms := make([]bus.PublishMessage, 9)
			for j := range ms {
				k++
				ms[j] = msg1K(fmt.Sprint("p", k), fmt.Sprint("b", k%sh.stories))
			}
			w0 := walSize()
			if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: ms, Now: t0, DedupWindow: time.Minute}); err != nil {
				t.Fatal(err)
			}
			w1 := walSize()
			k++
			if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: []bus.PublishMessage{msg1K(fmt.Sprint("p", k), fmt.Sprint("b", k%sh.stories))}, Now: t0, DedupWindow: time.Minute}); err != nil {
				t.Fatal(err)
			}
			w2 := walSize()
			r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: t0.Add(time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			w3 := walSize()
			hs := make([]bus.Handle, len(r.Deliveries))
			for i, d := range r.Deliveries {
				hs[i] = d.Handle
			}
			if _, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: hs, Now: t0.Add(time.Second)}); err != nil {
				t.Fatal(err)
			}
			w4 := walSize()
			if i >= 20 {
				frames(w0, w1, byOp["pub9"])
				frames(w1, w2, byOp["pub1"])
				frames(w2, w3, byOp["recv"])
				frames(w3, w4, byOp["ack"])
				pub9 += w1 - w0
				pub1 += w2 - w1
				recv += w3 - w2
				ack += w4 - w3
			}
		}
		f := func(n int64) float64 { return float64(n) / 4120 / rounds }
		t.Logf("%-8s WAL pages per op: publish 9 %.1f, publish 1 %.1f, receive %.1f, ack %.1f", sh.name, f(pub9), f(pub1), f(recv), f(ack))
		for op, m := range byOp {
			t.Logf("  %s %s: %v", sh.name, op, m)
		}
		// What checkpoints would write: the distinct pages of each run of
		// ckpt frames (SQLite checkpoints every wal_autocheckpoint pages;
		// a page written twice in one run is copied once).
		if b, err := os.ReadFile(path + "-wal"); err == nil {
			var out []string
			for _, ckpt := range []int{1000, 4000, 16000} {
				distinct, seen, n := 0, map[uint32]bool{}, 0
				for off := 32; off+24 <= len(b); off += 4096 + 24 {
					seen[uint32(b[off])<<24|uint32(b[off+1])<<16|uint32(b[off+2])<<8|uint32(b[off+3])] = true
					if n++; n == ckpt {
						distinct, seen, n = distinct+len(seen), map[uint32]bool{}, 0
					}
				}
				distinct += len(seen)
				out = append(out, fmt.Sprintf("every %d pages: %.1f", ckpt, float64(distinct)/(rounds+20)))
			}
			t.Logf("%-8s checkpointed pages per round: %v", sh.name, out)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// diagStore opens a store for a WAL diagnostic with the backlog sh filled
// in and no checkpoint (the WAL only grows).
func diagStore(t *testing.T, sh depthShape) (s *Store, path, ws, prod, q string) {
	t.Helper()
	ctx := context.Background()
	path = filepath.Join(t.TempDir(), "d.db")
	s, err := open(ctx, path, nil, walPolicy{every: time.Hour, limitBytes: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	ws, prod, q = setupQueue(t, s, 5)
	bulkFill(t, s, q, prod, sh.depth, sh.stories)
	if err := s.w.do(ctx, func(d *dbq) error { _, err := d.exec("PRAGMA wal_autocheckpoint=0"); return err }); err != nil {
		t.Fatal(err)
	}
	return s, path, ws, prod, q
}

// pageOwners maps each page of s's file to the B-tree owning it (dbstat).
func pageOwners(t *testing.T, s *Store) map[uint32]string {
	t.Helper()
	owner := map[uint32]string{}
	err := s.read(context.Background(), func(d *dbq) error {
		rows, err := d.query("SELECT name, pageno FROM dbstat")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var n string
			var p int64
			if err := rows.Scan(&n, &p); err != nil {
				return err
			}
			owner[uint32(p)] = n
		}
		return rows.Err()
	})
	if err != nil {
		t.Log("dbstat:", err)
	}
	return owner
}

// walPages calls fn with the page number of each frame of the WAL of the
// database at path between the byte offsets from and to (to < 0: the
// end); an offset inside the WAL's header starts at its first frame.
func walPages(t *testing.T, path string, from, to int64, fn func(pg uint32)) {
	t.Helper()
	b, err := os.ReadFile(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if to < 0 || to > int64(len(b)) {
		to = int64(len(b))
	}
	for off := max(from, 32); off+24 <= to; off += 4096 + 24 {
		fn(uint32(b[off])<<24 | uint32(b[off+1])<<16 | uint32(b[off+2])<<8 | uint32(b[off+3]))
	}
}
