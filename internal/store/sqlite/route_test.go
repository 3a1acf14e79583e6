package sqlite

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// routeTo publishes one message of topic som.story.context through the
// store and returns the queues it went to.
func routeTo(t *testing.T, s *Store, ws, prod, id string) []string {
	t.Helper()
	out, err := s.MessagePublish(context.Background(), &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
		Messages: []bus.PublishMessage{msg(id, "s")}, Now: t0, DedupWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return out[0].QueueIDs
}

// TestRoutingVersionAnyWriter: the routing version changes with any write
// of a consumer's subscriptions, not only through the store's own methods,
// and not with a write of what does not route.
func TestRoutingVersionAnyWriter(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ws, prod, q := setupQueue(t, s, 5)
	version := func() (v int64) {
		t.Helper()
		if err := s.read(context.Background(), func(d *dbq) error {
			return d.row(`SELECT routing_version FROM workspaces WHERE id = ?`, ws).Scan(&v)
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	exec := func(query string, args ...any) {
		t.Helper()
		if err := s.w.do(context.Background(), func(d *dbq) error { _, err := d.exec(query, args...); return err }); err != nil {
			t.Fatal(err)
		}
	}
	if got := routeTo(t, s, ws, prod, "m1"); !slices.Equal(got, []string{q}) {
		t.Fatalf("publish went to %q, want [%s]", got, q)
	}
	v := version()
	exec(`UPDATE connections SET status = 'revoked', name = 'x' WHERE id = ?`, q)
	if version() != v {
		t.Errorf("a change of status and name changed the routing version")
	}
	exec(`UPDATE connections SET subscriptions = '[{"topic":"som.other"}]' WHERE id = ?`, q)
	if version() == v {
		t.Errorf("a change of subscriptions left the routing version as it was")
	}
	if got := routeTo(t, s, ws, prod, "m2"); len(got) != 0 {
		t.Fatalf("publish after the subscription changed went to %q, want nowhere", got)
	}
}

// TestRoutingAfterLostChange: the writer runs several callers' operations
// in one transaction, so a publish can compile routing from a change that
// is then lost. The next change must not pass for that one: routing then
// follows it, not the lost one.
func TestRoutingAfterLostChange(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ws, prod, q := setupQueue(t, s, 5)
	setSubs := func(d *dbq, topic string) error {
		_, err := d.exec(`UPDATE connections SET subscriptions = json_array(json_object('topic', ?)) WHERE id = ?`, topic, q)
		return err
	}
	lost := errors.New("lost")
	err := s.w.do(context.Background(), func(d *dbq) error {
		if err := setSubs(d, "som.story.>"); err != nil {
			return err
		}
		out, err := publish(d, &s.routes, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod,
			Messages: []bus.PublishMessage{msg("m1", "s")}, Now: t0, DedupWindow: time.Minute})
		if err != nil {
			return err
		}
		if !slices.Equal(out[0].QueueIDs, []string{q}) {
			t.Errorf("publish inside the change went to %q, want [%s]", out[0].QueueIDs, q)
		}
		return lost // the change and the publish are rolled back
	})
	if !errors.Is(err, lost) {
		t.Fatalf("do: %v", err)
	}
	if err := s.w.do(context.Background(), func(d *dbq) error { return setSubs(d, "som.other") }); err != nil {
		t.Fatal(err)
	}
	if got := routeTo(t, s, ws, prod, "m2"); len(got) != 0 {
		t.Fatalf("publish after the second change went to %q, want nowhere (routing of the lost change reused)", got)
	}
}
