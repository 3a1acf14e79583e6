package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// TestRecordStages: while RecordStages records, each write answered after
// its fsync is recorded with the times of its stretches, concurrent ones
// too; not a write of a store that answers at the commit
// (synchronous=normal), nor one that changed nothing (no fsync), nor one
// answered after the end; and a write handed in during one recording and
// answered during the next counts in neither. Not parallel: the recording
// is the process's.
func TestRecordStages(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	ws, prod, _ := setupQueue(t, s, 5)
	path := filepath.Join(t.TempDir(), "normal.db")
	n, err := Open(ctx, path+"?synchronous=normal", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	nws, nprod, _ := setupQueue(t, n, 5)
	publish := func(s *Store, ws, prod, id string) {
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg(id, "s")}, Now: t0, DedupWindow: time.Minute}); err != nil {
			t.Error(err)
		}
	}

	stop := RecordStages()
	start := time.Now()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5 {
				publish(s, ws, prod, fmt.Sprint("m", g, "-", i))
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	publish(n, nws, nprod, "normal")
	if err := s.w.do(ctx, func(*dbq) error { return nil }); err != nil { // changes nothing
		t.Fatal(err)
	}
	st := stop()
	publish(s, ws, prod, "after")
	if again := stop(); again != st {
		t.Fatalf("the recording changed after its end: %+v, then %+v", st, again)
	}
	if st.Ops != 40 {
		t.Fatalf("%d operations recorded, want the 40 publishes of the store that syncs", st.Ops)
	}
	total := st.Queued + st.Open + st.Commit + st.Handover + st.Sync + st.Answer
	if st.Commit <= 0 || st.Sync <= 0 || total > wall {
		t.Fatalf("stages %+v: want a commit and an fsync that took time, and an average way through the writer (%v) within the %v of all the publishes",
			st, total, wall)
	}

	// A write held in the writer across the switch from one recording to
	// the next (against a control within one recording).
	held := func(id string, during func()) {
		t.Helper()
		entered, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
		go func() {
			done <- s.w.do(ctx, func(d *dbq) error {
				close(entered)
				<-release
				_, err := d.exec(`INSERT INTO dedup(producer_id, message_id, accepted_at, deliveries) VALUES ('held', ?, 0, 0)`, id)
				return err
			})
		}()
		<-entered
		during()
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	stop = RecordStages()
	held("control", func() {})
	if st := stop(); st.Ops != 1 {
		t.Fatalf("a held write within one recording: %d operations recorded, want 1", st.Ops)
	}
	first := RecordStages()
	var second func() Stages
	held("switch", func() {
		first()
		second = RecordStages()
	})
	if a, b := first(), second(); a.Ops != 0 || b.Ops != 0 {
		t.Fatalf("a write handed in during one recording and answered during the next: recorded %d and %d times, want 0", a.Ops, b.Ops)
	}
}
