package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// BenchmarkConnectionReadDepth times the management read of a consumer
// connection (GET /v1/manage/workspaces/{t}/connections/{c}, whose answer
// carries the queue's counts) over HTTP, one request at a time, with the
// queue empty and with depth messages queued over 1,000 stories (10 of them
// in flight), on SQLite and on PostgreSQL (one node). The read is to cost
// about the same at any depth; p50-ms and p99-ms are per request.
//
//	go test -run '^$' -bench ConnectionReadDepth -benchtime 2000x ./internal/bench/
//	SOMBUS_BENCH_MILLION=1 go test -run '^$' -bench ConnectionReadDepth -benchtime 2000x ./internal/bench/
//
// Depths are 0 and 100,000, and 1,000,000 with SOMBUS_BENCH_MILLION set.
// SQLite is filled through the node's store (MessagePublish, 1,000 small
// messages a transaction, the file in /dev/shm where there is one: the
// fill's fsyncs are not what is measured); PostgreSQL with two bulk
// statements, as BenchmarkDepthQueueStats of the postgres package does
// (the messages table's triggers count the rows as they count a publish).
func BenchmarkConnectionReadDepth(b *testing.B) {
	depths := []int{0, 100000}
	if os.Getenv("SOMBUS_BENCH_MILLION") != "" {
		depths = append(depths, 1000000)
	}
	stores := []struct {
		name string
		url  func(b *testing.B) string
		fill func(b *testing.B, url string, n *servertest.Node, p *servertest.Pair, depth int)
	}{
		{"store=sqlite", func(b *testing.B) string { return "sqlite:" + filepath.Join(servertest.TempDir(b), "sombus.db") }, depthFillStore},
		{"store=postgres", func(b *testing.B) string { return pgtest.URL(b) }, depthFillPostgres},
	}
	for _, st := range stores {
		for _, depth := range depths {
			b.Run(fmt.Sprintf("%s/depth=%d", st.name, depth), func(b *testing.B) {
				url := st.url(b)
				nodes, p := mpNodes(b, url, 1)
				n := nodes[0]
				ctx := context.Background()
				t0 := time.Now()
				st.fill(b, url, n, p, depth)
				if depth > 0 {
					b.Logf("filled %d in %v", depth, time.Since(t0).Round(time.Millisecond))
					r, err := n.Try(ctx, "GET", p.MessagesPath()+"?max=10&visibility=3600", p.ConsumTok, nil)
					if err != nil || r.Status != 200 {
						b.Fatalf("receive: %v %v", err, r)
					}
				}
				path := "/v1/manage/workspaces/" + p.WS + "/connections/" + p.Consumer
				read := func() {
					r, err := n.Try(ctx, "GET", path, servertest.BootstrapKey, nil)
					if err != nil || r.Status != 200 {
						b.Fatalf("read connection: %v %v", err, r)
					}
				}
				// The counts are those queued: the fill went where it should.
				r, err := n.Try(ctx, "GET", path, servertest.BootstrapKey, nil)
				if err != nil || r.Status != 200 {
					b.Fatalf("read connection: %v %v", err, r)
				}
				var v struct {
					Ready    int64 `json:"ready"`
					InFlight int64 `json:"in_flight"`
				}
				if err := json.Unmarshal(r.Body, &v); err != nil {
					b.Fatal(err)
				}
				if want := int64(min(depth, 10)); v.InFlight != want || v.Ready != int64(depth)-want {
					b.Fatalf("counts %+v at depth %d: %.300s", v, depth, r.Body)
				}
				lat := make([]time.Duration, 0, b.N)
				for b.Loop() {
					t0 := time.Now()
					read()
					lat = append(lat, time.Since(t0))
				}
				reportLatency(b, lat)
			})
		}
	}
}

// depthFillStore queues depth messages for the pair's consumer through the
// node's store, 1,000 a transaction, over 1,000 stories.
func depthFillStore(b *testing.B, _ string, n *servertest.Node, p *servertest.Pair, depth int) {
	b.Helper()
	s := n.Server.Store()
	now := time.Now().Add(-time.Hour)
	for i := 0; i < depth; i += 1000 {
		ms := make([]bus.PublishMessage, min(1000, depth-i))
		for j := range ms {
			id := fmt.Sprint("d-", i+j)
			ms[j] = bus.PublishMessage{MessageID: id, MessageType: "story.context", Topic: "som.story.context",
				CorrelationID: fmt.Sprint("f-", (i+j)%1000), Envelope: []byte(`{"message_id":"` + id + `","payload":{}}`)}
		}
		if _, err := s.MessagePublish(context.Background(), &bus.PublishParams{WorkspaceID: p.WS, ProducerID: p.Producer, Messages: ms, Now: now}); err != nil {
			b.Fatal(err)
		}
	}
}

// depthFillPostgres queues depth messages for the pair's consumer with two
// bulk statements, the rows a publish writes (a story row per story with
// its head at seq 1, ready for an hour; the messages numbered 1… in each
// story), then analyzes the tables as autovacuum would have.
func depthFillPostgres(b *testing.B, url string, _ *servertest.Node, p *servertest.Pair, depth int) {
	b.Helper()
	if depth == 0 {
		return
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	const stories = 1000
	per := max(depth/stories, 1)
	t := time.Now().Add(-time.Hour).UnixMilli()
	if _, err := pool.Exec(ctx, `INSERT INTO stories (queue_id, story_key, head_seq, tail_seq, visible_at, receive_count, nonce, delayed)
		SELECT $1, 'f-' || k, 1, $2::bigint, $3::bigint, 0, 0, false FROM generate_series(0, $4::int - 1) AS k`,
		p.Consumer, per, t, min(depth, stories)); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO messages (story_id, seq, queue_id, message_id, message_type, topic,
			correlation_id, producer_id, enqueued_at, envelope)
		SELECT s.id, g, s.queue_id, s.story_key || '-' || g, 'story.context', 'som.story.context', s.story_key, $2,
			$3::bigint + g, convert_to('{"message_id":"' || s.story_key || '-' || g || '","payload":{}}', 'UTF8')
		FROM stories s CROSS JOIN generate_series(1, $4::int) AS g WHERE s.queue_id = $1`, p.Consumer, p.Producer, t, per); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE stories, messages`); err != nil {
		b.Fatal(err)
	}
}
