package postgres

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// The quick receive's statement, on the generic plan the receive runs it
// on, reads the queue's ready stories in order from stories_ready and stops
// at its limit, even when the plan is made on tables never analyzed (a new
// database, a pool connection readied before the first publishes). Planned
// for the few rows such statistics promise, the claim read every ready
// story of the queue through a bitmap scan and sorted them all to keep 10:
// a cost that grows with the queue, paid by every receive until an
// autovacuum analyze replaced the plan.
func TestQuickReceivePlanOrdered(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	ws, prod, q := setupQueue(t, s, 5)
	ctx := t.Context()
	now := time.Now()
	const stories, take = 2000, 10
	for i := 0; i < stories; i += 500 {
		var msgs []bus.PublishMessage
		for j := i; j < i+500; j++ {
			msgs = append(msgs, testMessage(fmt.Sprint("m", j), fmt.Sprint("s", j)))
		}
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: msgs, Now: now, DedupWindow: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}

	tx, err := s.pool.BeginTx(ctx, txOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, quickReceiveGenericPlans); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `PREPARE quick_receive_plan AS `+quickReceiveSQL); err != nil {
		t.Fatal(err)
	}
	nonces := make([]string, take)
	for i := range nonces {
		nonces[i] = strconv.FormatInt(newNonce(), 10)
	}
	// EXPLAIN EXECUTE takes no parameters of its own: the values are
	// literals (the queue id is a generated id, the rest numbers).
	var out []byte
	err = tx.QueryRow(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE quick_receive_plan('%s', %d, %d, ARRAY[%s]::bigint[], %d)`,
		q, ms(now), take, strings.Join(nonces, ","), ms(now.Add(time.Minute)))).Scan(&out)
	if err != nil {
		t.Fatal(err)
	}
	var plan []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(out, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("explain: %v (%d plans)", err, len(plan))
	}
	root := plan[0].Plan
	if root.ActualRows != take {
		t.Fatalf("the receive returned %d rows, want %d", root.ActualRows, take)
	}
	var looked func(p *planNode) int64
	looked = func(p *planNode) int64 {
		switch p.NodeType {
		case "Seq Scan", "Bitmap Heap Scan":
			if p.ActualLoops > 0 && p.RelationName == "stories" {
				t.Errorf("the generic plan reads stories with a %s (%d rows), want an index scan in order", p.NodeType, p.ActualRows)
			}
		}
		sum := (p.ActualRows + p.RemovedByJoinFilter + p.RemovedByFilter) * max(p.ActualLoops, 1)
		for i := range p.Plans {
			sum += looked(&p.Plans[i])
		}
		return sum
	}
	if rows := looked(&root); rows > 30*take {
		t.Fatalf("a receive of %d from %d ready stories looked at %d rows over its plan, want at most %d", take, stories, rows, 30*take)
	} else {
		t.Logf("a receive of %d from %d ready stories looked at %d rows over its plan", take, stories, rows)
	}
}
