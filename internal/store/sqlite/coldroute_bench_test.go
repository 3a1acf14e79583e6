package sqlite

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// BenchmarkPublishColdRouting publishes one message to each of many
// workspaces of 100 consumers whose routing this node has not compiled
// yet (the first publish of each after a start), while a probe publishes
// to a workspace whose routing is compiled, one message at a time, and
// reports the probe's latency: what a workspace's first publish costs the
// other writes, which all wait for the one writer. cold-p50-ms is the cold
// publishes' own latency.
//
//	go test -run '^$' -bench PublishColdRouting -benchtime 200x ./internal/store/sqlite/
func BenchmarkPublishColdRouting(b *testing.B) {
	const consumers = 100
	s := benchStore(b)
	ctx := context.Background()
	probeWS, probeProd, _ := setupQueueB(b, s)
	type target struct{ ws, prod string }
	var targets []target
	b.StopTimer()
	for range b.N {
		ws, prod := bus.NewID("w"), bus.NewID("c")
		err := s.Update(ctx, func(tx bus.Tx) error {
			if err := tx.WorkspaceCreate(bus.Workspace{ID: ws, Name: "ws", CreatedAt: t0}); err != nil {
				return err
			}
			if err := tx.ConnectionCreate(bus.Connection{ID: prod, WorkspaceID: ws, Kind: bus.KindProducer, Name: "p",
				Status: bus.StatusActive, AttemptLimit: 5, QuotaTier: "standard", CreatedAt: t0, UpdatedAt: t0}); err != nil {
				return err
			}
			for i := range consumers {
				// Each consumer on a topic of its own, the first also on the
				// messages' topic: a publish goes to one queue.
				subs := []bus.Subscription{{Topic: fmt.Sprint("som.c", i, ".>")}, {Topic: fmt.Sprint("som.c", i, ".story.*"), Producers: []string{prod}}}
				if i == 0 {
					subs = append(subs, bus.Subscription{Topic: "som.story.*"})
				}
				c := bus.Connection{ID: bus.NewID("c"), WorkspaceID: ws, Kind: bus.KindConsumer, Name: fmt.Sprint("c", i),
					Status: bus.StatusActive, AttemptLimit: 5, QuotaTier: "standard", Subscriptions: subs, CreatedAt: t0, UpdatedAt: t0}
				if err := tx.ConnectionCreate(c); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		targets = append(targets, target{ws, prod})
	}
	publish := func(ws, prod, id string) time.Duration {
		t := time.Now()
		_, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg(id, id)}, Now: t0, DedupWindow: 5 * time.Minute})
		if err != nil {
			b.Error(err)
		}
		return time.Since(t)
	}
	publish(probeWS, probeProd, "warm") // compiles the probe's routing

	stop := make(chan struct{})
	var probes []time.Duration
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			probes = append(probes, publish(probeWS, probeProd, fmt.Sprint("probe-", i)))
		}
	})
	cold := make([]time.Duration, len(targets))
	b.StartTimer()
	for i, t := range targets {
		cold[i] = publish(t.ws, t.prod, fmt.Sprint("cold-", i))
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	q := func(ds []time.Duration, f float64) float64 {
		slices.Sort(ds)
		return float64(ds[min(len(ds)-1, int(f*float64(len(ds))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(cold, 0.5), "cold-p50-ms")
	b.ReportMetric(q(probes, 0.5), "probe-p50-ms")
	b.ReportMetric(q(probes, 0.99), "probe-p99-ms")
	b.ReportMetric(float64(len(probes)), "probes")
}
