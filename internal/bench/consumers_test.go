package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// BenchmarkPublishConsumers: one publisher, one 1 KiB message a request,
// one request at a time, into a workspace of 1 consumer and of 1,000
// consumers of which one subscribes to the message; p50 and p99 of the
// request, on SQLite (on disk) and on PostgreSQL (one node). Routing is
// to cost the same whatever the number of consumers:
//
//	go test -run '^$' -bench PublishConsumers -benchtime 2000x ./internal/bench/
func BenchmarkPublishConsumers(b *testing.B) {
	stores := []struct {
		name string
		url  func(b *testing.B) string
	}{
		{"store=sqlite", func(b *testing.B) string { return "sqlite:" + filepath.Join(b.TempDir(), "sombus.db") }},
		{"store=postgres", func(b *testing.B) string { return pgtest.URL(b) }},
	}
	for _, st := range stores {
		for _, consumers := range []int{1, 1000} {
			b.Run(fmt.Sprintf("%s/consumers=%d", st.name, consumers), func(b *testing.B) {
				nodes, p := mpNodes(b, st.url(b), 1)
				n := nodes[0]
				addConsumers(b, n, p.WS, consumers-1)
				ctx := context.Background()
				publish := func(i int) {
					r, err := n.Try(ctx, "POST", p.PublishPath(), p.ProducerTok, envelope(int64(i)))
					if err != nil || r.Status != 202 {
						b.Fatalf("publish: %v %v", err, r)
					}
				}
				publish(-1) // out of the measure: the first of a workspace
				lat := make([]time.Duration, 0, b.N)
				for i := 0; b.Loop(); i++ {
					t0 := time.Now()
					publish(i)
					lat = append(lat, time.Since(t0))
				}
				slices.Sort(lat)
				pct := func(q float64) float64 {
					return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) / 1000
				}
				b.ReportMetric(pct(0.50), "p50-ms")
				b.ReportMetric(pct(0.99), "p99-ms")
			})
		}
	}
}

// addConsumers makes count consumers in workspace ws, through the store,
// each subscribed to topics of its own that no benchmark message has.
func addConsumers(b *testing.B, n *servertest.Node, ws string, count int) {
	b.Helper()
	now := time.Now()
	err := n.Server.Store().Update(context.Background(), func(tx bus.Tx) error {
		for i := range count {
			c := bus.Connection{ID: bus.NewID(bus.PrefixConnection), WorkspaceID: ws, Kind: bus.KindConsumer,
				Name: fmt.Sprint("consumer ", i), Status: bus.StatusActive, AttemptLimit: 5, QuotaTier: "standard",
				CredentialVersion: 1, CreatedAt: now, UpdatedAt: now, SecretState: bus.SecretNone,
				Subscriptions: []bus.Subscription{
					{Topic: fmt.Sprintf("som.team%d.>", i)},
					{Topic: fmt.Sprintf("som.story.context%d", i)},
					{Topic: fmt.Sprintf("som.*.context.c%d", i)},
				}}
			if err := tx.ConnectionCreate(c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
