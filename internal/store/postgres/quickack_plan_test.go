package postgres

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sombus/sombus/internal/bus"
)

// The quick ack's statement, on the generic plan the ack runs it on, probes
// the keys (no sequential scan, no hash or merge join, even when the plan
// is made on nearly empty tables) and looks at a number of rows
// proportional to its handles, not to their square: an ack of 100 heads
// (50 stories that advance, 50 that end) looks at most at 30 rows a handle
// over all the nodes of its plan. The form that also
// filtered every part by id = ANY($1) scanned the whole id list again for
// each row of the acknowledged heads and of their next messages.
func TestQuickAckPlanLinear(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	ws, prod, q := setupQueue(t, s, 5)
	ctx := t.Context()
	now := time.Now()
	const n = 100
	var msgs []bus.PublishMessage
	for i := range n {
		story := fmt.Sprint("s", i)
		msgs = append(msgs, testMessage(story+"-1", story))
		if i%2 == 0 {
			msgs = append(msgs, testMessage(story+"-2", story))
		}
	}
	if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
		Messages: msgs, Now: now, DedupWindow: time.Minute}); err != nil {
		t.Fatal(err)
	}
	res, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: n, Visibility: time.Minute, Now: now})
	if err != nil || len(res.Deliveries) != n {
		t.Fatalf("receive: %d deliveries, %v; want %d", len(res.Deliveries), err, n)
	}
	sids, seqs, nonces := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, d := range res.Deliveries {
		sids[i], seqs[i], nonces[i] = d.Handle.StoryID, d.Handle.Seq, d.Handle.Nonce
	}

	tx, err := s.quick.BeginTx(ctx, txOptions(false)) // its sessions' plan settings
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	root := explainGeneric(t, tx, quickAckSQL, fmt.Sprintf("%s, %s, %s, '%s', %d",
		bigints(sids), bigints(seqs), bigints(nonces), q, ms(now)))
	if root.ActualRows != n/2 {
		t.Fatalf("the ack advanced %d stories, want %d", root.ActualRows, n/2)
	}
	// Rows that every node of the plan produced or filtered out, over all
	// its loops: what the statement looked at. The plan was made on the
	// test's small, never analyzed tables, where reading a whole table is
	// the cheapest way: it must probe the keys all the same.
	rows := root.looked(func(p *planNode) {
		switch p.NodeType {
		case "Seq Scan", "Hash Join", "Merge Join":
			t.Errorf("the generic plan has a %s (%s), want index probes only", p.NodeType, p.RelationName)
		}
	})
	if rows > 30*n {
		t.Fatalf("the ack of %d heads looked at %d rows over its plan (%.0f a handle), want at most 30 a handle", n, rows, float64(rows)/n)
	} else {
		t.Logf("the ack of %d heads looked at %d rows over its plan", n, rows)
	}
	var left int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM stories WHERE queue_id = $1`, q).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != n/2 {
		t.Fatalf("%d stories left after the ack, want the %d that have a next message", left, n/2)
	}
}

// planNode is a node of EXPLAIN (ANALYZE, FORMAT JSON), as far as the
// tests read it.
type planNode struct {
	NodeType            string     `json:"Node Type"`
	RelationName        string     `json:"Relation Name"`
	ActualRows          int64      `json:"Actual Rows"`
	ActualLoops         int64      `json:"Actual Loops"`
	RemovedByJoinFilter int64      `json:"Rows Removed by Join Filter"`
	RemovedByFilter     int64      `json:"Rows Removed by Filter"`
	Plans               []planNode `json:"Plans"`
}

// looked visits p and the nodes below it and returns the rows that every
// node produced or filtered out, over all its loops: what the statement
// looked at.
func (p *planNode) looked(visit func(*planNode)) int64 {
	visit(p)
	sum := (p.ActualRows + p.RemovedByJoinFilter + p.RemovedByFilter) * max(p.ActualLoops, 1)
	for i := range p.Plans {
		sum += p.Plans[i].looked(visit)
	}
	return sum
}

// explainGeneric prepares sql in tx and runs it once under EXPLAIN
// (ANALYZE), with args, the prepared statement's parameters written as SQL
// literals (EXPLAIN EXECUTE takes no parameters of its own); tx has set the
// statement's plan settings. It returns the plan's root.
func explainGeneric(t *testing.T, tx pgx.Tx, sql, args string) planNode {
	t.Helper()
	ctx := t.Context()
	if _, err := tx.Exec(ctx, `PREPARE explained AS `+sql); err != nil {
		t.Fatal(err)
	}
	return explained(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE explained(`+args+`)`))
}

// explained reads the root of the plan row, the answer of an EXPLAIN
// (ANALYZE, FORMAT JSON).
func explained(t *testing.T, row pgx.Row) planNode {
	t.Helper()
	var out []byte
	if err := row.Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plan []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(out, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("explain: %v (%d plans)", err, len(plan))
	}
	return plan[0].Plan
}

// bigints writes xs as an SQL literal of a bigint array.
func bigints(xs []int64) string {
	b := []byte("ARRAY[")
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, x, 10)
	}
	return string(append(b, "]::bigint[]"...))
}
