package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// TestMigrationDropsEnqueuedIndex opens a database of schema 7 holding
// messages of two queues, migrates it (0008 drops messages_enqueued), and
// checks that retention, now queue by queue through messages_queue, drops
// exactly the expired messages of both queues and keeps each story's
// chain: the survivors are delivered in order.
func TestMigrationDropsEnqueuedIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := openUpTo(ctx, path, testLogger(t), defaultWAL, 7)
	if err != nil {
		t.Fatal(err)
	}
	ws, prod, q1 := setupQueue(t, old, 5)
	q2 := bus.NewID("c")
	if err := old.Update(ctx, func(tx bus.Tx) error {
		return tx.ConnectionCreate(bus.Connection{ID: q2, WorkspaceID: ws, Kind: bus.KindConsumer, Name: "c2",
			Status: bus.StatusActive, AttemptLimit: 5, QuotaTier: "standard", CreatedAt: t0, UpdatedAt: t0,
			Subscriptions: []bus.Subscription{{Topic: "som.>"}}})
	}); err != nil {
		t.Fatal(err)
	}
	// m0..m11 over stories s0..s2, m_i published at t0+i minutes: both
	// queues get each.
	for i := range 12 {
		if _, err := old.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg(fmt.Sprint("m", i), fmt.Sprint("s", i%3))},
			Now:      t0.Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	s := reopenMigrated(t, old, path)
	var n int
	if err := s.read(ctx, func(d *dbq) error {
		return d.row(`SELECT count(*) FROM sqlite_schema WHERE name = 'messages_enqueued'`).Scan(&n)
	}); err != nil || n != 0 {
		t.Fatalf("messages_enqueued after the migration: %d (%v)", n, err)
	}
	// Retention of 10 minutes at t0+17m: m0..m7 go (enqueued up to t0+7m).
	res, err := s.Maintain(ctx, &bus.MaintainParams{Now: t0.Add(17 * time.Minute), Retention: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Expired != 16 {
		t.Fatalf("expired %d, want 16 (8 of each queue)", res.Expired)
	}
	for _, q := range []string{q1, q2} {
		r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Hour, Now: t0.Add(18 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range r.Deliveries {
			got = append(got, d.MessageID)
		}
		if fmt.Sprint(got) != "[m8 m9 m10]" {
			t.Fatalf("queue %s after retention delivers %v, want the heads m8 m9 m10", q, got)
		}
	}
}
