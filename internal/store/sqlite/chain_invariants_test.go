package sqlite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// checkChains checks, through the read pool, that each story's messages
// form its chain (see TestChainsUnderRandomOperations).
func checkChains(t *testing.T, s *Store) {
	t.Helper()
	err := s.read(context.Background(), func(d *dbq) error {
		var n int
		if err := d.row(`SELECT count(*) FROM (SELECT prev FROM messages WHERE prev <> 0 AND id NOT IN (SELECT head_id FROM stories)
			AND id NOT IN (SELECT id FROM acked_messages) GROUP BY prev HAVING count(*) > 1)`).Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("%d prev values shared", n)
		}
		rows, err := d.query(`SELECT id, head_id, tail_id FROM stories`)
		if err != nil {
			return err
		}
		type st struct{ id, head, tail int64 }
		var ss []st
		for rows.Next() {
			var x st
			if err := rows.Scan(&x.id, &x.head, &x.tail); err != nil {
				_ = rows.Close()
				return err
			}
			ss = append(ss, x)
		}
		rows.Close()
		for _, x := range ss {
			r, err := d.query(`SELECT id, prev FROM messages WHERE story_id = ? AND id NOT IN (SELECT id FROM acked_messages) ORDER BY seq`, x.id)
			if err != nil {
				return err
			}
			var ids, prevs []int64
			for r.Next() {
				var id, p int64
				if err := r.Scan(&id, &p); err != nil {
					_ = r.Close()
					return err
				}
				ids = append(ids, id)
				prevs = append(prevs, p)
			}
			r.Close()
			if len(ids) == 0 {
				return fmt.Errorf("story %d empty", x.id)
			}
			if ids[0] != x.head || ids[len(ids)-1] != x.tail {
				return fmt.Errorf("story %d head/tail %d/%d, rows %v", x.id, x.head, x.tail, ids)
			}
			for i := 1; i < len(ids); i++ {
				if prevs[i] != ids[i-1] {
					return fmt.Errorf("story %d: rows %v prevs %v", x.id, ids, prevs)
				}
			}
			// The head's prev must not be a live row.
			var live int
			if err := d.row(`SELECT count(*) FROM messages WHERE id = ? AND id NOT IN (SELECT id FROM acked_messages)`, prevs[0]).Scan(&live); err != nil {
				return err
			}
			if prevs[0] != 0 && live != 0 {
				return fmt.Errorf("story %d head prev %d is live", x.id, prevs[0])
			}
		}
		var orphans int
		if err := d.row(`SELECT count(*) FROM messages WHERE story_id NOT IN (SELECT id FROM stories)
			AND id NOT IN (SELECT id FROM acked_messages)`).Scan(&orphans); err != nil {
			return err
		}
		if orphans != 0 {
			return fmt.Errorf("%d orphan messages", orphans)
		}
		// An acknowledged row waiting to be deleted has its row, and its
		// story (if any) is past it: it is never a head again.
		var lost, behind int
		if err := d.row(`SELECT count(*) FROM acked_messages WHERE id NOT IN (SELECT id FROM messages)`).Scan(&lost); err != nil {
			return err
		}
		if err := d.row(`SELECT count(*) FROM acked_messages a JOIN messages m ON m.id = a.id
			JOIN stories s ON s.id = m.story_id WHERE m.seq >= s.head_seq`).Scan(&behind); err != nil {
			return err
		}
		if lost != 0 || behind != 0 {
			return fmt.Errorf("acked_messages: %d without their row, %d not behind their story's head", lost, behind)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestChainsUnderRandomOperations runs random publishes, receives, acks,
// nacks (to the dead letters), retention, redrives and reopens on one
// queue, and checks that every story's messages stay one chain: its rows
// in seq order link by prev from head_id to tail_id, no two rows follow
// the same one, no message is left without its story, and the writer's
// index matches the tables.
func TestChainsUnderRandomOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "f.db")
	s, err := Open(ctx, path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	ws, prod, q := setupQueue(t, s, 2)
	r := rand.New(rand.NewPCG(1, 2))
	now := t0
	var held []bus.Delivery
	seen := map[string]int64{} // what the run did, logged at the end
	n := 0
	for step := 0; step < 4000; step++ {
		now = now.Add(time.Duration(r.IntN(2000)) * time.Millisecond)
		switch k := r.IntN(10); {
		case k < 3:
			var ms []bus.PublishMessage
			for range 1 + r.IntN(4) {
				n++
				ms = append(ms, msg(fmt.Sprint("m", n), fmt.Sprint("s", r.IntN(6))))
			}
			if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: ms, Now: now}); err != nil {
				t.Fatal(err)
			}
		case k < 5:
			res, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 1 + r.IntN(3), Visibility: time.Duration(1+r.IntN(5)) * time.Second, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, res.Deliveries...)
		case k < 7 && len(held) > 0:
			i := r.IntN(len(held))
			h := held[i]
			held = append(held[:i], held[i+1:]...)
			if r.IntN(2) == 0 {
				_, err = s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: []bus.Handle{h.Handle}, Now: now})
			} else {
				_, err = s.MessageNack(ctx, &bus.SettleParams{QueueID: q, Handles: []bus.Handle{h.Handle}, Delay: time.Duration(r.IntN(3)) * time.Second, Now: now})
			}
			if err != nil {
				t.Fatal(err)
			}
		case k == 7:
			mr, err := s.Maintain(ctx, &bus.MaintainParams{Now: now, Retention: time.Duration(60+r.IntN(600)) * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			seen["expired"] += int64(mr.Expired)
			seen["dl"] += int64(mr.DeadLettered)
		case k == 8:
			if nr, err := s.DeadLetterRedrive(ctx, &bus.RedriveParams{QueueID: q, Now: now, Audit: bus.AuditEntry{ID: bus.NewID("a"), WorkspaceID: ws, At: now, Actor: "x", Action: "redrive", Target: q, Details: map[string]any{}}}); err != nil {
				t.Fatal(err)
			} else {
				seen["redriven"] += int64(nr)
			}
		case k == 9 && r.IntN(10) == 0:
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = Open(ctx, path, testLogger(t)); err != nil {
				t.Fatal(err)
			}
		}
		if step%50 == 0 {
			checkChains(t, s)
			checkHeads(t, s)
		}
	}
	checkChains(t, s)
	checkHeads(t, s)
	t.Logf("%v published %d", seen, n)
}

// TestFailedOpsInGroupsKeepChains publishes from several goroutines at
// once, a quarter of them in operations that fail after publishing (their
// savepoint rolls back inside a group commit, with the message ids they
// took), with receives and acks between, and checks the chains and the
// index after.
func TestFailedOpsInGroupsKeepChains(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	ws, prod, q := setupQueue(t, s, 3)
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	next := func() int { mu.Lock(); defer mu.Unlock(); n++; return n }
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for range 400 {
				now := t0.Add(time.Duration(r.IntN(1000)) * time.Millisecond)
				var ms []bus.PublishMessage
				for range 1 + r.IntN(3) {
					i := next()
					ms = append(ms, msg(fmt.Sprint("m", i), fmt.Sprint("s", r.IntN(5))))
				}
				p := &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: ms, Now: now}
				switch r.IntN(4) {
				case 0: // publish, then fail
					err := s.w.do(ctx, func(d *dbq) error {
						if _, err := publish(d, &s.routes, p); err != nil {
							return err
						}
						return errors.New("boom")
					})
					if err == nil || err.Error() != "boom" {
						t.Error(err)
						return
					}
				case 1: // receive and ack
					res, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 3, Visibility: time.Hour, Now: now})
					if err != nil {
						t.Error(err)
						return
					}
					if _, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: handles(res.Deliveries), Now: now}); err != nil {
						t.Error(err)
						return
					}
				default:
					if _, err := s.MessagePublish(ctx, p); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	checkChains(t, s)
	checkHeads(t, s)
}
