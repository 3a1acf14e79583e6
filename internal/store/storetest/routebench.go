package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// BenchPublishConsumers measures single-message publishes into a workspace
// of one consumer, and of 1,000 consumers of which one or ten take the
// message: what routing costs as the number of consumers grows. Each
// store runs it from a benchmark of its own; open returns a fresh, empty
// store and arranges for it to be closed.
func BenchPublishConsumers(b *testing.B, open func(b *testing.B) bus.Store) {
	for _, c := range []struct {
		name                string
		consumers, matching int
	}{
		{"consumers=1", 1, 1},
		{"consumers=1000/match=1", 1000, 1},
		{"consumers=1000/match=10", 1000, 10},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := open(b)
			ws, prod := benchConsumers(b, s, c.consumers, c.matching)
			ctx := context.Background()
			publish := func(i int) {
				out, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
					Messages: []bus.PublishMessage{msgT(fmt.Sprint("m", i), "bench.event", fmt.Sprint("s", i%100))},
					Now:      T0, DedupWindow: 5 * time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				if len(out) != 1 || out[0].Deliveries != c.matching {
					b.Fatalf("publish: %+v, want %d deliveries", out, c.matching)
				}
			}
			// One publish first, out of the measure: a store that compiles
			// routing does it then, once per change of the consumers.
			publish(-1)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				publish(i)
			}
		})
	}
}

// benchConsumers makes a workspace with a producer and n consumers, the
// first matching of which subscribe to the benchmark's messages (their
// topic exactly, through "*", or through ">") and the others to topics
// of their own, and returns the workspace and producer ids.
func benchConsumers(b *testing.B, s bus.Store, n, matching int) (ws, prod string) {
	b.Helper()
	ws, prod = bus.NewID(bus.PrefixWorkspace), bus.NewID(bus.PrefixConnection)
	err := s.Update(context.Background(), func(tx bus.Tx) error {
		if err := tx.WorkspaceCreate(bus.Workspace{ID: ws, Name: "bench", CreatedAt: T0}); err != nil {
			return err
		}
		c := connection(ws, bus.KindProducer, 5)
		c.ID = prod
		if err := tx.ConnectionCreate(c); err != nil {
			return err
		}
		for i := range n {
			subs := []bus.Subscription{
				{Topic: fmt.Sprintf("som.team%d.>", i)},
				{Topic: fmt.Sprintf("som.bench.event%d", i)},
				{Topic: fmt.Sprintf("som.*.event.c%d", i)},
			}
			if i < matching {
				subs = append(subs, bus.Subscription{Topic: []string{"som.bench.event", "som.bench.*", "som.>"}[i%3]})
			}
			if err := tx.ConnectionCreate(connection(ws, bus.KindConsumer, 5, subs...)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return ws, prod
}
