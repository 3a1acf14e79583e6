package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// checkCounters fails t unless every queue's counter rows add up to its
// rows in messages and dead_letters.
func checkCounters(t *testing.T, s *Store) {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `WITH real AS (
			SELECT queue_id, sum(m) AS m, sum(d) AS d FROM (
				SELECT queue_id, count(*) AS m, 0 AS d FROM messages GROUP BY queue_id
				UNION ALL SELECT queue_id, 0, count(*) FROM dead_letters GROUP BY queue_id) x GROUP BY queue_id),
		kept AS (SELECT queue_id, sum(messages) AS m, sum(dead_letters) AS d FROM queue_counts GROUP BY queue_id)
		SELECT coalesce(r.queue_id, k.queue_id), coalesce(r.m, 0)::bigint, coalesce(r.d, 0)::bigint,
			coalesce(k.m, 0)::bigint, coalesce(k.d, 0)::bigint
		FROM real r FULL JOIN kept k ON k.queue_id = r.queue_id
		WHERE coalesce(r.m, 0) <> coalesce(k.m, 0) OR coalesce(r.d, 0) <> coalesce(k.d, 0)`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var q string
		var m, d, km, kd int64
		if err := rows.Scan(&q, &m, &d, &km, &kd); err != nil {
			t.Fatal(err)
		}
		t.Errorf("queue %s: %d messages and %d dead letters, counters say %d and %d", q, m, d, km, kd)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestQueueCountersConcurrent publishes, receives, acks, nacks and
// dead-letters on one queue from two nodes at once (attempt limit 2, so
// some messages go to the dead letters as they are nacked twice), then
// checks the counters against the rows and the counts against a count.
func TestQueueCountersConcurrent(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	nodes := []*Store{openURL(t, url), openURL(t, url)}
	ws, prod, q := setupQueue(t, nodes[0], 2)
	ctx := t.Context()
	errs := make(chan error, 8)
	for w := range 8 {
		node := nodes[w%2]
		go func() {
			errs <- func() error {
				for i := range 40 {
					var msgs []bus.PublishMessage
					for k := range 3 {
						msgs = append(msgs, testMessage(fmt.Sprintf("w%d-%d-%d", w, i, k), fmt.Sprintf("s%d", (w*7+i+k)%20)))
					}
					if _, err := node.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
						Messages: msgs, Now: time.Now(), DedupWindow: time.Minute}); err != nil {
						return err
					}
					res, err := node.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 4, Visibility: time.Minute, Now: time.Now()})
					if err != nil {
						return err
					}
					for j, d := range res.Deliveries {
						settle := node.MessageAck
						if (i+j)%3 == 0 {
							settle = node.MessageNack
						}
						if _, err := settle(ctx, &bus.SettleParams{QueueID: q, Handles: []bus.Handle{d.Handle}, Now: time.Now()}); err != nil {
							return err
						}
					}
				}
				return nil
			}()
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	checkCounters(t, nodes[0])
	now := time.Now()
	st, err := nodes[1].QueueStats(ctx, q, now)
	if err != nil {
		t.Fatal(err)
	}
	var msgs, dead, out int64
	if err := nodes[0].pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM messages WHERE queue_id = $1),
		(SELECT count(*) FROM dead_letters WHERE queue_id = $1),
		(SELECT count(*) FROM stories WHERE queue_id = $1 AND visible_at > $2)`, q, ms(now)).Scan(&msgs, &dead, &out); err != nil {
		t.Fatal(err)
	}
	if st.Ready+st.InFlight+st.Delayed != msgs || st.InFlight+st.Delayed != out || st.DeadLetters != dead {
		t.Errorf("QueueStats %+v; counted %d messages, %d out, %d dead letters", st, msgs, out, dead)
	}
	if dead == 0 {
		t.Errorf("no dead letters: the test did not move any")
	}
}

// TestQueueCounterSlots: two transactions that change the same queue's
// counts at once take different counter rows, so the second does not wait
// for the first to commit.
func TestQueueCounterSlots(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	_, _, q := setupQueue(t, s, 5)
	ctx := t.Context()
	insert := func(tx pgx.Tx, seq int) int {
		t.Helper()
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO messages (story_id, seq, queue_id, message_id, message_type, topic,
			correlation_id, producer_id, enqueued_at, envelope) VALUES (-1, $2, $1, 'm', 't', 't', 's', 'p', 0, '')`, q, seq); err != nil {
			t.Fatalf("insert %d: %v", seq, err)
		}
		var slot int
		if err := tx.QueryRow(ctx, `SELECT current_setting('sombus.count_slot')::int`).Scan(&slot); err != nil {
			t.Fatal(err)
		}
		return slot
	}
	tx1, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx1.Rollback(context.Background()) }()
	tx2, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx2.Rollback(context.Background()) }()
	s1, s2 := insert(tx1, 1), insert(tx2, 2)
	if s1 == s2 {
		t.Errorf("both transactions took counter slot %d", s1)
	}
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	checkCounters(t, s)
	var rows int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM queue_counts WHERE queue_id = $1`, q).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 2 {
		t.Errorf("%d counter rows, want 2", rows)
	}
}

// dropCounters takes the schema back to version 7: no counters (their
// foreign key goes with them), no triggers, nor what later migrations
// added (the sample rounds, the failure log, the skills' foreign key).
func dropCounters(t *testing.T, s *Store) {
	t.Helper()
	if _, err := s.pool.Exec(t.Context(), `DROP TABLE queue_counts;
		DROP TRIGGER queue_counts_messages_in ON messages; DROP TRIGGER queue_counts_messages_out ON messages;
		DROP TRIGGER queue_counts_dead_in ON dead_letters; DROP TRIGGER queue_counts_dead_out ON dead_letters;
		DROP FUNCTION queue_counts_messages_in(), queue_counts_messages_out(), queue_counts_dead_in(),
			queue_counts_dead_out(), queue_counts_slot();
		DROP TABLE sample_rounds;
		DROP TABLE auth_failure_log;
		ALTER TABLE skills DROP CONSTRAINT skills_connection_id_fkey;
		DELETE FROM schema_migrations WHERE version >= 8`); err != nil {
		t.Fatal(err)
	}
}

// TestQueueCountsMigrationLive: migration 0008 runs while another node
// publishes, receives, settles, dead-letters and redrives on the schema;
// afterwards the counters match the rows (no change counted twice or
// missed).
func TestQueueCountsMigrationLive(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openURL(t, url)
	ws, prod, q := setupQueue(t, s, 1)
	dropCounters(t, s)
	ctx := t.Context()
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for w := range 4 {
		go func() {
			errs <- func() error {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return nil
					default:
					}
					msgs := []bus.PublishMessage{testMessage(fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf("s%d", (w+i)%10))}
					if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
						Messages: msgs, Now: time.Now(), DedupWindow: time.Minute}); err != nil {
						return err
					}
					res, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 2, Visibility: time.Minute, Now: time.Now()})
					if err != nil {
						return err
					}
					for j, d := range res.Deliveries {
						settle := s.MessageAck
						if (i+j)%2 == 0 {
							settle = s.MessageNack // attempt limit 1: a dead letter
						}
						if _, err := settle(ctx, &bus.SettleParams{QueueID: q, Handles: []bus.Handle{d.Handle}, Now: time.Now()}); err != nil {
							return err
						}
					}
					if i%5 == 0 {
						if _, err := s.DeadLetterRedrive(ctx, &bus.RedriveParams{QueueID: q, Now: time.Now(),
							Audit: bus.AuditEntry{ID: bus.NewID(bus.PrefixAudit), WorkspaceID: ws, At: time.Now(),
								Actor: "t", Action: "queue.redrive", Target: q}}); err != nil {
							return err
						}
					}
				}
			}()
		}()
	}
	time.Sleep(300 * time.Millisecond)
	s2 := openURL(t, url) // migrates while the writers run
	time.Sleep(300 * time.Millisecond)
	close(stop)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	checkCounters(t, s2)
}

// TestQueueCountsBackfill: migration 0008 counts the rows that were there
// before it. The schema is taken back to version 7 (the counters and their
// triggers dropped) with messages and dead letters in place, then a new
// store migrates it again.
func TestQueueCountsBackfill(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openURL(t, url)
	ws, prod, q := setupQueue(t, s, 1)
	ctx := t.Context()
	now := time.Now().Add(-time.Minute)
	var msgs []bus.PublishMessage
	for i := range 10 {
		msgs = append(msgs, testMessage(fmt.Sprint("m", i), fmt.Sprint("s", i%4)))
	}
	if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: msgs, Now: now, DedupWindow: time.Minute}); err != nil {
		t.Fatal(err)
	}
	res, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 3, Visibility: time.Hour, Now: now})
	if err != nil || len(res.Deliveries) != 3 {
		t.Fatalf("receive: %v, %d deliveries", err, len(res.Deliveries))
	}
	if _, err := s.MessageNack(ctx, &bus.SettleParams{QueueID: q, Handles: []bus.Handle{res.Deliveries[0].Handle}, Now: now}); err != nil {
		t.Fatal(err)
	}
	want, err := s.QueueStats(ctx, q, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if want.DeadLetters != 1 || want.InFlight != 2 || want.Ready != 7 {
		t.Fatalf("setup: %+v", want)
	}
	dropCounters(t, s)
	s2 := openURL(t, url)
	checkCounters(t, s2)
	got, err := s2.QueueStats(ctx, q, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got.Ready != want.Ready || got.InFlight != want.InFlight || got.DeadLetters != want.DeadLetters {
		t.Errorf("after the migration: %+v, want %+v", got, want)
	}
}

// TestQueueCounterSlotPerConnection: each pool connection holds a counter
// slot of its own from its start (a session advisory lock and the session
// setting); its writing transactions take no transaction lock for the
// slot; and a transaction without the setting (as a node of an earlier
// version runs them) cannot take a slot that a connection holds.
func TestQueueCounterSlotPerConnection(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openURL(t, url)
	_, _, q := setupQueue(t, s, 5)
	ctx := t.Context()
	held := map[int]bool{}
	var conns []*pgxpool.Conn
	for range 3 {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		conns = append(conns, c)
		var slot string
		var locks int
		if err := c.QueryRow(ctx, `SELECT current_setting('sombus.count_slot', true),
			(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND objsubid = 1)`).Scan(&slot, &locks); err != nil {
			t.Fatal(err)
		}
		var n int
		if _, err := fmt.Sscan(slot, &n); err != nil || n < 0 || n > 63 {
			t.Fatalf("connection's counter slot %q", slot)
		}
		if held[n] {
			t.Errorf("two connections hold counter slot %d", n)
		}
		held[n] = true
		if locks != 1 {
			t.Errorf("connection holds %d advisory locks of the slot key space, want 1", locks)
		}
	}

	// A writing transaction on a connection counts in its slot, taking no
	// further advisory lock.
	c := conns[0]
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO messages (story_id, seq, queue_id, message_id, message_type, topic,
		correlation_id, producer_id, enqueued_at, envelope) VALUES (-1, 1, $1, 'm', 't', 't', 's', 'p', 0, '')`, q); err != nil {
		t.Fatal(err)
	}
	var slot, locks int
	if err := tx.QueryRow(ctx, `SELECT current_setting('sombus.count_slot')::int,
		(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND objsubid = 1)`).Scan(&slot, &locks); err != nil {
		t.Fatal(err)
	}
	if !held[slot] || locks != 1 {
		t.Errorf("writing transaction: slot %d (held %v), %d advisory locks, want its connection's slot and 1 lock", slot, held, locks)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var rowSlot int
	if err := s.pool.QueryRow(ctx, `SELECT slot FROM queue_counts WHERE queue_id = $1 AND messages = 1`, q).Scan(&rowSlot); err != nil {
		t.Fatal(err)
	}
	if rowSlot != slot {
		t.Errorf("counted in slot %d, want the connection's %d", rowSlot, slot)
	}

	// A session of its own, without the setting: every slot the pool's
	// connections hold is taken for it, and queue_counts_slot() gives it
	// another.
	raw, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = raw.Close(context.Background()) }()
	rtx, err := raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rtx.Rollback(context.Background()) }()
	for n := range held {
		var got bool
		if err := rtx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(
			((hashtext(coalesce(current_schema(), ''))::bigint & 4294967295) << 8) | $1)`, n).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got {
			t.Errorf("a transaction of another session took slot %d, held by a pool connection", n)
		}
	}
	var other int
	if err := rtx.QueryRow(ctx, `SELECT queue_counts_slot()`).Scan(&other); err != nil {
		t.Fatal(err)
	}
	if held[other] {
		t.Errorf("queue_counts_slot() without the setting gave slot %d, held by a pool connection", other)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM messages WHERE queue_id = $1`, q); err != nil {
		t.Fatal(err)
	}
	checkCounters(t, s)
}
