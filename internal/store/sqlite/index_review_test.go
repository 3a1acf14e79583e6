package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// An op that changes the index (ack) and then fails: the index must be dropped.
func TestIndexDroppedWhenAnOpFailsAfterAChange(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	ws, prod, q := setupQueue(t, s, 3)
	var ms []bus.PublishMessage
	for i := range 6 {
		ms = append(ms, msg(fmt.Sprint("m", i), fmt.Sprint("s", i%3)))
	}
	if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: ms, Now: t0}); err != nil {
		t.Fatal(err)
	}
	r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 2, Visibility: time.Hour, Now: t0.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = s.w.do(ctx, func(d *dbq) error {
		if _, err := ackAll(d, &bus.SettleParams{QueueID: q, Handles: handles(r.Deliveries), Now: t0.Add(2 * time.Second)}); err != nil {
			return err
		}
		if _, err := publish(d, &s.routes, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: []bus.PublishMessage{msg("x", "s9")}, Now: t0}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	checkHeads(t, s)
	res, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: handles(r.Deliveries), Now: t0.Add(3 * time.Second)})
	if err != nil || !res[0].OK || !res[1].OK {
		t.Fatalf("%v %+v", err, res)
	}
	checkHeads(t, s)
}

// Many concurrent ops, some failing after changing the index, in shared batches.
func TestIndexFollowsConcurrentFailures(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	ws, prod, q := setupQueue(t, s, 3)
	var wg sync.WaitGroup
	now := t0
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				m := msg(fmt.Sprint("g", g, "-", i), fmt.Sprint("s", i%5))
				if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: []bus.PublishMessage{m}, Now: now, DedupWindow: time.Hour}); err != nil {
					t.Error(err)
					return
				}
				r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 2, Visibility: time.Millisecond, Now: now.Add(time.Duration(i) * time.Millisecond)})
				if err != nil {
					t.Error(err)
					return
				}
				if len(r.Deliveries) == 0 {
					continue
				}
				switch i % 3 {
				case 0:
					_, _ = s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: handles(r.Deliveries), Now: now})
				case 1:
					_, _ = s.MessageNack(ctx, &bus.SettleParams{QueueID: q, Handles: handles(r.Deliveries), Delay: time.Second, Now: now})
				case 2:
					_ = s.w.do(ctx, func(d *dbq) error {
						if _, err := ackAll(d, &bus.SettleParams{QueueID: q, Handles: handles(r.Deliveries), Now: now}); err != nil {
							return err
						}
						return errors.New("fail after ack")
					})
				}
			}
		}()
	}
	wg.Wait()
	checkHeads(t, s)
}

// A load of a queue that fails half way (here: a row that cannot be scanned)
// leaves the partial queue in touched; the next commit publishes its out set.
func TestFailedLoadPublishesNothing(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	ws, prod, q := setupQueue(t, s, 3)
	if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
		Messages: []bus.PublishMessage{msg("a", "s1"), msg("b", "s2"), msg("c", "s3")}, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 3, Visibility: time.Hour, Now: t0}); err != nil {
		t.Fatal(err)
	}
	// s1 and s2 are in flight. Make s2's row unreadable as an integer, and drop the index.
	if err := s.w.do(ctx, func(d *dbq) error {
		_, err := d.exec(`UPDATE stories SET tail_seq = 'zzz' WHERE story_key = 's2'`)
		d.heads.reset()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	st, _ := s.QueueStats(ctx, q, t0.Add(time.Second))
	t.Logf("before failed load: %+v", st)
	_, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 1, Visibility: time.Hour, Now: t0.Add(time.Second)})
	t.Logf("receive: %v", err)
	s.w.heads.snaps.mu.RLock()
	_, published := s.w.heads.snaps.m[q]
	s.w.heads.snaps.mu.RUnlock()
	_, loaded := s.w.heads.queues[q]
	t.Logf("published snapshot: %v, loaded: %v", published, loaded)
	st, _ = s.QueueStats(ctx, q, t0.Add(time.Second))
	t.Logf("after failed load: %+v", st)
	if st.InFlight != 3 {
		t.Errorf("in flight %d after a failed load, the table says 3", st.InFlight)
	}
}

// A Tx that fails after ConnectionDelete of a missing id drops every queue's index.
func TestFailedConnectionChangeKeepsTheIndex(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	ws, prod, q := setupQueue(t, s, 3)
	if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: []bus.PublishMessage{msg("a", "s1")}, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 1, Visibility: time.Hour, Now: t0}); err != nil {
		t.Fatal(err)
	}
	loaded := func() (n int) {
		_ = s.w.do(ctx, func(d *dbq) error { n = len(d.heads.queues); return nil })
		return n
	}
	t.Logf("queues loaded before: %d", loaded())
	err := s.Update(ctx, func(tx bus.Tx) error { return tx.ConnectionDelete("c_missing") })
	t.Logf("delete of a missing connection: %v", err)
	if n := loaded(); n == 0 {
		t.Errorf("a failed ConnectionDelete of an unknown id dropped every queue's index (loaded now %d)", n)
	}
}

func TestLockOddPathsAndFailedOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, name := range []string{"a b.db", "ünï%20cödé.db", "semi;colon&amp=x.db", "-lock"} {
		p := dir + "/" + name
		s, err := Open(ctx, p, testLogger(t))
		if err != nil {
			t.Errorf("%q: %v", name, err)
			continue
		}
		if s2, err := Open(ctx, p, testLogger(t)); err == nil {
			_ = s2.Close()
			t.Errorf("%q: second open allowed", name)
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		s, err = Open(ctx, p, testLogger(t))
		if err != nil {
			t.Errorf("%q: reopen after close: %v", name, err)
			continue
		}
		_ = s.Close()
	}
	// Open of a file that is no database fails; the lock must be released.
	bad := dir + "/bad.db"
	if err := writeFile(bad, []byte("this is not a database, this is not a database, this is not a database, 0123456789")); err != nil {
		t.Fatal(err)
	}
	_, err1 := Open(ctx, bad, testLogger(t))
	_, err2 := Open(ctx, bad, testLogger(t))
	t.Logf("first: %v\nsecond: %v", err1, err2)
	if err2 != nil && errors.Is(err2, bus.ErrUnavailable) {
		t.Errorf("lock left held after a failed open: %v", err2)
	}
}

func writeFile(p string, b []byte) error { return os.WriteFile(p, b, 0o600) }

func TestLockFollowsSymlinks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	real := dir + "/real.db"
	s, err := Open(ctx, real, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.Symlink(real, dir+"/link.db"); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(ctx, dir+"/link.db", testLogger(t))
	if err == nil {
		_ = s2.Close()
		t.Errorf("a second store opened the same database through a symlink")
	}
}

// The counts read the tables and the writer's published heads out; a
// commit between the two must not mix them: with every message in flight
// and acks going on, no count may ever show a ready message.
func TestCountsNeverMixTwoCommits(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	ws, prod, q := setupQueue(t, s, 3)
	const n = 200
	var ms []bus.PublishMessage
	for i := range n {
		ms = append(ms, msg(fmt.Sprint("m", i), fmt.Sprint("s", i)))
	}
	if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: ms, Now: t0}); err != nil {
		t.Fatal(err)
	}
	r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: n, Visibility: time.Hour, Now: t0})
	if err != nil || len(r.Deliveries) != n {
		t.Fatalf("receive: %v, %d", err, len(r.Deliveries))
	}
	now := t0.Add(time.Second)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, d := range r.Deliveries {
			if _, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: handles([]bus.Delivery{d}), Now: now}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for reads := 0; ; reads++ {
		select {
		case <-done:
			t.Logf("%d reads during %d acks", reads, n)
			return
		default:
		}
		st, err := s.QueueStats(ctx, q, now)
		if err != nil {
			t.Fatal(err)
		}
		if st.Ready != 0 {
			t.Fatalf("counts during the acks: %+v: no message of the queue was ever ready", st)
		}
	}
}
