package postgres

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// TestQuickPublishEnvelopes publishes through the quick path, which sends a
// call's envelopes back to back in one parameter and cuts each row's out
// by offset and length: every queue gets every message's own envelope byte
// for byte, an empty one included, whatever the envelopes around it and
// however many queues a message goes to.
func TestQuickPublishEnvelopes(t *testing.T) {
	t.Parallel()
	s := openURL(t, pgtest.URL(t))
	ctx := t.Context()
	ws, prod, q1 := setupQueue(t, s, 5)
	// A second consumer of the same topics: every message goes to both.
	q2 := bus.NewID(bus.PrefixConnection)
	now := time.Now()
	if err := s.Update(ctx, func(tx bus.Tx) error {
		return tx.ConnectionCreate(bus.Connection{ID: q2, WorkspaceID: ws, Kind: bus.KindConsumer, Name: "second",
			Status: bus.StatusActive, AttemptLimit: 5, QuotaTier: "standard", CredentialVersion: 1,
			Subscriptions: []bus.Subscription{{Topic: "som.>"}}, CreatedAt: now, UpdatedAt: now, SecretState: bus.SecretNone})
	}); err != nil {
		t.Fatal(err)
	}

	envelopes := map[string][]byte{
		"m-empty":  nil,
		"m-small":  []byte(`{"a":1}`),
		"m-big":    bytes.Repeat([]byte("0123456789"), 700),
		"m-binary": {0xff, 0x00, 0xfe, '\\', '"', 0x01},
		"m-last":   []byte(`{"z":"\u00e9"}`),
	}
	var msgs []bus.PublishMessage
	for i, id := range []string{"m-small", "m-empty", "m-big", "m-binary", "m-last"} {
		m := testMessage(id, fmt.Sprint("story-", i%2))
		m.Envelope = envelopes[id]
		msgs = append(msgs, m)
	}
	out, ok, err := s.quickPublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: msgs,
		Now: now, DedupWindow: time.Hour})
	if err != nil || !ok {
		t.Fatalf("quick publish: ok %v, %v; want it to take the call", ok, err)
	}
	for i, o := range out {
		if o.Deliveries != 2 {
			t.Fatalf("message %d went to %d queues, want 2", i, o.Deliveries)
		}
	}
	for _, q := range []string{q1, q2} {
		got := map[string][]byte{}
		for range 5 { // one head of each story at a time
			res, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Minute, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range res.Deliveries {
				got[d.MessageID] = d.Envelope
			}
			if _, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: handlesOf(res), Now: now}); err != nil {
				t.Fatal(err)
			}
		}
		if len(got) != len(envelopes) {
			t.Fatalf("queue %s: %d messages, want %d", q, len(got), len(envelopes))
		}
		for id, want := range envelopes {
			if e, present := got[id]; !present || !bytes.Equal(e, want) {
				t.Errorf("queue %s, %s: envelope of %d bytes %.40q…, want %d bytes %.40q…", q, id, len(got[id]), got[id], len(want), want)
			}
		}
	}
}
