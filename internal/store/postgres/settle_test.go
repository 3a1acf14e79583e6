package postgres

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/sqlite"
)

// TestAckBatchMatchesSQLite: MessageAck settles the live heads of one call
// together; its results must still be those of settling the handles one by
// one, as the SQLite store does. The edge cases are handles on a story that
// an earlier handle of the same call acknowledged.
func TestAckBatchMatchesSQLite(t *testing.T) {
	t.Parallel()
	lite, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "s.db"), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lite.Close() })
	stores := map[string]bus.Store{"postgres": OpenTest(t), "sqlite": lite}

	run := func(s bus.Store) [][]bus.SettleResult {
		ctx := t.Context()
		ws, prod, q := bus.NewID(bus.PrefixWorkspace), bus.NewID(bus.PrefixConnection), bus.NewID(bus.PrefixConnection)
		err := s.Update(ctx, func(tx bus.Tx) error {
			if err := tx.WorkspaceCreate(bus.Workspace{ID: ws, Name: "w", CreatedAt: t0}); err != nil {
				return err
			}
			for _, c := range []bus.Connection{
				{ID: prod, Kind: bus.KindProducer},
				{ID: q, Kind: bus.KindConsumer, Subscriptions: []bus.Subscription{{Topic: "som.>"}}},
			} {
				c.WorkspaceID, c.Name, c.Status, c.AttemptLimit, c.QuotaTier, c.CredentialVersion = ws, "c", bus.StatusActive, 5, "standard", 1
				c.CreatedAt, c.UpdatedAt = t0, t0
				if err := tx.ConnectionCreate(c); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var msgs []bus.PublishMessage
		for _, m := range []struct{ id, story string }{{"a1", "a"}, {"a2", "a"}, {"a3", "a"}, {"b1", "b"}, {"c1", "c"}} {
			msgs = append(msgs, bus.PublishMessage{MessageID: m.id, MessageType: "story.context", Topic: "som.story.context",
				CorrelationID: m.story, Envelope: []byte(`{"id":"` + m.id + `"}`)})
		}
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: msgs, Now: t0, DedupWindow: time.Minute}); err != nil {
			t.Fatal(err)
		}
		recv := func(at time.Duration) map[string]bus.Handle {
			r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Minute, Now: t0.Add(at)})
			if err != nil {
				t.Fatal(err)
			}
			hs := map[string]bus.Handle{}
			for _, d := range r.Deliveries {
				hs[d.MessageID] = d.Handle
			}
			return hs
		}
		ack := func(at time.Duration, hs ...bus.Handle) []bus.SettleResult {
			r, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: hs, Now: t0.Add(at)})
			if err != nil {
				t.Fatal(err)
			}
			for i := range r {
				r[i].Message = "" // wording may differ between stores
			}
			return r
		}
		var out [][]bus.SettleResult
		h := recv(time.Second) // a1, b1, c1
		bad := h["b1"]
		bad.Nonce++
		a2 := h["a1"]
		a2.Seq++ // a handle of a2 with a1's nonce: never delivered
		foreign := h["c1"]
		foreign.QueueID = "elsewhere"
		// a1 twice (the second after the first moved story a on), a2 before
		// and after a1's ack, b1 with a wrong nonce before its good handle.
		out = append(out, ack(2*time.Second, a2, h["a1"], h["a1"], a2, bad, h["b1"], foreign, h["c1"]))
		h2 := recv(3 * time.Second) // a2
		out = append(out, ack(4*time.Second, h["a1"], h2["a2"], h2["a2"], h["b1"]))
		h3 := recv(5 * time.Second) // a3
		out = append(out, ack(6*time.Second, h3["a3"], h2["a2"], h3["a3"]))
		if len(recv(7*time.Second)) != 0 {
			t.Fatal("messages left after every ack")
		}
		return out
	}
	got, want := run(stores["postgres"]), run(stores["sqlite"])
	t.Logf("results: %+v", got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("postgres results:\n%+v\nsqlite results:\n%+v", got, want)
	}
}
