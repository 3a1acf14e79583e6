package postgres

import (
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
	"github.com/sombus/sombus/internal/store/storetest"
)

// TestRoutingTwoNodes: two stores on one schema are two nodes. Every
// change to the consumers made through one is followed by the other's next
// publish, though that node keeps the routing it compiled before.
func TestRoutingTwoNodes(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	storetest.RoutingFollowsChanges(t, openURL(t, url), openURL(t, url))
}

// TestRoutingVersionAnyWriter: the routing version changes with any write
// of a consumer's subscriptions, not only through the store's own
// methods (an operator's SQL, a later code path), and not with a write of
// what does not route.
func TestRoutingVersionAnyWriter(t *testing.T) {
	t.Parallel()
	s := OpenTest(t)
	ws, prod, q := setupQueue(t, s, 5)
	version := func() int64 {
		var v int64
		if err := s.pool.QueryRow(t.Context(), `SELECT routing_version FROM workspaces WHERE id = $1`, ws).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	publish := func(id string) []string {
		out, err := s.MessagePublish(t.Context(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{testMessage(id, "s")}, Now: time.Now(), DedupWindow: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return out[0].QueueIDs
	}
	if got := publish("m1"); len(got) != 1 || got[0] != q {
		t.Fatalf("publish went to %q, want [%s]", got, q)
	}
	v := version()
	if _, err := s.pool.Exec(t.Context(), `UPDATE connections SET status = 'revoked', name = 'x' WHERE id = $1`, q); err != nil {
		t.Fatal(err)
	}
	if version() != v {
		t.Errorf("a change of status and name changed the routing version")
	}
	if _, err := s.pool.Exec(t.Context(), `UPDATE connections SET subscriptions = '[{"topic":"som.other"}]' WHERE id = $1`, q); err != nil {
		t.Fatal(err)
	}
	if version() == v {
		t.Errorf("a change of subscriptions left the routing version as it was")
	}
	if got := publish("m2"); len(got) != 0 {
		t.Fatalf("publish after the subscription changed went to %q, want nowhere", got)
	}
}
