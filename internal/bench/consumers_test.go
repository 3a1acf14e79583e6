package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// BenchmarkPublishConsumers: one publisher, one 1 KiB message a request,
// one request at a time, into a workspace of 1 consumer and of 1,000
// consumers of which one subscribes to the message; p50 and p99 of the
// request, on SQLite (on disk), on PostgreSQL with one node, and on
// PostgreSQL with two nodes sharing the schema (the publishes alternate
// between them, so each node routes after the other's writes). Routing is
// to cost the same whatever the number of consumers. With two nodes, a
// subscription change made through one node is then checked to route at
// once on the other (routeAcross).
//
//	go test -run '^$' -bench PublishConsumers -benchtime 2000x ./internal/bench/
func BenchmarkPublishConsumers(b *testing.B) {
	stores := []struct {
		name  string
		url   func(b *testing.B) string
		nodes int
	}{
		{"store=sqlite", func(b *testing.B) string { return "sqlite:" + filepath.Join(b.TempDir(), "sombus.db") }, 1},
		{"store=postgres", func(b *testing.B) string { return pgtest.URL(b) }, 1},
		{"store=postgres/nodes=2", func(b *testing.B) string { return pgtest.URL(b) }, 2},
	}
	for _, st := range stores {
		for _, consumers := range []int{1, 1000} {
			b.Run(fmt.Sprintf("%s/consumers=%d", st.name, consumers), func(b *testing.B) {
				nodes, p := mpNodes(b, st.url(b), st.nodes)
				addConsumers(b, nodes[0], p.WS, consumers-1)
				ctx := context.Background()
				publish := func(i int) {
					n := nodes[(i+len(nodes))%len(nodes)]
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
				reportLatency(b, lat)
				if len(nodes) == 2 {
					b.StopTimer()
					routeAcross(b, nodes[0], nodes[1], p)
					routeAcross(b, nodes[1], nodes[0], p)
				}
			})
		}
	}
}

// routeAcross changes the pair's consumer's subscriptions through node a
// and publishes through node b right after each change: with the
// consumer subscribed elsewhere the message is not queued for it, and once
// subscribed again it is (b's routing follows a's writes at once).
func routeAcross(b *testing.B, a, other *servertest.Node, p *servertest.Pair) {
	b.Helper()
	ctx := context.Background()
	path := "/v1/manage/workspaces/" + p.WS + "/connections/" + p.Consumer
	ready := func() int64 {
		r, err := other.Try(ctx, "GET", path, servertest.BootstrapKey, nil)
		var v struct {
			Ready int64 `json:"ready"`
		}
		if err != nil || r.Status != 200 || json.Unmarshal(r.Body, &v) != nil {
			b.Fatalf("read connection: %v %v", err, r)
		}
		return v.Ready
	}
	for _, c := range []struct {
		topic string
		adds  int64
	}{{"som.elsewhere.>", 0}, {"som.>", 1}} {
		r, err := a.Try(ctx, "PATCH", path, servertest.BootstrapKey, map[string]any{"subscriptions": []map[string]any{{"topic": c.topic}}})
		if err != nil || r.Status != 200 {
			b.Fatalf("subscribe %s: %v %v", c.topic, err, r)
		}
		before := ready()
		r, err = other.Try(ctx, "POST", p.PublishPath(), p.ProducerTok, envelope(0))
		if err != nil || r.Status != 202 {
			b.Fatalf("publish: %v %v", err, r)
		}
		if got := ready() - before; got != c.adds {
			b.Fatalf("subscribed to %s through one node, a publish through the other queued %d for it, want %d", c.topic, got, c.adds)
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
