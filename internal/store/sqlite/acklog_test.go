package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/storetest"
)

// ackLogRows counts the ack records waiting in ack_log and those in
// ack_records.
func ackLogRows(t *testing.T, s *Store) (logged, merged int) {
	t.Helper()
	return rowCounts(t, s, "ack_log", "ack_records")
}

// TestAckLogReAcks: ack records wait in ack_log until enough gathered,
// then move to ack_records; a re-ack with the acknowledging handle
// succeeds and one with an earlier handle fails wherever the record is,
// also after a reopen; the expiry of ack records and a connection's
// removal take them from both tables.
func TestAckLogReAcks(t *testing.T) {
	defer func(n int) { ackLogMergeRows = n }(ackLogMergeRows)
	ackLogMergeRows = 4
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	s, err := Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ws, prod, q := setupQueue(t, s, 5)
	for i := range 6 {
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg(fmt.Sprint("m", i), fmt.Sprint("s", i))}, Now: t0}); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(time.Second)
	receive := func(max int, at time.Time) []bus.Handle {
		t.Helper()
		r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: max, Visibility: time.Second, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		return handles(r.Deliveries)
	}
	ack := func(at time.Time, hs ...bus.Handle) []bus.SettleResult {
		t.Helper()
		res, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: hs, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// Each message delivered twice: the first handle goes stale.
	stale := receive(6, now)
	fresh := receive(6, now.Add(2*time.Second))
	if len(stale) != 6 || len(fresh) != 6 {
		t.Fatalf("%d and %d deliveries, want 6 and 6", len(stale), len(fresh))
	}
	now = now.Add(3 * time.Second)
	// Three acked together (a group, ackLive), then one alone (ackOne's
	// path for a story named twice): 3 logged, then 4 moved.
	for _, r := range ack(now, fresh[0], fresh[1], fresh[2]) {
		if !r.OK {
			t.Fatalf("ack: %+v", r)
		}
	}
	if l, m := ackLogRows(t, s); l != 3 || m != 0 {
		t.Fatalf("after 3 acks: %d logged, %d in ack_records; want 3, 0", l, m)
	}
	if r := ack(now, fresh[3], fresh[3]); !r[0].OK || !r[1].OK {
		t.Fatalf("ack of one handle twice: %+v", r)
	}
	if l, m := ackLogRows(t, s); l != 0 || m != 4 {
		t.Fatalf("after 4 acks: %d logged, %d in ack_records; want 0, 4", l, m)
	}
	if r := ack(now, fresh[4]); !r[0].OK {
		t.Fatalf("ack: %+v", r)
	}
	check := func(when string) {
		t.Helper()
		for i := range 5 {
			if r := ack(now, fresh[i]); !r[0].OK {
				t.Errorf("%s: re-ack of m%d with its acknowledging handle: %+v", when, i, r[0])
			}
			if r := ack(now, stale[i]); r[0].OK {
				t.Errorf("%s: re-ack of m%d with an earlier handle succeeded", when, i)
			}
		}
		if r := ack(now, stale[5]); r[0].OK {
			t.Errorf("%s: ack of unacknowledged m5 with an earlier handle succeeded", when)
		}
	}
	check("open")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(ctx, path, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if l, m := ackLogRows(t, s); l != 1 || m != 4 {
		t.Fatalf("after the reopen: %d logged, %d in ack_records; want 1, 4", l, m)
	}
	check("reopened")
	if got := s.w.acked.logged; got != 1 {
		t.Errorf("after the reopen the writer counts %d records in ack_log, want 1", got)
	}
	// Expiry: every record is older than the window.
	p := bus.MaintainParams{Now: now.Add(2 * time.Minute), AckRecordWindow: time.Minute}
	if _, err := s.Maintain(ctx, &p); err != nil {
		t.Fatal(err)
	}
	if l, m := ackLogRows(t, s); l != 0 || m != 0 {
		t.Fatalf("after expiry: %d logged, %d in ack_records; want none", l, m)
	}
	if r := ack(now, fresh[4]); r[0].OK {
		t.Error("re-ack after the records expired succeeded")
	}
	// A connection's removal: records in both tables go with it.
	r := receive(1, now)
	if len(r) != 1 {
		t.Fatalf("%d deliveries of m5", len(r))
	}
	ackLogMergeRows = 1
	ack(now, r[0])
	ackLogMergeRows = 4
	for i := range 2 {
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg(fmt.Sprint("n", i), "t")}, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	ack(now, receive(1, now)...)
	if l, m := ackLogRows(t, s); l != 1 || m != 1 {
		t.Fatalf("before the removal: %d logged, %d in ack_records; want 1, 1", l, m)
	}
	if err := s.Update(ctx, func(tx bus.Tx) error { return tx.ConnectionDelete(q) }); err != nil {
		t.Fatal(err)
	}
	if l, m := ackLogRows(t, s); l != 0 || m != 0 {
		t.Fatalf("after the removal: %d logged, %d in ack_records; want none", l, m)
	}
}

// TestConformanceAckLogMerged runs the shared store tests with every ack
// record moved into ack_records at once, so that re-acks find them there
// rather than in ack_log.
func TestConformanceAckLogMerged(t *testing.T) {
	defer func(n int) { ackLogMergeRows = n }(ackLogMergeRows)
	ackLogMergeRows = 1
	storetest.Run(t, func(t *testing.T) bus.Store {
		s, err := Open(t.Context(), filepath.Join(t.TempDir(), "test.db"), storetest.Logger(t))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	})
}
