package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// TestRecordStages: while RecordStages records, each write answered after
// its fsync is recorded with the times of its stretches; the writes of a
// store that answers at the commit (synchronous=normal) have no fsync and
// are not; a write after the end is not. Not parallel: the recording is
// the process's.
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
		t.Helper()
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg(id, "s")}, Now: t0, DedupWindow: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}

	stop := RecordStages()
	for i := range 4 {
		publish(s, ws, prod, fmt.Sprint("m", i))
		publish(n, nws, nprod, fmt.Sprint("m", i))
	}
	st := stop()
	publish(s, ws, prod, "after")
	if st.Ops != 4 {
		t.Fatalf("%d operations recorded, want the 4 publishes of the store that syncs", st.Ops)
	}
	if st.Queued < 0 || st.Open < 0 || st.Commit <= 0 || st.Handover < 0 || st.Sync <= 0 || st.Answer < 0 {
		t.Fatalf("stages %+v: want a commit and an fsync that took time, and no stretch below zero", st)
	}
	if again := RecordStages()(); again.Ops != 0 {
		t.Fatalf("a recording with no write: %+v", again)
	}
}
