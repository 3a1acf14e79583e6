package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// rowCounts counts the rows of two tables.
func rowCounts(t *testing.T, s *Store, a, b string) (int, int) {
	t.Helper()
	var na, nb int
	if err := s.read(context.Background(), func(d *dbq) error {
		return d.row(`SELECT (SELECT count(*) FROM `+a+`), (SELECT count(*) FROM `+b+`)`).Scan(&na, &nb)
	}); err != nil {
		t.Fatal(err)
	}
	return na, nb
}

// ackedWaiting is the number of rows named in acked_messages, and of
// message rows.
func ackedWaiting(t *testing.T, s *Store) (named, rows int) {
	t.Helper()
	return rowCounts(t, s, "acked_messages", "messages")
}

// TestAckedRowsWaitAndGo: acknowledged rows wait in acked_messages (the
// flush threshold raised so that none goes) across a reopen: they are not
// counted, not delivered again, not purged as messages, and the chains
// hold; once enough gathered, the writer deletes every one named.
func TestAckedRowsWaitAndGo(t *testing.T) {
	defer func(n int) { ackedFlushRows = n }(ackedFlushRows)
	ackedFlushRows = 1000
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	s, err := Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ws, prod, q := setupQueue(t, s, 5)
	// m0..m29 over s0..s2, m_i at t0+i seconds.
	for i := range 30 {
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg(fmt.Sprint("m", i), fmt.Sprint("s", i%3))},
			Now:      t0.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(time.Minute)
	// Two rounds: m0..m5 acknowledged (the second with one handle, ackOne).
	for round := range 2 {
		r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 3, Visibility: time.Hour, Now: now})
		if err != nil || len(r.Deliveries) != 3 {
			t.Fatalf("round %d: %d deliveries (%v)", round, len(r.Deliveries), err)
		}
		hs := handles(r.Deliveries)
		if round == 1 {
			for _, h := range hs {
				if res, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: []bus.Handle{h}, Now: now}); err != nil || !res[0].OK {
					t.Fatalf("ack %+v: %+v (%v)", h, res, err)
				}
			}
			continue
		}
		if res, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: hs, Now: now}); err != nil || !res[0].OK {
			t.Fatalf("ack: %+v (%v)", res, err)
		}
	}
	if named, rows := ackedWaiting(t, s); named != 6 || rows != 30 {
		t.Fatalf("%d rows named in acked_messages of %d, want 6 of 30", named, rows)
	}
	check := func(s *Store) {
		t.Helper()
		st, err := s.QueueStats(ctx, q, now)
		if err != nil {
			t.Fatal(err)
		}
		// m6 (t0+6s) is the oldest ready message, 54 s before now.
		if st.Ready != 24 || st.InFlight != 0 || st.OldestReadyAgeSeconds != 54 {
			t.Fatalf("stats %+v, want 24 ready, the oldest 54 s old", st)
		}
		checkChains(t, s)
		checkHeads(t, s)
		checkCounts(t, s)
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(ctx, path, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	check(s)
	r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range r.Deliveries {
		got = append(got, d.MessageID)
	}
	if fmt.Sprint(got) != "[m6 m7 m8]" {
		t.Fatalf("after the reopen the heads are %v, want m6 m7 m8", got)
	}
	// The writer counts from 0 after the reopen (the count only times the
	// flush): once 3 rows were named since, every row named goes, those
	// from before the reopen too.
	ackedFlushRows = 3
	if _, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: handles(r.Deliveries), Now: now}); err != nil {
		t.Fatal(err)
	}
	if named, rows := ackedWaiting(t, s); named != 0 || rows != 21 {
		t.Fatalf("after the flush %d rows named, %d rows, want 0 and 21", named, rows)
	}
	checkChains(t, s)
	checkHeads(t, s)
	checkCounts(t, s)
	// A purge counts the queue's messages only, not rows waiting to go.
	ackedFlushRows = 1000
	r, err = s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: handles(r.Deliveries), Now: now}); err != nil {
		t.Fatal(err)
	}
	n, err := s.QueuePurge(ctx, &bus.PurgeParams{QueueID: q, Now: now,
		Audit: bus.AuditEntry{ID: bus.NewID("a"), WorkspaceID: ws, At: now, Actor: "x", Action: "purge", Target: q, Details: map[string]any{}}})
	if err != nil || n != 18 {
		t.Fatalf("purged %d (%v), want 18", n, err)
	}
	if named, rows := ackedWaiting(t, s); named != 0 || rows != 0 {
		t.Fatalf("after the purge %d rows named, %d rows", named, rows)
	}
	checkCounts(t, s)
}

// TestMigrationAckedMessages opens a database of schema 8 with messages
// in flight, migrates it (0010 adds acked_messages and has the counters'
// delete trigger leave named rows alone), and checks that acks, counts,
// expiry and a connection's removal keep the counts and chains right.
func TestMigrationAckedMessages(t *testing.T) {
	defer func(n int) { ackedFlushRows = n }(ackedFlushRows)
	ackedFlushRows = 1000
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := openUpTo(ctx, path, testLogger(t), defaultWAL, 8)
	if err != nil {
		t.Fatal(err)
	}
	ws, prod, q := setupQueue(t, old, 5)
	for i := range 12 {
		if _, err := old.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg(fmt.Sprint("m", i), fmt.Sprint("s", i%3))},
			Now:      t0.Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := old.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 2, Visibility: time.Hour, Now: t0.Add(12 * time.Minute)})
	if err != nil || len(r.Deliveries) != 2 {
		t.Fatalf("%d deliveries (%v)", len(r.Deliveries), err)
	}
	s := reopenMigrated(t, old, path)
	var v int
	if err := s.read(ctx, func(d *dbq) error { return d.row(`SELECT max(version) FROM schema_migrations`).Scan(&v) }); err != nil || v < 10 {
		t.Fatalf("schema version %d (%v), want 10 or later", v, err)
	}
	now := t0.Add(12 * time.Minute)
	if res, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: handles(r.Deliveries), Now: now}); err != nil || !res[0].OK || !res[1].OK {
		t.Fatalf("acks after the migration: %+v (%v)", res, err)
	}
	st, err := s.QueueStats(ctx, q, now)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready != 10 || st.InFlight != 0 || st.OldestReadyAgeSeconds != 600 {
		t.Fatalf("stats %+v, want 10 ready, the oldest (m2) 600 s old", st)
	}
	checkChains(t, s)
	checkCounts(t, s)
	// Retention of 5 minutes at t0+12m: m2..m7 go (m0 and m1 were
	// acknowledged, their rows go too and are not counted as expired).
	res, err := s.Maintain(ctx, &bus.MaintainParams{Now: now, Retention: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Expired != 6 {
		t.Fatalf("expired %d, want 6", res.Expired)
	}
	if named, rows := ackedWaiting(t, s); named != 0 || rows != 4 {
		t.Fatalf("after expiry %d rows named, %d rows, want 0 and 4", named, rows)
	}
	checkChains(t, s)
	checkCounts(t, s)
	got := drainQueue(t, s, q, now)
	if got != 4 {
		t.Fatalf("delivered %d after expiry, want 4 (m8..m11)", got)
	}
	// Rows still named go with their connection, and their names with them.
	if named, _ := ackedWaiting(t, s); named != 4 {
		t.Fatalf("%d rows named after the drain, want 4", named)
	}
	if err := s.Update(ctx, func(tx bus.Tx) error { return tx.ConnectionDelete(q) }); err != nil {
		t.Fatal(err)
	}
	if named, rows := ackedWaiting(t, s); named != 0 || rows != 0 {
		t.Fatalf("after the connection's removal %d rows named, %d rows", named, rows)
	}
}
