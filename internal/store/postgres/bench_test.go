package postgres

// Store-level message path, without HTTP: 8 goroutines calling the store
// directly, next to a plain insert into a table of the same schema, so the
// store's own cost shows apart from the request path's.
//
//	go test -run '^$' -bench StorePublish -benchtime 5000x ./internal/store/postgres/

import (
	"context"
	"fmt"
	"os"
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
func benchQueue(b testing.TB, s *Store) (string, string) {
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

// benchDepths are the queue depths of BenchmarkDepthQueueStats: empty and
// 100,000 queued, and 1,000,000 with SOMBUS_BENCH_MILLION set.
func benchDepths() []int {
	ds := []int{0, 100000}
	if os.Getenv("SOMBUS_BENCH_MILLION") != "" {
		ds = append(ds, 1000000)
	}
	return ds
}

// fillDepth queues depth messages (at least one per story) on q, over 1,000
// stories, with two bulk statements (INSERT … SELECT generate_series)
// rather than through MessagePublish: the rows are those a publish writes
// (a story row per story, its head at seq 1, ready since enqueuedAt; the
// messages numbered 1… in each story, a millisecond apart), and the
// triggers of the messages table count them as they count a publish. The
// tables are analyzed afterwards, as autovacuum would have.
func fillDepth(b *testing.B, s *Store, q, producer string, depth int, enqueuedAt time.Time) {
	b.Helper()
	if depth == 0 {
		return
	}
	ctx := context.Background()
	const stories = 1000
	per := max(depth/stories, 1)
	t := ms(enqueuedAt)
	if _, err := s.pool.Exec(ctx, `INSERT INTO stories (queue_id, story_key, head_seq, tail_seq, visible_at, receive_count, nonce, delayed)
		SELECT $1, 'f-' || k, 1, $2::bigint, $3::bigint, 0, 0, false FROM generate_series(0, $4::int - 1) AS k`,
		q, per, t, min(depth, stories)); err != nil {
		b.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO messages (story_id, seq, queue_id, message_id, message_type, topic,
			correlation_id, producer_id, enqueued_at, envelope)
		SELECT s.id, g, s.queue_id, s.story_key || '-' || g, 'story.context', 'som.story.context', s.story_key, $2,
			$3::bigint + g, convert_to('{"message_id":"' || s.story_key || '-' || g || '","payload":{}}', 'UTF8')
		FROM stories s CROSS JOIN generate_series(1, $4::int) AS g WHERE s.queue_id = $1`, q, producer, t, per); err != nil {
		b.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE stories, messages`); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDepthQueueStats reads a queue's counts with depth messages
// queued over 1,000 stories and 10 of them in flight: one op is one
// QueueStats (as the management read of a connection and the portal do),
// one QueueGauges (a /metrics scrape; the schema holds this one queue) or
// one QueueSample (the portal chart's sampling, each op a new interval: it
// records the round and compares each queue with its latest sample).
// The cost should not grow with depth.
//
//	go test -run '^$' -bench DepthQueueStats ./internal/store/postgres/
//	SOMBUS_BENCH_MILLION=1 go test -run '^$' -bench DepthQueueStats ./internal/store/postgres/
func BenchmarkDepthQueueStats(b *testing.B) {
	for _, depth := range benchDepths() {
		b.Run(fmt.Sprint("depth=", depth), func(b *testing.B) {
			s := OpenTest(b)
			_, q := benchQueue(b, s)
			fillDepth(b, s, q, bus.NewID(bus.PrefixConnection), depth, time.Now().Add(-time.Hour))
			now := time.Now()
			ctx := context.Background()
			if _, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: now}); err != nil {
				b.Fatal(err)
			}
			st, err := s.QueueStats(ctx, q, now)
			if err != nil {
				b.Fatal(err)
			}
			if want := int64(min(depth, 10)); st.InFlight != want || st.Ready != int64(depth)-want {
				b.Fatalf("stats %+v at depth %d", st, depth)
			}
			b.Run("read=QueueStats", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := s.QueueStats(ctx, q, now); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("read=QueueGauges", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := s.QueueGauges(ctx, now); err != nil {
						b.Fatal(err)
					}
				}
			})
			at := now
			b.Run("read=QueueSample", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					at = at.Add(time.Second)
					if n, err := s.QueueSample(ctx, &bus.QueueSampleParams{At: at, Now: now}); err != nil || n > 1 {
						b.Fatalf("QueueSample = %d, %v", n, err)
					}
				}
			})
		})
	}
}
