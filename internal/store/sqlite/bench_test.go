package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/storetest"
)

func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "b.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkPublishParallel publishes single messages from many goroutines:
// group commit puts many of them in one transaction (one fsync).
func BenchmarkPublishParallel(b *testing.B) {
	s := benchStore(b)
	ws, prod, _ := setupQueueB(b, s)
	var n atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			_, err := s.MessagePublish(context.Background(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
				Messages: []bus.PublishMessage{msg(fmt.Sprint("m", i), fmt.Sprint("s", i%1000))}, Now: t0, DedupWindow: 5 * time.Minute})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkPublishBatch100 publishes batches of 100 messages.
func BenchmarkPublishBatch100(b *testing.B) {
	s := benchStore(b)
	ws, prod, _ := setupQueueB(b, s)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ms := make([]bus.PublishMessage, 100)
		for j := range ms {
			ms[j] = msg(fmt.Sprint("m", i, "-", j), fmt.Sprint("s", j%10))
		}
		if _, err := s.MessagePublish(context.Background(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: ms, Now: t0, DedupWindow: 5 * time.Minute}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msg/s")
}

// BenchmarkReceiveAckParallel receives and acks batches of 10 from many
// goroutines over a queue filled beforehand.
func BenchmarkReceiveAckParallel(b *testing.B) {
	s := benchStore(b)
	ws, prod, q := setupQueueB(b, s)
	total := b.N*10 + 1000
	for i := 0; i < total; i += 100 {
		ms := make([]bus.PublishMessage, 100)
		for j := range ms {
			ms[j] = msg(fmt.Sprint("m", i+j), fmt.Sprint("s", (i+j)%5000))
		}
		if _, err := s.MessagePublish(context.Background(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: ms, Now: t0}); err != nil {
			b.Fatal(err)
		}
	}
	b.SetParallelism(4)
	b.ResetTimer()
	var got atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, err := s.MessageReceive(context.Background(), &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: t0.Add(time.Second)})
			if err != nil {
				b.Error(err)
				return
			}
			hs := make([]bus.Handle, len(r.Deliveries))
			for i, d := range r.Deliveries {
				hs[i] = d.Handle
			}
			if len(hs) == 0 {
				continue
			}
			if _, err := s.MessageAck(context.Background(), &bus.SettleParams{QueueID: q, Handles: hs, Now: t0.Add(time.Second)}); err != nil {
				b.Error(err)
				return
			}
			got.Add(int64(len(hs)))
		}
	})
	b.ReportMetric(float64(got.Load())/b.Elapsed().Seconds(), "msg/s")
}

func setupQueueB(b *testing.B, s *Store) (string, string, string) {
	ws, prod, cons := bus.NewID("w"), bus.NewID("c"), bus.NewID("c")
	err := s.Update(context.Background(), func(tx bus.Tx) error {
		if err := tx.WorkspaceCreate(bus.Workspace{ID: ws, Name: "ws", CreatedAt: t0}); err != nil {
			return err
		}
		for _, c := range []bus.Connection{
			{ID: prod, WorkspaceID: ws, Kind: bus.KindProducer, Name: "p", Status: bus.StatusActive, AttemptLimit: 5, QuotaTier: "standard", CreatedAt: t0, UpdatedAt: t0},
			{ID: cons, WorkspaceID: ws, Kind: bus.KindConsumer, Name: "c", Status: bus.StatusActive, AttemptLimit: 5, QuotaTier: "standard",
				Subscriptions: []bus.Subscription{{Topic: "som.>"}}, CreatedAt: t0, UpdatedAt: t0},
		} {
			if err := tx.ConnectionCreate(c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return ws, prod, cons
}

// BenchmarkPublishConsumers publishes single messages into a workspace of
// 1 and of 1,000 consumers (storetest.BenchPublishConsumers).
func BenchmarkPublishConsumers(b *testing.B) {
	storetest.BenchPublishConsumers(b, func(b *testing.B) bus.Store { return benchStore(b) })
}
