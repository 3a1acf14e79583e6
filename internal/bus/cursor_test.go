package bus_test

import (
	"bytes"
	"testing"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/storetest"
)

// TestCursorKeyShared: the cursor key is a server secret, the same for every
// node of a store, so a node accepts the cursors of another; a service keyed
// otherwise refuses them as cursors its listing did not return.
func TestCursorKeyShared(t *testing.T) {
	t.Parallel()
	for name, open := range openStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			store := open(t)
			svc, op, ws, clock := operatorWorkspace(t, store)
			for range 3 {
				k := bus.KindProducer
				if _, err := svc.CreateConnection(ctx, op, ws, bus.ConnectionParams{Kind: &k, Name: ptr("p")}); err != nil {
					t.Fatal(err)
				}
			}
			key, err := bus.LoadCursorKey(ctx, store)
			if err != nil {
				t.Fatal(err)
			}
			again, err := bus.LoadCursorKey(ctx, store)
			if err != nil || !bytes.Equal(key, again) || len(key) < 16 {
				t.Fatalf("cursor key of %d bytes, then one of %d bytes, equal %v (%v)", len(key), len(again), bytes.Equal(key, again), err)
			}
			node := func(key []byte) *bus.Service {
				return bus.NewService(bus.Config{Store: store, Clock: clock, Credentials: testCredentials{}, Logger: storetest.Logger(t), CursorKey: key})
			}
			one, two, stranger := node(key), node(again), node(nil)
			page, err := one.ListConnections(ctx, op, ws, "", 1, "")
			if err != nil || page.NextCursor == nil {
				t.Fatalf("first page: %+v %v", page, err)
			}
			if next, err := two.ListConnections(ctx, op, ws, "", 1, *page.NextCursor); err != nil || len(next.Connections) != 1 {
				t.Errorf("another node's cursor: %+v %v", next, err)
			}
			_, err = stranger.ListConnections(ctx, op, ws, "", 1, *page.NextCursor)
			if e, ok := bus.AsError(err); !ok || e.Status != 400 {
				t.Errorf("a cursor of another key: %v", err)
			}
		})
	}
}
