package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sombus/sombus/internal/bus"
)

var routingTests = []test{
	{"FollowsEveryChange", func(e *env) { RoutingFollowsChanges(e.t, e.s, e.s) }},
}

// RoutingFollowsChanges changes a workspace's consumers through change
// (create, delete, new subscriptions, producer filters, status, kind, a
// rolled back update) and checks after each that the next publish through
// pub routes by the consumers as they are now: a store may keep the
// routing it compiled between publishes, but never past a change. Every
// step publishes before the next change, so routing kept from before is
// always there to be wrongly reused. change and pub may be one store, or
// two nodes of one database.
func RoutingFollowsChanges(t *testing.T, change, pub bus.Store) {
	ctx := t.Context()
	ec := &env{t: t, s: change, ctx: ctx}
	ep := &env{t: t, s: pub, ctx: ctx}
	ws := ec.workspace()
	p1, p2 := ec.producer(ws), ec.producer(ws)

	// model: the workspace's connections as the test made them.
	var model []bus.Connection
	n := 0
	check := func(step string) {
		t.Helper()
		for _, typ := range []string{"a.x", "b.x", "a.b.c", "c", "b"} {
			for _, prod := range []string{p1, p2} {
				n++
				m := msgT(fmt.Sprint("m", n), typ, "s")
				var want []string
				for _, c := range model {
					if c.Kind == bus.KindConsumer && bus.Matches(c.Subscriptions, m.Topic, prod) {
						want = append(want, c.ID)
					}
				}
				out := ep.publish(ws, prod, T0, m)
				if g, w := sortedCopy(out[0].QueueIDs), sortedCopy(want); !slices.Equal(g, w) && !(len(g) == 0 && len(w) == 0) || out[0].Deliveries != len(want) {
					t.Fatalf("%s: publish %s from %s went to %q (%d deliveries), want %q", step, m.Topic, prod, g, out[0].Deliveries, w)
				}
			}
		}
	}
	add := func(subs ...bus.Subscription) int {
		t.Helper()
		c := connection(ws, bus.KindConsumer, 5, subs...)
		ec.update(func(tx bus.Tx) error { return tx.ConnectionCreate(c) })
		model = append(model, c)
		return len(model) - 1
	}
	set := func(i int, change func(c *bus.Connection)) {
		t.Helper()
		ec.update(func(tx bus.Tx) error {
			c, err := tx.ConnectionGet(model[i].ID)
			if err != nil {
				return err
			}
			change(&c)
			return tx.ConnectionUpdate(c)
		})
		change(&model[i])
	}
	del := func(i int) {
		t.Helper()
		ec.update(func(tx bus.Tx) error { return tx.ConnectionDelete(model[i].ID) })
		model = slices.Delete(model, i, i+1)
	}
	sub := func(topic string, producers ...string) bus.Subscription {
		return bus.Subscription{Topic: topic, Producers: producers}
	}

	check("no consumers")
	a := add(sub("som.a.*"))
	check("a consumer added")
	b := add(sub("som.>", p1))
	check("a second consumer, for p1 only")
	set(a, func(c *bus.Connection) { c.Subscriptions = []bus.Subscription{sub("som.b.*")} })
	check("a's subscription changed")
	set(b, func(c *bus.Connection) { c.Subscriptions = []bus.Subscription{sub("som.>", p2)} })
	check("b's producer filter changed")
	set(a, func(c *bus.Connection) { c.Status = bus.StatusRevoked })
	check("a revoked (a consumer of any status gets its messages)")
	set(a, func(c *bus.Connection) { c.Subscriptions = append(c.Subscriptions, sub("som.a.b.c"), sub("*.*", p1)) })
	check("a's subscriptions grew")

	// A change rolled back changes no routing.
	errRollback := errors.New("roll back")
	err := change.Update(ctx, func(tx bus.Tx) error {
		c, err := tx.ConnectionGet(model[b].ID)
		if err != nil {
			return err
		}
		c.Subscriptions = nil
		if err := tx.ConnectionUpdate(c); err != nil {
			return err
		}
		if err := tx.ConnectionCreate(connection(ws, bus.KindConsumer, 5, sub(">"))); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatalf("Update: %v, want the function's error", err)
	}
	check("a change rolled back")

	set(a, func(c *bus.Connection) { c.Kind = bus.KindProducer })
	check("a turned producer")
	set(a, func(c *bus.Connection) { c.Kind = bus.KindConsumer })
	check("a turned consumer again")
	del(a)
	check("a deleted")
	del(0)
	check("every consumer deleted")

	// Then random changes, each followed by publishes.
	rng := rand.New(rand.NewPCG(13, 3))
	patterns := []string{"som.>", "som.a.*", "som.*.x", "som.b.>", "som.c", "som.a.b.c", "*.*", ">", "som.b"}
	randomSubs := func() []bus.Subscription {
		subs := make([]bus.Subscription, rng.IntN(3))
		for i := range subs {
			subs[i].Topic = patterns[rng.IntN(len(patterns))]
			switch rng.IntN(4) {
			case 0:
				subs[i].Producers = []string{p1}
			case 1:
				subs[i].Producers = []string{p2, p1}
			}
		}
		return subs
	}
	for step := range 30 {
		switch k := rng.IntN(5); {
		case k == 0 || len(model) == 0:
			add(randomSubs()...)
		case k == 1:
			del(rng.IntN(len(model)))
		case k == 2:
			status := []bus.ConnectionStatus{bus.StatusActive, bus.StatusRevoked}[rng.IntN(2)]
			set(rng.IntN(len(model)), func(c *bus.Connection) { c.Status = status })
		default:
			subs := randomSubs()
			set(rng.IntN(len(model)), func(c *bus.Connection) { c.Subscriptions = subs })
		}
		check(fmt.Sprintf("random step %d", step))
	}
}
