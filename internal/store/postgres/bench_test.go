package postgres

// Store-level message path, without HTTP: 8 goroutines calling the store
// directly, next to a plain insert into a table of the same schema, so the
// store's own cost shows apart from the request path's.
//
//	go test -run '^$' -bench StorePublish -benchtime 5000x ./internal/store/postgres/

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/storetest"
)

// benchQueue makes a workspace with one consumer subscribed to som.> and
// returns the workspace and queue ids.
func benchQueue(b *testing.B, s *Store) (string, string) {
	b.Helper()
	ws, q := bus.NewID(bus.PrefixWorkspace), bus.NewID(bus.PrefixConnection)
	now := time.Now()
	err := s.Update(b.Context(), func(tx bus.Tx) error {
		if err := tx.WorkspaceCreate(bus.Workspace{ID: ws, Name: "bench", CreatedAt: now}); err != nil {
			return err
		}
		return tx.ConnectionCreate(bus.Connection{ID: q, WorkspaceID: ws, Kind: bus.KindConsumer, Name: "c",
			Status: bus.StatusActive, AttemptLimit: 5, QuotaTier: "unlimited",
			Subscriptions: []bus.Subscription{{Topic: "som.>"}}, CreatedAt: now, UpdatedAt: now, SecretState: bus.SecretNone})
	})
	if err != nil {
		b.Fatal(err)
	}
	return ws, q
}

// benchParallel runs b.N calls of fn over workers goroutines.
func benchParallel(b *testing.B, workers int, fn func(i int64) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	b.ResetTimer()
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkStorePublish(b *testing.B) {
	payload := strings.Repeat("x", 1024)
	b.Run("system=plain", func(b *testing.B) {
		s := OpenTest(b)
		ctx := context.Background()
		if _, err := s.pool.Exec(ctx, `CREATE TABLE plain_queue (id bigserial PRIMARY KEY, story text NOT NULL,
			visible_at bigint NOT NULL, payload bytea NOT NULL)`); err != nil {
			b.Fatal(err)
		}
		benchParallel(b, 8, func(i int64) error {
			_, err := s.pool.Exec(ctx, `INSERT INTO plain_queue (story, visible_at, payload) VALUES ($1, 0, $2)`,
				fmt.Sprintf("story-%d", i%1000), []byte(payload))
			return err
		})
	})
	b.Run("system=sombus", func(b *testing.B) {
		s := OpenTest(b)
		ws, _ := benchQueue(b, s)
		ctx := context.Background()
		producer := bus.NewID(bus.PrefixConnection)
		benchParallel(b, 8, func(i int64) error {
			mid := fmt.Sprintf("m-%d", i)
			_, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: producer, Now: time.Now(),
				DedupWindow: bus.DedupWindow, Messages: []bus.PublishMessage{{MessageID: mid, MessageType: "story.context",
					Topic: "som.story.context", CorrelationID: fmt.Sprintf("story-%d", i%1000),
					Envelope: []byte(`{"message_id":"` + mid + `","payload":{"data":"` + payload + `"}}`)}}})
			return err
		})
	})
}

// BenchmarkPublishConsumers publishes single messages into a workspace of
// 1 and of 1,000 consumers (storetest.BenchPublishConsumers), each run on a
// schema of its own.
func BenchmarkPublishConsumers(b *testing.B) {
	storetest.BenchPublishConsumers(b, func(b *testing.B) bus.Store { return OpenTest(b) })
}
