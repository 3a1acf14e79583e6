package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// checkHeads compares the writer's index of every loaded queue with the
// stories table, on the writer.
func checkHeads(t *testing.T, s *Store) {
	t.Helper()
	err := s.w.do(context.Background(), func(d *dbq) error {
		for queueID, q := range d.heads.queues {
			rows, err := d.query(`SELECT id, story_key, head_seq, tail_seq, head_id, tail_id, visible_at, receive_count, nonce, delayed FROM stories WHERE queue_id = ?`, queueID)
			if err != nil {
				return err
			}
			want := map[int64]head{}
			for rows.Next() {
				var h head
				var delayed int
				if err := rows.Scan(&h.id, &h.key, &h.seq, &h.tail, &h.headID, &h.tailID, &h.visibleAt, &h.receiveCount, &h.nonce, &delayed); err != nil {
					_ = rows.Close()
					return err
				}
				h.delayed = delayed != 0
				want[h.id] = h
			}
			_ = rows.Close()
			if len(want) != len(q.stories) || len(want) != q.byVis.Len() || len(want) != len(q.byKey) {
				return fmt.Errorf("queue %s: %d stories in the table, %d in the index (%d in its tree)", queueID, len(want), len(q.stories), q.byVis.Len())
			}
			recv := 0
			for id, w := range want {
				got := q.stories[id]
				if got == nil || *got != w {
					return fmt.Errorf("queue %s story %d: index %+v, table %+v", queueID, id, got, w)
				}
				if w.receiveCount > 0 {
					recv++
				}
			}
			if recv != q.recv.Len() || recv != q.out.Len() {
				return fmt.Errorf("queue %s: %d received stories, %d in the index (%d in its out set)", queueID, recv, q.recv.Len(), q.out.Len())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s)
}

// checkCounts compares the counts of every consumer queue (QueueStats and
// QueueGauges, through the read pool) with a count of the rows, at each
// moment where a head's state changes (and just before it).
func checkCounts(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	var queues []string
	moments := []int64{t0.UnixMilli()}
	err := s.read(ctx, func(d *dbq) error {
		rows, err := d.query(`SELECT id FROM connections WHERE kind = 'consumer'`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				_ = rows.Close()
				return err
			}
			queues = append(queues, id)
		}
		_ = rows.Close()
		// A head never received is counted ready at any moment (its
		// visible_at is its enqueue time): the moments start after them.
		var first int64
		if err := d.row(`SELECT coalesce(max(visible_at), 0) FROM stories WHERE receive_count = 0`).Scan(&first); err != nil {
			return err
		}
		moments[0] = max(moments[0], first)
		rows, err = d.query(`SELECT DISTINCT visible_at FROM stories WHERE receive_count > 0 AND visible_at > ?`, first)
		if err != nil {
			return err
		}
		for rows.Next() {
			var v int64
			if err := rows.Scan(&v); err != nil {
				_ = rows.Close()
				return err
			}
			moments = append(moments, max(first, v-1), v, v+1)
		}
		_ = rows.Close()
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range moments {
		now := time.UnixMilli(n).UTC()
		gauges, err := s.QueueGauges(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]bus.QueueStats{}
		for _, g := range gauges {
			byID[g.ConnectionID] = g.QueueStats
		}
		for _, q := range queues {
			var want bus.QueueStats
			if err := s.read(ctx, func(d *dbq) error {
				var err error
				want, err = countRows(d, q, n)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			got, err := s.QueueStats(ctx, q, now)
			if err != nil {
				t.Fatal(err)
			}
			if got != want || byID[q] != want {
				t.Fatalf("queue %s at %d: QueueStats %+v, QueueGauges %+v, rows %+v", q, n, got, byID[q], want)
			}
		}
	}
}

func handles(ds []bus.Delivery) []bus.Handle {
	hs := make([]bus.Handle, len(ds))
	for i, d := range ds {
		hs[i] = d.Handle
	}
	return hs
}

// TestHeadsFollowTheTables runs every kind of change to a queue and checks
// after each that the writer's index matches the stories table, including
// after an operation that fails and after a lost transaction.
func TestHeadsFollowTheTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	ws, prod, q := setupQueue(t, s, 2)
	pub := func(at time.Time, ids ...string) {
		t.Helper()
		var ms []bus.PublishMessage
		for i, id := range ids {
			ms = append(ms, msg(id, fmt.Sprint("s", i%3)))
		}
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: ms, Now: at}); err != nil {
			t.Fatal(err)
		}
		checkHeads(t, s)
	}
	recv := func(at time.Time, n int) []bus.Delivery {
		t.Helper()
		r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: n, Visibility: time.Minute, Now: at, AttemptID: "att-" + at.String()})
		if err != nil {
			t.Fatal(err)
		}
		checkHeads(t, s)
		return r.Deliveries
	}
	pub(t0, "a", "b", "c", "d", "e", "f", "g")
	ds := recv(t0.Add(time.Second), 3)
	if len(ds) != 3 {
		t.Fatalf("received %d, want 3", len(ds))
	}
	if _, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: handles(ds[:2]), Now: t0.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	checkHeads(t, s)
	if _, err := s.MessageNack(ctx, &bus.SettleParams{QueueID: q, Handles: handles(ds[2:]), Delay: 5 * time.Second, Now: t0.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	checkHeads(t, s)
	// Receive twice without settling: the attempt limit (2) is used up,
	// and the next receive dead-letters.
	recv(t0.Add(10*time.Second), 10)
	recv(t0.Add(80*time.Second), 10)
	r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Minute, Now: t0.Add(200 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if r.DeadLettered == 0 {
		t.Fatal("nothing dead-lettered")
	}
	checkHeads(t, s)
	if _, err := s.Maintain(ctx, &bus.MaintainParams{Now: t0.Add(400 * time.Second), Retention: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	checkHeads(t, s)
	if _, err := s.DeadLetterRedrive(ctx, &bus.RedriveParams{QueueID: q, Now: t0.Add(401 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	checkHeads(t, s)

	// An operation that changes the index and then fails: its savepoint
	// is rolled back, and the index must not keep its changes.
	boom := errors.New("boom")
	err = s.w.do(ctx, func(d *dbq) error {
		if _, err := receive(d, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Minute, Now: t0.Add(500 * time.Second)}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want boom", err)
	}
	checkHeads(t, s)
	before := recv(t0.Add(501*time.Second), 10)
	if len(before) == 0 {
		t.Fatal("the failed receive kept its claims")
	}

	// Retention drops everything; purge and connection delete drop the queue.
	pub(t0.Add(600*time.Second), "h", "i")
	if _, err := s.Maintain(ctx, &bus.MaintainParams{Now: t0.Add(48 * time.Hour), Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	checkHeads(t, s)
	pub(t0.Add(48*time.Hour), "j", "k")
	if _, err := s.QueuePurge(ctx, &bus.PurgeParams{QueueID: q, Audit: bus.AuditEntry{ID: bus.NewID(bus.PrefixAudit), WorkspaceID: ws, At: t0, Actor: "u-test", Action: "queue.purge", Target: q, Details: map[string]any{}}}); err != nil {
		t.Fatal(err)
	}
	checkHeads(t, s)
	pub(t0.Add(49*time.Hour), "l")
	if err := s.Update(ctx, func(tx bus.Tx) error { return tx.ConnectionDelete(q) }); err != nil {
		t.Fatal(err)
	}
	checkHeads(t, s)
	if _, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 1, Visibility: time.Minute, Now: t0.Add(50 * time.Hour)}); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("receive of a deleted queue: %v, want not found", err)
	}
}

// TestMigrationToLeanHeads opens a database of schema 4 (the one before
// the in-memory index of heads) holding ready, in-flight, delayed,
// acknowledged and dead-lettered messages, migrates it, and finds every
// message in its order and state.
func TestMigrationToLeanHeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := openUpTo(ctx, path, testLogger(t), defaultWAL, 4)
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if err := old.read(ctx, func(d *dbq) error { return d.row(`SELECT max(version) FROM schema_migrations`).Scan(&v) }); err != nil || v != 4 {
		t.Fatalf("old schema version %d (%v), want 4", v, err)
	}
	_, prod, q := setupQueue(t, old, 2)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	// The state the message path of schema 4 left after: m0..m11 published
	// at t0 over s0..s3 (message i to story i%4); the four heads received
	// at t0+1s for an hour; at t0+2s s0's head m0 acknowledged (s0
	// advanced to m4, ready since t0), s2's head m2 released with a delay
	// of 10 minutes, s3's head m3 released at once (received once of its
	// two attempts); s1's head m1 in flight. (This code writes schema 7's
	// columns, so the rows are written as that path wrote them.)
	ms := func(d time.Duration) int64 { return at(d).UnixMilli() }
	const nonce0, nonce1, nonce2, nonce3 = 1001, 1002, 1003, 1004
	err = old.w.do(ctx, func(d *dbq) error {
		type story struct {
			head                       int64
			visibleAt, recv, nonce, dl int64
		}
		stories := []story{
			{head: 2, visibleAt: ms(0), recv: 0, nonce: 0},
			{head: 1, visibleAt: ms(time.Second + time.Hour), recv: 1, nonce: nonce1},
			{head: 1, visibleAt: ms(2*time.Second + 10*time.Minute), recv: 1, nonce: nonce2, dl: 1},
			{head: 1, visibleAt: ms(2 * time.Second), recv: 1, nonce: nonce3},
		}
		for j, st := range stories {
			if _, err := d.exec(`INSERT INTO stories(id, queue_id, story_key, head_seq, tail_seq, visible_at, receive_count, nonce, delayed)
				VALUES (?, ?, ?, ?, 3, ?, ?, ?, ?)`, j+1, q, fmt.Sprint("s", j), st.head, st.visibleAt, st.recv, st.nonce, st.dl); err != nil {
				return err
			}
		}
		for i := 1; i < 12; i++ { // m0 was acknowledged
			id := fmt.Sprint("m", i)
			if _, err := d.exec(`INSERT INTO messages(id, story_id, seq, queue_id, message_id, message_type, topic, correlation_id,
				producer_id, enqueued_at, envelope) VALUES (?, ?, ?, ?, ?, 'story.context', 'som.story.context', ?, ?, ?, ?)`,
				i+1, i%4+1, i/4+1, q, id, fmt.Sprint("s", i%4), prod, ms(0), []byte(`{"message_id":"`+id+`"}`)); err != nil {
				return err
			}
		}
		_, err := d.exec(`INSERT INTO ack_records(queue_id, story_id, seq, nonce, acked_at) VALUES (?, 1, 1, ?, ?)`, q, nonce0, ms(2*time.Second))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	acked := bus.Handle{QueueID: q, StoryID: 1, Seq: 1, Nonce: nonce0}
	inFlight := bus.Handle{QueueID: q, StoryID: 2, Seq: 1, Nonce: nonce1}
	wantStats := func(s *Store, now time.Time) bus.QueueStats {
		st, err := s.QueueStats(ctx, q, now)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// The old schema has no counters: count its rows as the store did
	// before migration 0006.
	var statsBefore bus.QueueStats
	if err := old.read(ctx, func(d *dbq) error {
		var err error
		statsBefore, err = countRows(d, q, at(3*time.Second).UnixMilli())
		return err
	}); err != nil {
		t.Fatal(err)
	}

	s := reopenMigrated(t, old, path)
	if err := s.read(ctx, func(d *dbq) error { return d.row(`SELECT max(version) FROM schema_migrations`).Scan(&v) }); err != nil || v != latestVersion() {
		t.Fatalf("schema version %d (%v), want %d", v, err, latestVersion())
	}
	if st := wantStats(s, at(3*time.Second)); st != statsBefore {
		t.Fatalf("counts after the migration %+v, before %+v", st, statsBefore)
	}
	// The acknowledged delivery re-acks; the in-flight one still acks.
	res, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: []bus.Handle{acked, inFlight}, Now: at(4 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].OK || !res[1].OK {
		t.Fatalf("acks after the migration: %+v", res)
	}
	// Ready now, in claim order: s3's m3 again (visible since its nack),
	// then the heads that became ready by the acks: s0's m4 and s1's m5
	// (enqueued at t0, as m3's story was ready at t0+2s: m4, m5 first).
	r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: at(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range r.Deliveries {
		got = append(got, d.MessageID+"/"+fmt.Sprint(d.ReceiveCount))
	}
	if want := []string{"m4/1", "m5/1", "m3/2"}; !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	// m3, received twice, goes to the dead letters at the next receive and
	// s3's next head m7 is ready since its enqueue (t0); the delayed head
	// (s2's m2) comes back after its delay, then m4 and m5 after their
	// visibility timeout.
	r, err = s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: at(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if r.DeadLettered != 1 {
		t.Fatalf("dead-lettered %d, want 1 (m3)", r.DeadLettered)
	}
	got = got[:0]
	for _, d := range r.Deliveries {
		got = append(got, d.MessageID+"/"+fmt.Sprint(d.ReceiveCount))
	}
	if want := []string{"m7/1", "m2/2", "m4/2", "m5/2"}; !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	dl, err := s.DeadLetterList(ctx, q, 10, 0)
	if err != nil || len(dl) != 1 || dl[0].MessageID != "m3" {
		t.Fatalf("dead letters %+v (%v), want m3", dl, err)
	}
	checkHeads(t, s)
}

// TestSecondProcessRefused: while a store is open, a second open of the
// same file (as a second process would) fails, naming the lock; after
// Close it succeeds.
func TestSecondProcessRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "one.db")
	s, err := Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, path, testLogger(t))
	if err == nil || !errors.Is(err, bus.ErrUnavailable) || !strings.Contains(err.Error(), "another sombus process") {
		t.Fatalf("second open: %v, want a refusal naming the other process", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	_ = s.Close()
}

// TestPublishBatchDedup: a call of distinct ids (the one-statement dedup)
// that holds a live duplicate, an expired record and new ids accepts the
// right ones, in order.
func TestPublishBatchDedup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	ws, prod, q := setupQueue(t, s, 5)
	publish := func(at time.Time, ms ...bus.PublishMessage) []bus.PublishOutcome {
		t.Helper()
		out, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: ms, Now: at, DedupWindow: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	publish(t0, msg("old", "s"))
	publish(t0.Add(90*time.Minute), msg("live", "s"))
	out := publish(t0.Add(2*time.Hour), msg("n1", "s"), msg("live", "s"), msg("old", "t"), msg("n2", "s"))
	var got []string
	for _, o := range out {
		got = append(got, fmt.Sprint(o.Duplicate, "/", o.Deliveries))
	}
	if want := []string{"false/1", "true/1", "false/1", "false/1"}; !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	var ids []string
	for {
		r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Minute, Now: t0.Add(3 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Deliveries) == 0 {
			break
		}
		for _, d := range r.Deliveries {
			ids = append(ids, d.MessageID)
		}
		if _, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: handles(r.Deliveries), Now: t0.Add(3 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	// Story s: old, live, n1, n2 in order; story t: old again.
	if want := []string{"old", "old", "live", "n1", "n2"}; !slices.Equal(ids, want) {
		t.Fatalf("received %v, want %v", ids, want)
	}
	checkHeads(t, s)
}

// countRows counts a queue by scanning its rows, as the store did before
// its counters (migration 0006): the reference the counters must match.
// Acknowledged rows waiting to be deleted (acked_messages) are not counted.
func countRows(d *dbq, queueID string, n int64) (bus.QueueStats, error) {
	var st bus.QueueStats
	var messages int64
	var oldest sql.NullInt64
	// Before migration 0009 there is no acked_messages: nothing to leave out.
	var named int
	if err := d.row(`SELECT count(*) FROM sqlite_schema WHERE name = 'acked_messages'`).Scan(&named); err != nil {
		return st, err
	}
	acked := `SELECT id FROM acked_messages`
	if named == 0 {
		acked = `SELECT 0 WHERE 0`
	}
	err := d.row(`SELECT
		(SELECT count(*) FROM stories s WHERE s.queue_id = ?1 AND s.visible_at > ?2 AND s.delayed = 0),
		(SELECT count(*) FROM stories s WHERE s.queue_id = ?1 AND s.visible_at > ?2 AND s.delayed = 1),
		(SELECT count(*) FROM messages m WHERE m.queue_id = ?1 AND m.id NOT IN (`+acked+`)),
		(SELECT count(*) FROM dead_letters d WHERE d.queue_id = ?1),
		(SELECT m.enqueued_at FROM messages m WHERE m.queue_id = ?1 AND m.id NOT IN (`+acked+`)
			AND NOT EXISTS (SELECT 1 FROM stories s WHERE s.id = m.story_id AND s.head_seq = m.seq AND s.visible_at > ?2)
			ORDER BY m.enqueued_at LIMIT 1)`, queueID, n).Scan(&st.InFlight, &st.Delayed, &messages, &st.DeadLetters, &oldest)
	if err != nil {
		return st, err
	}
	st.Ready = max(0, messages-st.InFlight-st.Delayed)
	if oldest.Valid && oldest.Int64 < n {
		st.OldestReadyAgeSeconds = float64(n-oldest.Int64) / 1000
	}
	return st, nil
}

// TestCountsAfterReopen: a queue the writer has not loaded since the store
// opened is counted from its tables, and the read has the writer load it,
// after which it is counted from the published out set: the same counts.
func TestCountsAfterReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sombus.db")
	s, err := Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ws, prod, q := setupQueue(t, s, 5)
	var ms []bus.PublishMessage
	for i := range 20 {
		ms = append(ms, msg(fmt.Sprint("m", i), fmt.Sprint("s", i%7)))
	}
	if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: ms, Now: t0}); err != nil {
		t.Fatal(err)
	}
	r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 3, Visibility: time.Minute, Now: t0.Add(time.Second)})
	if err != nil || len(r.Deliveries) != 3 {
		t.Fatalf("receive: %v, %d", err, len(r.Deliveries))
	}
	if _, err := s.MessageNack(ctx, &bus.SettleParams{QueueID: q, Handles: []bus.Handle{r.Deliveries[0].Handle}, Delay: time.Hour, Now: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(2 * time.Second)
	want := bus.QueueStats{Ready: 17, InFlight: 2, Delayed: 1, OldestReadyAgeSeconds: 2}
	if st, err := s.QueueStats(ctx, q, now); err != nil || st != want {
		t.Fatalf("before the restart: %+v, %v; want %+v", st, err, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if s.w.heads.snaps.get(q) != nil {
		t.Fatal("an out set is published before the queue loaded")
	}
	if st, err := s.QueueStats(ctx, q, now); err != nil || st != want {
		t.Fatalf("from the tables: %+v, %v; want %+v", st, err, want)
	}
	// The read asked the writer to load the queue.
	for s.w.heads.snaps.get(q) == nil {
		time.Sleep(time.Millisecond)
	}
	if st, err := s.QueueStats(ctx, q, now); err != nil || st != want {
		t.Fatalf("from the out set: %+v, %v; want %+v", st, err, want)
	}
	checkHeads(t, s)
}

// TestRetentionUnlinksMessages: retention dropping messages from the
// middle and the end of a story (enqueued earlier than the head: publish
// times need not grow) keeps the story's chain whole: the next publish
// follows the last message left, and the story delivers what is left in
// order.
func TestRetentionUnlinksMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	ws, prod, q := setupQueue(t, s, 5)
	pub := func(id string, at time.Time) {
		t.Helper()
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: []bus.PublishMessage{msg(id, "s")}, Now: at}); err != nil {
			t.Fatal(err)
		}
	}
	late := t0.Add(2 * time.Hour)
	pub("m1", late)
	pub("m2", t0)
	pub("m3", late)
	pub("m4", t0)
	res, err := s.Maintain(ctx, &bus.MaintainParams{Now: t0.Add(3 * time.Hour), Retention: 2*time.Hour + time.Minute})
	if err != nil || res.Expired != 2 {
		t.Fatalf("maintain: %+v, %v; want m2 and m4 expired", res, err)
	}
	checkHeads(t, s)
	pub("m5", late)
	checkHeads(t, s)
	var got []string
	for range 4 {
		r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: t0.Add(3 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range r.Deliveries {
			got = append(got, d.MessageID)
		}
		if _, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: handles(r.Deliveries), Now: t0.Add(3 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"m1", "m3", "m5"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	checkHeads(t, s)
}
