package postgres

import (
	"fmt"
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

	tx, err := s.quick.BeginTx(ctx, txOptions(false)) // its sessions' plan settings
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	nonces := make([]int64, take)
	for i := range nonces {
		nonces[i] = newNonce()
	}
	root := explainGeneric(t, tx, quickReceiveSQL, fmt.Sprintf("'%s', %d, %d, %s, %d",
		q, ms(now), take, bigints(nonces), ms(now.Add(time.Minute))))
	if root.ActualRows != take {
		t.Fatalf("the receive returned %d rows, want %d", root.ActualRows, take)
	}
	rows := root.looked(func(p *planNode) {
		switch p.NodeType {
		case "Seq Scan", "Bitmap Heap Scan":
			if p.ActualLoops > 0 && p.RelationName == "stories" {
				t.Errorf("the generic plan reads stories with a %s (%d rows), want an index scan in order", p.NodeType, p.ActualRows)
			}
		}
	})
	if rows > 30*take {
		t.Fatalf("a receive of %d from %d ready stories looked at %d rows over its plan, want at most %d", take, stories, rows, 30*take)
	} else {
		t.Logf("a receive of %d from %d ready stories looked at %d rows over its plan", take, stories, rows)
	}
}
