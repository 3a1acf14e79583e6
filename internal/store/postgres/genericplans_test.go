package postgres

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// bigTables are the tables that grow with the queues: a plan that reads
// one of them whole (a sequential scan, or an index walked from end to end
// with its rows only filtered) costs a read as long as the table on every
// execution. Some are small in this test (the dead letters, the ack
// records), but the statements that read them select by ranges, whose
// generic plans expect a third of the table and read it whole at any size.
// (Tables read by key, such as connections, take the index on a generic
// plan once they are big; here they are a few rows, and a full read is
// their cheap plan, so they are not checked. A bitmap scan reads what its
// index conditions select: TestQueueStatsFlatWithDepth counts the rows the
// counts look at, in order or not.)
const bigTables = `(messages|stories|dedup_records|ack_records|dead_letters|queue_samples)\b`

var (
	bigSeqScan   = regexp.MustCompile(`Seq Scan on ` + bigTables)
	bigIndexScan = regexp.MustCompile(`Index (?:Only )?Scan (?:Backward )?using (\S+) on ` + bigTables)
)

// wholeReads returns the nodes of plan (auto_explain's text form) that
// read one of bigTables whole: a sequential scan, or an index scan whose
// Index Cond (among its details: the lines under it, indented deeper,
// before its first child) does not bound the index's first column, as
// leading gives it by index name. Without such a bound the scan walks the
// index from end to end: with no Index Cond at all, with one only on
// later columns, or with only "IS NOT NULL" on the first (which min() and
// max() add). A bound that is a range may still read much of the index;
// this sees only whether there is one. A node that never ran read nothing
// (a subplan for a case that did not arise) and is left out.
func wholeReads(plan string, leading map[string]string) []string {
	var out []string
	lines := strings.Split(plan, "\n")
	for i, line := range lines {
		if strings.Contains(line, "never executed") {
			continue
		}
		if bigSeqScan.MatchString(line) {
			out = append(out, strings.TrimSpace(line))
			continue
		}
		m := bigIndexScan.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		first, bounded := leading[m[1]], false
		column := regexp.MustCompile(`\b` + regexp.QuoteMeta(first) + `\b`)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		for _, d := range lines[i+1:] {
			text := strings.TrimLeft(d, " ")
			if strings.HasPrefix(text, "->") || len(d)-len(text) <= indent {
				break
			}
			if cond, ok := strings.CutPrefix(text, "Index Cond:"); ok && first != "" {
				cond = strings.ReplaceAll(cond, first+" IS NOT NULL", "")
				bounded = column.MatchString(cond)
			}
		}
		if !bounded {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// leadingColumns returns the first column of each index of s's schema by
// index name (expression indexes left out).
func leadingColumns(t *testing.T, s *Store) map[string]string {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `SELECT c.relname::text, a.attname::text
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE c.relnamespace = current_schema()::regnamespace`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var index, column string
		if err := rows.Scan(&index, &column); err != nil {
			t.Fatal(err)
		}
		out[index] = column
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGenericPlansProbe runs a workload of every path of the message, its
// counts, the dead letters and a round of background work on a store whose
// sessions plan each statement without its values (its generic plan, which
// a connection runs when an operator forces it, or when it does not look
// dearer than the plans for the values), on analyzed tables of two queues,
// and fails when a plan reads one of bigTables whole (wholeReads).
// auto_explain, loaded into the store's sessions, sends each plan as a
// notice. The counts, the dead-letter list, the redrive, the purge, the
// samples' reads and prune, and the sweeps of dead letters and ack records
// read whole tables before they ran under probePlanSQL; the retention's
// search for expired messages walked messages_pkey whole until it searched
// messages_enqueued in order.
//
// It needs the database's superuser (to preload auto_explain into a
// session) and PostgreSQL's auto_explain module: it skips without them,
// and fails under CI, where both are there.
func TestGenericPlansProbe(t *testing.T) {
	base := pgtest.URL(t)
	s := openURL(t, base)
	ctx := t.Context()
	if _, err := s.pool.Exec(ctx, `LOAD 'auto_explain'`); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("auto_explain cannot be loaded (superuser and the module are needed): %v", err)
		}
		t.Skipf("auto_explain cannot be loaded here (superuser and the module are needed): %v", err)
	}
	now := time.Now()
	type queue struct{ ws, prod, q string }
	var qs []queue
	for k := range 2 {
		ws, prod, q := setupQueue(t, s, 2)
		qs = append(qs, queue{ws, prod, q})
		publishStories(t, s, ws, prod, fmt.Sprint("m-", k, "-"), 0, 3000, now.Add(-time.Minute))
	}
	// Samples of 200 other queues over the hour before, none of the two
	// queues' own: a queue's latest sample, read by its key, is one step;
	// found by walking queue_samples_at back from the newest (the cheap
	// plan on a table of a few rows), it is all of these.
	if _, err := s.pool.Exec(ctx, `INSERT INTO queue_samples (queue_id, at, ready, in_flight, delayed, dead_letters)
		SELECT 'q-other-' || q, $1::bigint + t * 36000, t, 0, 0, 0 FROM generate_series(1, 200) q, generate_series(1, 100) t`,
		ms(now.Add(-time.Hour))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var plans []string
	noticeHook = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if strings.Contains(n.Message, "Query Text:") {
			mu.Lock()
			plans = append(plans, n.Message)
			mu.Unlock()
		}
	}
	t.Cleanup(func() { noticeHook = nil }) // also when Open fails
	a := openURL(t, base+"&session_preload_libraries=auto_explain&auto_explain.log_min_duration=0"+
		"&auto_explain.log_analyze=on&auto_explain.log_nested_statements=on"+
		"&plan_cache_mode=force_generic_plan&client_min_messages=log")
	noticeHook = nil

	q := qs[0]
	for r := range 3 {
		// With an attempt id: the full receive, which also moves the heads
		// out of attempts (the attempt limit is 2) to the dead letters.
		res, err := a.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q.q, Max: 10, Visibility: time.Minute,
			AttemptID: fmt.Sprint("attempt-", r), AttemptWindow: time.Minute, Now: now.Add(time.Duration(r) * 2 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		hs := handlesOf(res)
		// Released at a time before every other story's, the same heads
		// come first again, until their third receive moves them.
		settle, at := a.MessageAck, now
		if r < 2 {
			settle, at = a.MessageNack, now.Add(-2*time.Minute)
		}
		if _, err := settle(ctx, &bus.SettleParams{QueueID: q.q, Handles: hs, Now: at}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := a.MessageReceive(ctx, &bus.ReceiveParams{QueueID: qs[1].q, Max: 10, Visibility: time.Minute, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.MessageAck(ctx, &bus.SettleParams{QueueID: qs[1].q, Handles: handlesOf(res), Now: now}); err != nil {
		t.Fatal(err)
	}
	// A duplicate id: the full publish. A fresh one: the quick publish.
	for _, id := range []string{"m-0-5", "m-new"} {
		if _, err := a.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: q.ws, ProducerID: q.prod,
			Messages: []bus.PublishMessage{testMessage(id, "story-5")}, Now: now, DedupWindow: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.QueueStats(ctx, q.q, now); err != nil {
		t.Fatal(err)
	}
	if _, err := a.QueueGauges(ctx, now); err != nil {
		t.Fatal(err)
	}
	if _, err := a.QueueSample(ctx, &bus.QueueSampleParams{At: now, Now: now}); err != nil {
		t.Fatal(err)
	}
	if dl, err := a.DeadLetterList(ctx, q.q, 100, 0); err != nil || len(dl) != 10 {
		t.Fatalf("%d dead letters, %v; want the 10 heads received three times", len(dl), err)
	}
	// A round of background work in which nothing has expired yet, the
	// usual case.
	if _, err := a.Maintain(ctx, &bus.MaintainParams{Now: now, Retention: 24 * time.Hour,
		DeadLetterRetention: 7 * 24 * time.Hour, AttemptWindow: 5 * time.Minute, DedupWindow: time.Hour,
		AckRecordWindow: time.Hour}); err != nil {
		t.Fatal(err)
	}

	// What people read and do: the portal's charts and lists, a redrive,
	// a purge, then background work that finds every message past its
	// retention and the samples past theirs.
	if _, err := a.QueueSamples(ctx, q.q, now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.QueueStatsMany(ctx, []string{q.q, qs[1].q}, now); err != nil {
		t.Fatal(err)
	}
	if err := a.View(ctx, func(tx bus.Tx) error {
		if _, err := tx.ConnectionPage(bus.ConnectionPageParams{WorkspaceID: q.ws, Limit: 50}); err != nil {
			return err
		}
		if _, err := tx.ConnectionList(q.ws, ""); err != nil {
			return err
		}
		_, err := tx.AuditList(q.ws, 50, "")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	audit := func(ws, action string) bus.AuditEntry {
		return bus.AuditEntry{ID: bus.NewID(bus.PrefixAudit), WorkspaceID: ws, At: now, Actor: "u-test", Action: action, Target: "t"}
	}
	if n, err := a.DeadLetterRedrive(ctx, &bus.RedriveParams{QueueID: q.q, Now: now, Audit: audit(q.ws, "dead_letters.redrive")}); err != nil || n != 10 {
		t.Fatalf("redrive: %d, %v; want the 10 dead letters", n, err)
	}
	if _, err := a.QueuePurge(ctx, &bus.PurgeParams{QueueID: qs[1].q, Now: now, Audit: audit(qs[1].ws, "queue.purge")}); err != nil {
		t.Fatal(err)
	}
	if res, err := a.Maintain(ctx, &bus.MaintainParams{Now: now, Retention: 30 * time.Second}); err != nil || res.Expired == 0 {
		t.Fatalf("maintain: %+v, %v; want messages past their retention dropped", res, err)
	}
	if _, err := a.QueueSamplePrune(ctx, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}

	leading := leadingColumns(t, s)
	mu.Lock()
	defer mu.Unlock()
	if len(plans) < 20 {
		t.Fatalf("only %d plans came as notices: is auto_explain loaded into the sessions?", len(plans))
	}
	for _, p := range plans {
		for _, node := range wholeReads(p, leading) {
			t.Errorf("a generic plan reads a big table whole (%s):\n%s", node, p)
		}
	}
	t.Logf("%d plans, none reading a big table whole", len(plans))
}

// TestWholeReads holds wholeReads to plans in auto_explain's text form:
// the samples' search for a queue's latest sample walking queue_samples_at
// with a filter (as it planned on a table of a few rows) is a whole read,
// and so are a max() whose only bound is the IS NOT NULL it adds, and a
// bound on a later column of the index only; a seek on the first column,
// a range on it, and a node that never ran are not.
func TestWholeReads(t *testing.T) {
	leading := map[string]string{"queue_samples_at": "at", "queue_samples_pkey": "queue_id",
		"messages_pkey": "story_id", "messages_enqueued": "enqueued_at", "dedup_records_pkey": "producer_id",
		"ack_records_pkey": "queue_id", "stories_ready": "queue_id"}
	const plan = `Query Text: INSERT INTO queue_samples …
Insert on queue_samples  (cost=0.57..9.87 rows=1 width=56) (actual time=0.101..0.102 rows=0 loops=1)
  InitPlan 1 (returns $0)
    ->  Limit  (actual time=0.010..0.010 rows=1 loops=1)
          ->  Index Only Scan Backward using queue_samples_at on queue_samples q  (actual time=0.010..0.010 rows=1 loops=1)
                Index Cond: (at IS NOT NULL)
                Heap Fetches: 0
  ->  Nested Loop Left Join  (cost=0.57..9.86 rows=1 width=56) (actual time=0.080..0.090 rows=2 loops=1)
        ->  Index Scan using connections_workspace on connections c  (actual time=0.010..0.012 rows=2 loops=1)
              Index Cond: (kind = 'consumer'::text)
        ->  Limit  (actual time=0.020..0.021 rows=1 loops=2)
              ->  Index Scan Backward using queue_samples_at on queue_samples l  (actual time=0.020..0.020 rows=1 loops=2)
                    Filter: (queue_id = c.id)
                    Rows Removed by Filter: 40
        ->  Index Scan Backward using queue_samples_pkey on queue_samples l2  (actual time=0.004..0.004 rows=1 loops=2)
              Index Cond: ((queue_id = c.id) AND (at <= $2) AND (at IS NOT NULL))
        ->  Seq Scan on stories s  (never executed)
        ->  Seq Scan on dead_letters d  (actual time=0.004..0.004 rows=0 loops=1)
              Filter: (queue_id = $1)
        ->  Index Only Scan using messages_pkey on messages m  (actual time=0.004..0.004 rows=0 loops=1)
              Index Cond: (seq = 1)
        ->  Index Scan using messages_enqueued on messages e  (actual time=0.004..0.004 rows=0 loops=1)
              Index Cond: (enqueued_at <= $3)
        ->  Index Scan using stories_ready on stories r  (never executed)
  SubPlan 2
    ->  Index Scan using dedup_records_pkey on dedup_records r  (actual time=0.004..0.004 rows=0 loops=1)
          Filter: (producer_id = $2)
Index Scan using ack_records_pkey on ack_records a  (actual time=0.004..0.004 rows=0 loops=1)
  Index Cond: (queue_id = $3)`
	got := wholeReads(plan, leading)
	want := []string{
		"->  Index Only Scan Backward using queue_samples_at on queue_samples q  (actual time=0.010..0.010 rows=1 loops=1)",
		"->  Index Scan Backward using queue_samples_at on queue_samples l  (actual time=0.020..0.020 rows=1 loops=2)",
		"->  Seq Scan on dead_letters d  (actual time=0.004..0.004 rows=0 loops=1)",
		"->  Index Only Scan using messages_pkey on messages m  (actual time=0.004..0.004 rows=0 loops=1)",
		"->  Index Scan using dedup_records_pkey on dedup_records r  (actual time=0.004..0.004 rows=0 loops=1)",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("wholeReads found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// handlesOf returns the receipt handles of res's deliveries.
func handlesOf(res *bus.ReceiveResult) []bus.Handle {
	hs := make([]bus.Handle, len(res.Deliveries))
	for i, d := range res.Deliveries {
		hs[i] = d.Handle
	}
	return hs
}
