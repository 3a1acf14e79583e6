package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sombus/sombus/internal/bus"
)

// TestDiskFullPublishes: with the database capped a few pages above its
// size (max_page_count), concurrent publishes of large messages fail with
// ErrUnavailable once it is full (SQLITE_FULL, each rolled back in its
// savepoint with the message ids it took) and the others succeed; after
// the cap is lifted, publishing works again, the chains and the index
// hold, and exactly the messages of the publishes that succeeded are
// delivered.
func TestDiskFullPublishes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	ws, prod, q := setupQueue(t, s, 3)
	var pages int64
	if err := s.w.do(ctx, func(d *dbq) error { return d.row(`PRAGMA page_count`).Scan(&pages) }); err != nil {
		t.Fatal(err)
	}
	if err := s.w.do(ctx, func(d *dbq) error { _, err := d.exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+40)); return err }); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 20000)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var full, ok int
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				m := msg(fmt.Sprintf("g%d-%d", g, i), fmt.Sprint("s", i%3))
				m.Envelope = []byte(`{"message_id":"` + m.MessageID + `","b":"` + big + `"}`)
				_, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: []bus.PublishMessage{m}, Now: t0})
				mu.Lock()
				if err == nil {
					ok++
				} else if errors.Is(err, bus.ErrUnavailable) {
					full++
				} else {
					t.Errorf("publish: %v", err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ok == 0 || full == 0 {
		t.Fatalf("%d publishes succeeded and %d found the database full; want some of each", ok, full)
	}
	if err := s.w.do(ctx, func(d *dbq) error { _, err := d.exec(`PRAGMA max_page_count = 1000000`); return err }); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: []bus.PublishMessage{msg(fmt.Sprint("after", i), fmt.Sprint("s", i%4))}, Now: t0}); err != nil {
			t.Fatal(err)
		}
	}
	checkChains(t, s)
	checkHeads(t, s)
	got := drainQueue(t, s, q, t0)
	if got != ok+20 {
		t.Fatalf("delivered %d, want %d", got, ok+20)
	}
	checkChains(t, s)
	checkHeads(t, s)
}
