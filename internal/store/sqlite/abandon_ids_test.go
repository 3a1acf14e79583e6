package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// TestAbandonedBatchOfPublishesKeepsIDs: in each of five rounds, twenty
// publishes form one batch, and one of them publishes and then ends the
// transaction itself, so that the batch is abandoned and the others run
// again in a new one (the message ids the lost transaction took are handed
// out again). The chains and the index hold after each round, and every
// message of the publishes that succeeded is delivered once.
func TestAbandonedBatchOfPublishesKeepsIDs(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := context.Background()
	ws, prod, q := setupQueue(t, s, 3)
	pub := func(id, story string) *bus.PublishParams {
		return &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: []bus.PublishMessage{msg(id, story)}, Now: t0}
	}
	if _, err := s.MessagePublish(ctx, pub("first", "s0")); err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		const n = 20
		ops := make([]func() error, n)
		for i := range n {
			id := fmt.Sprintf("r%d-%d", round, i)
			ops[i] = func() error {
				_, err := s.MessagePublish(ctx, pub(id, fmt.Sprint("s", i%3)))
				return err
			}
			if i == n/2 {
				ops[i] = func() error {
					return s.w.do(ctx, func(d *dbq) error {
						if _, err := publish(d, &s.routes, pub(id, "s1")); err != nil {
							return err
						}
						_, err := d.exec("ROLLBACK")
						return err
					})
				}
			}
		}
		errs := inOneBatch(s, ops)
		for i, err := range errs {
			if (i == n/2) != (err != nil) {
				t.Fatalf("op %d: %v", i, err)
			}
		}
		checkChains(t, s)
		checkHeads(t, s)
	}
	got := drainQueue(t, s, q, t0)
	if got != 1+5*19 {
		t.Fatalf("delivered %d", got)
	}
}

// drainQueue receives and acknowledges everything queue q holds at now and
// returns how many messages that was.
func drainQueue(t *testing.T, s *Store, q string, now time.Time) int {
	t.Helper()
	ctx := context.Background()
	got := 0
	for {
		r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Deliveries) == 0 {
			return got
		}
		got += len(r.Deliveries)
		if _, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: handles(r.Deliveries), Now: now}); err != nil {
			t.Fatal(err)
		}
	}
}
