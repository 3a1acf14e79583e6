package httpapi_test

import (
	"strings"
	"testing"

	"github.com/sombus/sombus/internal/bus"
)

// TestSubscriptionsThatCanNeverMatch: a topic pattern no topic can match
// (every topic is "som." and a message type) and a producer filter naming
// an id that is not a producer connection of the workspace are refused on
// create and update, with a message that says why; nothing is written.
func TestSubscriptionsThatCanNeverMatch(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, n *node) {
		ws := n.workspace(t, opKey, "subs")
		other := n.workspace(t, opKey, "other")
		prod := n.connection(t, ws, "producer", nil)
		revoked := n.connection(t, ws, "producer", nil)
		n.do(t, "POST", connPath(ws, revoked.ID)+"/revoke", opKey, nil).Must(t, 200)
		cons := n.connection(t, ws, "consumer", nil)
		otherProd := n.connection(t, other, "producer", nil)
		missing := bus.NewID(bus.PrefixConnection)
		long := strings.Repeat("a", bus.MaxMessageTypeLength)

		sub := func(s ...map[string]any) map[string]any {
			return map[string]any{"kind": "consumer", "name": "x", "subscriptions": s}
		}
		for _, c := range []struct {
			sub   map[string]any
			words []string
		}{
			{map[string]any{"topic": "story.>"}, []string{"subscriptions[0].topic", "story.>", "can never match", `"som"`}},
			{map[string]any{"topic": "story.context"}, []string{"subscriptions[0].topic", "can never match", `"som"`}},
			{map[string]any{"topic": "som"}, []string{"subscriptions[0].topic", "can never match", "two segments"}},
			{map[string]any{"topic": "*"}, []string{"subscriptions[0].topic", "can never match", "two segments"}},
			{map[string]any{"topic": "som." + long + "x"}, []string{"subscriptions[0].topic", "can never match", "132"}},
			{map[string]any{"topic": "som.>", "producers": []string{cons.ID}}, []string{"subscriptions[0].producers[0]", cons.ID, "consumer"}},
			{map[string]any{"topic": "som.>", "producers": []string{prod.ID, otherProd.ID}}, []string{"subscriptions[0].producers[1]", otherProd.ID, "not a connection of workspace " + ws}},
			{map[string]any{"topic": "som.>", "producers": []string{missing}}, []string{"subscriptions[0].producers[0]", missing, "not a connection of workspace " + ws}},
		} {
			before := len(n.auditLog(t, ws))
			msg := wantRefusal(t, n.do(t, "POST", connsPath(ws), opKey, sub(map[string]any{"topic": "som.>"}, c.sub)), 400, "manage.bad_request")
			wantMessage(t, strings.ReplaceAll(msg, "subscriptions[1]", "subscriptions[0]"), c.words...)
			msg = wantRefusal(t, n.do(t, "PATCH", connPath(ws, cons.ID), opKey, map[string]any{"subscriptions": []any{c.sub}}), 400, "manage.bad_request")
			wantMessage(t, msg, c.words...)
			if after := len(n.auditLog(t, ws)); after != before {
				t.Errorf("a refused subscription wrote %d audit entries", after-before)
			}
		}
		if got := n.getConn(t, ws, cons.ID); len(got.Subscriptions) != 0 {
			t.Errorf("refused updates changed the subscriptions: %+v", got.Subscriptions)
		}

		// Patterns that can match, and producers of the workspace (a revoked
		// one too: it may be restored), are accepted.
		good := []any{
			map[string]any{"topic": ">"}, map[string]any{"topic": "*.>"}, map[string]any{"topic": "*.story"},
			map[string]any{"topic": "som." + long}, map[string]any{"topic": "som.>", "producers": []string{prod.ID, revoked.ID}},
		}
		n.do(t, "POST", connsPath(ws), opKey, map[string]any{"kind": "consumer", "name": "ok", "subscriptions": good}).Must(t, 201)
		var up conn
		n.do(t, "PATCH", connPath(ws, cons.ID), opKey, map[string]any{"subscriptions": good}).Must(t, 200).Decode(t, &up)
		if len(up.Subscriptions) != len(good) {
			t.Errorf("subscriptions after update: %+v", up.Subscriptions)
		}
	})
}

// TestProducerSubscriptionsEmpty: a producer's subscriptions are always
// the empty list it shows; that list may be sent back on create and
// update (a client writing back what it read), a non-empty one is refused.
func TestProducerSubscriptionsEmpty(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, n *node) {
		ws := n.workspace(t, opKey, "prod-subs")
		r := n.do(t, "POST", connsPath(ws), opKey, map[string]any{"kind": "producer", "name": "p", "subscriptions": []any{}})
		r.Must(t, 201)
		var c struct {
			ID            string `json:"id"`
			Subscriptions []any  `json:"subscriptions"`
		}
		r.Decode(t, &c)
		if c.Subscriptions == nil || len(c.Subscriptions) != 0 {
			t.Fatalf("a producer created with [] shows subscriptions %v", c.Subscriptions)
		}
		n.do(t, "PATCH", connPath(ws, c.ID), opKey, map[string]any{"subscriptions": []any{}}).Must(t, 200)
		msg := wantRefusal(t, n.do(t, "PATCH", connPath(ws, c.ID), opKey, map[string]any{"subscriptions": []any{map[string]any{"topic": "som.>"}}}), 400, "manage.bad_request")
		wantMessage(t, msg, "subscriptions", "consumer connections only")
		wantRefusal(t, n.do(t, "POST", connsPath(ws), opKey, map[string]any{"kind": "producer", "name": "q", "subscriptions": []any{map[string]any{"topic": "som.>"}}}), 400, "manage.bad_request")
	})
}
