package bus_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// countingStore counts the queue count queries that reach a store.
type countingStore struct {
	bus.Store
	single, many atomic.Int64
	manyIDs      atomic.Int64 // queue ids asked for, over every QueueStatsMany
}

func (c *countingStore) QueueStats(ctx context.Context, id string, now time.Time) (bus.QueueStats, error) {
	c.single.Add(1)
	return c.Store.QueueStats(ctx, id, now)
}

func (c *countingStore) QueueStatsMany(ctx context.Context, ids []string, now time.Time) (map[string]bus.QueueStats, error) {
	c.many.Add(1)
	c.manyIDs.Add(int64(len(ids)))
	return c.Store.QueueStatsMany(ctx, ids, now)
}

// TestListConnectionsCountsOnePageInOneQuery: listing connections asks the
// store for the queue counts of a whole page at once, one query a page,
// never one per consumer; the pages cover every connection once, with the
// counts of each.
func TestListConnectionsCountsOnePageInOneQuery(t *testing.T) {
	t.Parallel()
	for name, open := range openStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			store := &countingStore{Store: open(t)}
			svc, op, ws, clock := operatorWorkspace(t, store)
			kinds := []bus.ConnectionKind{bus.KindConsumer, bus.KindProducer, bus.KindConsumer, bus.KindConsumer, bus.KindConsumer, bus.KindProducer, bus.KindConsumer}
			var made []string
			for i, k := range kinds {
				p := bus.ConnectionParams{Kind: &k, Name: ptr("c")}
				if k == bus.KindConsumer {
					p.Subscriptions = &[]bus.Subscription{{Topic: "som.>"}}
				}
				c, err := svc.CreateConnection(ctx, op, ws, p)
				if err != nil {
					t.Fatal(err)
				}
				made = append(made, c.ID)
				clock.Advance(time.Duration(i%2) * time.Millisecond) // some share a millisecond
			}
			// Messages, so that every consumer has counts of its own.
			if _, err := store.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: made[1], Now: clock.Now(),
				DedupWindow: time.Minute, Messages: []bus.PublishMessage{{MessageID: "m1", MessageType: "a", Topic: "som.a", CorrelationID: "s",
					Envelope: []byte(`{}`)}, {MessageID: "m2", MessageType: "a", Topic: "som.a", CorrelationID: "s", Envelope: []byte(`{}`)}}}); err != nil {
				t.Fatal(err)
			}
			if _, err := store.MessageReceive(ctx, &bus.ReceiveParams{QueueID: made[2], Max: 1, Visibility: time.Minute, Now: clock.Now()}); err != nil {
				t.Fatal(err)
			}
			clock.Advance(2 * time.Second)

			store.single.Store(0)
			var got []string
			cursor, pages := "", 0
			for ; pages < 100; pages++ {
				page, err := svc.ListConnections(ctx, op, ws, "", 3, cursor)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range page.Connections {
					got = append(got, c.ID)
					switch {
					case c.Kind == bus.KindProducer && c.QueueStats != nil:
						t.Errorf("producer %s has queue counts", c.ID)
					case c.Kind == bus.KindConsumer && c.QueueStats == nil:
						t.Errorf("consumer %s has no queue counts", c.ID)
					case c.ID == made[2] && *c.QueueStats != (bus.QueueStats{Ready: 1, InFlight: 1, OldestReadyAgeSeconds: 2}):
						t.Errorf("counts of the consumer with a message in flight: %+v", *c.QueueStats)
					case c.Kind == bus.KindConsumer && c.ID != made[2] && *c.QueueStats != (bus.QueueStats{Ready: 2, OldestReadyAgeSeconds: 2}):
						t.Errorf("counts of %s: %+v", c.ID, *c.QueueStats)
					}
				}
				if page.NextCursor == nil {
					break
				}
				cursor = *page.NextCursor
			}
			pages++
			if !slices.Equal(got, made) || pages != 3 {
				t.Errorf("%d pages of 3 gave %q, want %q", pages, got, made)
			}
			if n := store.single.Load(); n != 0 {
				t.Errorf("listing counted %d queues one by one", n)
			}
			if n := store.many.Load(); n != int64(pages) {
				t.Errorf("%d count queries for %d pages, want one a page", n, pages)
			}
			if n := store.manyIDs.Load(); n != 5 {
				t.Errorf("count queries asked for %d queues, want the 5 consumers", n)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
