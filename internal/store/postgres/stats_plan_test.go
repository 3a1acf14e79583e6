package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// A queue's counts (ready, in flight, delayed, dead letters, oldest ready)
// are read in a time that does not grow with its depth, nor with other
// queues' older messages: the statement looks at about as many rows with
// 3,000 ready messages as with 7, on plans made on tables never analyzed
// and on tables analyzed. A plan that counted the queue's messages, or
// walked every queue's messages by age (the hazard queueCountFrom's comment
// names), would look at thousands.
func TestQueueStatsFlatWithDepth(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	ctx := t.Context()
	now := time.Now()
	// Another queue's messages, all older than this queue's.
	wsB, prodB, _ := setupQueue(t, s, 5)
	publishStories(t, s, wsB, prodB, "m-", 0, 3000, now.Add(-time.Hour))
	ws, prod, q := setupQueue(t, s, 5)
	publishStories(t, s, ws, prod, "m-", 0, 10, now.Add(-time.Second))
	// Three heads out, in flight, older than every ready message to come
	// (three of the seven ready are as old).
	if res, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 3, Visibility: time.Minute, Now: now}); err != nil || len(res.Deliveries) != 3 {
		t.Fatalf("receive: %v, %v; want 3 deliveries", res, err)
	}

	// looked returns the rows the counts' statement looked at, under the
	// plan settings the store gives it (countsPlan), on its plan for these
	// values (as the first executions on a connection run it) and on its
	// generic plan (as later ones may), whichever looked at more.
	looked := func(wantReady int64) int64 {
		t.Helper()
		st, err := s.QueueStats(ctx, q, now)
		if err != nil || st.Ready != wantReady || st.InFlight != 3 {
			t.Fatalf("stats: %+v, %v; want %d ready, 3 in flight", st, err, wantReady)
		}
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		tx, err := conn.BeginTx(ctx, txOptions(true))
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = tx.Rollback(ctx)
			// A prepared statement outlives its transaction.
			if _, err := conn.Exec(ctx, `DEALLOCATE explained`); err != nil {
				t.Fatal(err)
			}
		}()
		if err := probePlan(ctx, tx); err != nil {
			t.Fatal(err)
		}
		custom := explained(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+queueStatsQuery, []string{q}, ms(now)))
		if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
			t.Fatal(err)
		}
		generic := explainGeneric(t, tx, queueStatsQuery, fmt.Sprintf("ARRAY['%s']::text[], %d", q, ms(now)))
		noScan := func(p *planNode) {
			if p.NodeType == "Seq Scan" && (p.RelationName == "messages" || p.RelationName == "stories") {
				t.Errorf("the counts' plan reads all of %s", p.RelationName)
			}
		}
		return max(custom.looked(noScan), generic.looked(noScan))
	}
	// queueStats runs its count under those settings (sent with it, in one
	// round trip).
	func() {
		tx, err := s.pool.BeginTx(ctx, txOptions(true))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if got, err := queueStats(ctx, tx, []string{q}, now); err != nil || got[q].InFlight != 3 {
			t.Fatalf("queueStats: %+v, %v", got, err)
		}
		var seq, bitmap string
		if err := tx.QueryRow(ctx, `SELECT current_setting('enable_seqscan'), current_setting('enable_bitmapscan')`).Scan(&seq, &bitmap); err != nil {
			t.Fatal(err)
		}
		if seq != "off" || bitmap != "off" {
			t.Fatalf("after queueStats enable_seqscan is %s and enable_bitmapscan %s, want off", seq, bitmap)
		}
	}()
	shallow := looked(7)
	publishStories(t, s, ws, prod, "m-", 10, 3000, now)
	deep := looked(3007)
	// And on plans made with the tables' statistics, as autovacuum's
	// analyze gives them once a table has changed enough.
	if _, err := s.pool.Exec(ctx, `ANALYZE messages, stories, queue_counts`); err != nil {
		t.Fatal(err)
	}
	analyzed := looked(3007)
	t.Logf("the counts looked at %d rows with 7 ready, %d with 3,007, %d with 3,007 analyzed", shallow, deep, analyzed)
	if deep > shallow+20 || analyzed > shallow+20 {
		t.Errorf("the counts looked at %d and %d (analyzed) rows with 3,007 ready against %d with 7: they grow with the depth", deep, analyzed, shallow)
	}
}

// publishStories publishes count messages to ws as prod at at, in batches
// of 100: ids prefix followed by first, first+1, …, each on the story
// story-<its number mod 1,000>.
func publishStories(t testing.TB, s *Store, ws, prod, prefix string, first, count int, at time.Time) {
	t.Helper()
	for i := 0; i < count; i += 100 {
		var msgs []bus.PublishMessage
		for j := first + i; j < first+min(i+100, count); j++ {
			msgs = append(msgs, testMessage(fmt.Sprint(prefix, j), fmt.Sprint("story-", j%1000)))
		}
		if _, err := s.MessagePublish(t.Context(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: msgs, Now: at, DedupWindow: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
}
