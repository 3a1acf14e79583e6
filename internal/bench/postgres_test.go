package bench

// The message path end to end on each store: publishers and receivers run
// at once over HTTP until every message is acknowledged, on SQLite, on
// PostgreSQL with one node, and on PostgreSQL with two in-process nodes
// sharing one schema (publishers and receivers split between them). One
// run gives the three figures side by side:
//
//	go test -run '^$' -bench MessagePath -benchtime 20000x ./internal/bench/
//
// PostgreSQL is the database of SOMBUS_TEST_POSTGRES_URL (default
// postgres://postgres@127.0.0.1:5432/test); without it the PostgreSQL
// cases skip (fail under CI=true).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

const (
	mpStories    = 1000 // stories the messages are spread over
	mpPublishers = 4    // concurrent publishers, in all
	mpReceivers  = 8    // concurrent receivers, in all
	mpBatch      = 10   // messages per publish request; receive max
	mpPayload    = 1024 // payload bytes
	// mpPublicURL is the --public-url of nodes sharing a store: tokens
	// carry it as iss, so each node accepts the others' tokens.
	mpPublicURL = "http://sombus.bench.test"
)

var mpData = strings.Repeat("x", mpPayload)

// mpNodes starts count nodes on store (a --store value) and
// makes a producer and a consumer on the unlimited tier; the pair's tokens
// are good on every node.
func mpNodes(b *testing.B, store string, count int) ([]*servertest.Node, *servertest.Pair) {
	b.Helper()
	nodes := make([]*servertest.Node, count)
	for i := range nodes {
		nodes[i] = servertest.Start(b, servertest.Options{Store: store, Clock: bus.SystemClock{}, PublicURL: mpPublicURL})
		nodes[i].HTTP = &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}
	}
	u := map[string]any{"quota_tier": "unlimited"}
	return nodes, nodes[0].NewPairWith(u, u)
}

// BenchmarkMessagePath: b.N messages of 1 KiB over 1,000 stories, published
// in batches of 10 by 4 publishers while 8 receivers take batches of up to
// 10 (long polls) and acknowledge each batch; the clock stops when the last
// message is acknowledged. msgs/s is end-to-end throughput.
func BenchmarkMessagePath(b *testing.B) {
	b.Run("store=sqlite", func(b *testing.B) {
		// On disk (b.TempDir), like PostgreSQL's data directory, not
		// servertest's default in memory: both stores pay their fsyncs.
		nodes, p := mpNodes(b, "sqlite:"+filepath.Join(b.TempDir(), "sombus.db"), 1)
		mpRun(b, nodes, p)
	})
	b.Run("store=postgres/nodes=1", func(b *testing.B) {
		nodes, p := mpNodes(b, pgtest.URL(b), 1)
		mpRun(b, nodes, p)
	})
	b.Run("store=postgres/nodes=2", func(b *testing.B) {
		nodes, p := mpNodes(b, pgtest.URL(b), 2)
		mpRun(b, nodes, p)
	})
}

// mpRun publishes and drains b.N messages with the workers spread over nodes.
func mpRun(b *testing.B, nodes []*servertest.Node, p *servertest.Pair) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	total := int64(b.N)
	var published, acked atomic.Int64
	var msgID atomic.Int64
	var wg sync.WaitGroup
	var errOnce sync.Once
	var firstErr error
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	batchPath := "/v1/tenants/" + p.WS + "/messages/batch"

	b.ResetTimer()
	for w := range mpPublishers {
		n := nodes[w%len(nodes)]
		wg.Go(func() {
			for ctx.Err() == nil {
				end := published.Add(mpBatch)
				start := end - mpBatch
				if start >= total {
					return
				}
				envs := make([]any, 0, mpBatch)
				for i := start; i < min(end, total); i++ {
					envs = append(envs, servertest.Envelope(fmt.Sprintf("mp-%d", msgID.Add(1)),
						fmt.Sprintf("story-%d", i%mpStories), map[string]any{"data": mpData}))
				}
				r, err := n.Try(ctx, "POST", batchPath, p.ProducerTok, map[string]any{"messages": envs})
				if err == nil && (r.Status != 200 || strings.Contains(string(r.Body), `"accepted":false`)) {
					err = fmt.Errorf("publish batch: %d %.300s", r.Status, r.Body)
				}
				if err != nil {
					if acked.Load() >= total {
						return // the receivers acknowledged this batch before its answer came back
					}
					fail(err)
					return
				}
			}
		})
	}
	for w := range mpReceivers {
		n := nodes[w%len(nodes)]
		wg.Go(func() {
			for ctx.Err() == nil && acked.Load() < total {
				r, err := n.Try(ctx, "GET", fmt.Sprintf("%s?max=%d&wait=1", p.MessagesPath(), mpBatch), p.ConsumTok, nil)
				if ctx.Err() != nil {
					return // done: the polls still waiting are cut short
				}
				var out struct {
					Messages []servertest.Message `json:"messages"`
				}
				if err == nil && (r.Status != 200 || json.Unmarshal(r.Body, &out) != nil) {
					err = fmt.Errorf("receive: %d %.300s", r.Status, r.Body)
				}
				if err != nil {
					fail(err)
					return
				}
				if len(out.Messages) == 0 {
					continue
				}
				hs := make([]string, len(out.Messages))
				for i, m := range out.Messages {
					hs[i] = m.ReceiptHandle
				}
				a, err := n.Try(ctx, "POST", p.SettlePath("ack"), p.ConsumTok, map[string]any{"receipt_handles": hs})
				if err == nil && (a.Status != 200 || strings.Contains(string(a.Body), "ReceiptHandleIsInvalid")) {
					err = fmt.Errorf("ack: %d %.300s", a.Status, a.Body)
				}
				if err != nil {
					fail(err)
					return
				}
				if acked.Add(int64(len(hs))) >= total {
					cancel()
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	if got := acked.Load(); got != total {
		b.Fatalf("%d of %d messages acknowledged", got, total)
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "msgs/s")
}
