package bus

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// routeOracle is routing as a loop of Matches over every consumer, in
// order: what a Router must answer.
func routeOracle(cs []RouteConsumer, topic, producerID string) []string {
	var out []string
	for _, c := range cs {
		if Matches(c.Subscriptions, topic, producerID) {
			out = append(out, c.ID)
		}
	}
	return out
}

func checkRoute(t *testing.T, cs []RouteConsumer, r *Router, topic, producerID string) {
	t.Helper()
	got, want := r.Route(topic, producerID), routeOracle(cs, topic, producerID)
	if !slices.Equal(got, want) {
		t.Fatalf("Route(%q, %q) = %q, want %q; consumers %+v", topic, producerID, got, want, cs)
	}
}

func TestRouterCases(t *testing.T) {
	t.Parallel()
	sub := func(topic string, producers ...string) Subscription {
		return Subscription{Topic: topic, Producers: producers}
	}
	cs := []RouteConsumer{
		{ID: "exact", Subscriptions: []Subscription{sub("som.story.context")}},
		{ID: "star", Subscriptions: []Subscription{sub("som.story.*")}},
		{ID: "mid", Subscriptions: []Subscription{sub("som.*.context")}},
		{ID: "gt", Subscriptions: []Subscription{sub("som.story.>")}},
		{ID: "all", Subscriptions: []Subscription{sub(">")}},
		{ID: "two", Subscriptions: []Subscription{sub("*.*")}},
		{ID: "p1", Subscriptions: []Subscription{sub("som.>", "p1")}},
		{ID: "p1or2", Subscriptions: []Subscription{sub("som.>", "p2", "p1"), sub("som.story.context")}},
		{ID: "none"},
		{ID: "twice", Subscriptions: []Subscription{sub("som.story.context"), sub("som.>"), sub("som.*.*")}},
		{ID: "inner-gt", Subscriptions: []Subscription{sub("som.>.x")}}, // ">" ends the pattern where it stands
		{ID: "empty-seg", Subscriptions: []Subscription{sub("som..x"), sub("")}},
	}
	r := NewRouter(cs)
	if r.Consumers() != len(cs) {
		t.Fatalf("Consumers() = %d, want %d", r.Consumers(), len(cs))
	}
	for _, topic := range []string{
		"som", "som.story", "som.story.context", "som.story.context.extra", "som.order.context",
		"som.storyx.context", "som.a.b.c.d", "", ".", "som.", "som..x", "som.*", "som.>", "x.y", "*",
	} {
		for _, p := range []string{"p1", "p2", "p3", ""} {
			checkRoute(t, cs, r, topic, p)
		}
	}
	if got := r.Route("som.story.context", "p1"); !slices.Equal(got, []string{"exact", "star", "mid", "gt", "all", "p1", "p1or2", "twice", "inner-gt"}) {
		t.Errorf("Route in consumer order = %q", got)
	}
	if got := NewRouter(nil).Route("som.a", "p"); got != nil {
		t.Errorf("Route with no consumers = %q, want nil", got)
	}
}

// TestRouterAgainstMatches compares a Router with the loop over Matches on
// random consumers, subscriptions and topics made of a few segments, so
// that patterns and topics often meet.
func TestRouterAgainstMatches(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 13))
	patternSegs := []string{"som", "a", "b", "", "*", "*", ">", ">", "a-b"}
	topicSegs := []string{"som", "a", "b", "", "*", ">", "a-b", "c"}
	producers := []string{"p1", "p2", "p3"}
	join := func(pool []string, n int) string {
		segs := make([]string, n)
		for i := range segs {
			segs[i] = pool[rng.IntN(len(pool))]
		}
		return strings.Join(segs, ".")
	}
	for round := range 3000 {
		cs := make([]RouteConsumer, rng.IntN(25))
		for i := range cs {
			cs[i].ID = fmt.Sprintf("c%d-%d", round, i)
			for range rng.IntN(4) {
				var s Subscription
				s.Topic = join(patternSegs, 1+rng.IntN(5))
				for _, p := range producers {
					if rng.IntN(4) == 0 {
						s.Producers = append(s.Producers, p)
					}
				}
				cs[i].Subscriptions = append(cs[i].Subscriptions, s)
			}
		}
		r := NewRouter(cs)
		for range 20 {
			checkRoute(t, cs, r, join(topicSegs, 1+rng.IntN(6)), producers[rng.IntN(len(producers))])
		}
	}
}

// FuzzRouter: a Router built from any patterns routes any topic as the
// loop over Matches does. Patterns are separated by "|"; a "@" in a
// pattern starts its producer list, separated by ",".
func FuzzRouter(f *testing.F) {
	f.Add("som.>|som.a.*|som.a|>@p1,p2", "som.a.b", "p1")
	f.Add("*.*|som..x|som.>.x|", "som.a", "p2")
	f.Add("a.b.c|a.*.c|a.>|*.*.*", "a.b.c", "")
	f.Fuzz(func(t *testing.T, patterns, topic, producer string) {
		var cs []RouteConsumer
		for i, spec := range strings.Split(patterns, "|") {
			var s Subscription
			topicPart, prods, ok := strings.Cut(spec, "@")
			s.Topic = topicPart
			if ok {
				s.Producers = strings.Split(prods, ",")
			}
			// Two subscriptions a consumer for every other pattern.
			if i%2 == 1 && len(cs) > 0 {
				cs[len(cs)-1].Subscriptions = append(cs[len(cs)-1].Subscriptions, s)
				continue
			}
			cs = append(cs, RouteConsumer{ID: fmt.Sprint("c", i), Subscriptions: []Subscription{s}})
		}
		checkRoute(t, cs, NewRouter(cs), topic, producer)
	})
}

func TestRouteCache(t *testing.T) {
	t.Parallel()
	var c RouteCache
	r1 := NewRouter([]RouteConsumer{{ID: "a", Subscriptions: []Subscription{{Topic: "som.>"}}}})
	r2 := NewRouter([]RouteConsumer{{ID: "b", Subscriptions: []Subscription{{Topic: "som.>"}}}})
	if c.Get("w", 1) != nil {
		t.Fatal("Get on an empty cache found a router")
	}
	if _, _, ok := c.Latest("w"); ok {
		t.Fatal("Latest on an empty cache found a router")
	}
	c.Put("w", 1, r1)
	if r, v, ok := c.Latest("w"); !ok || r != r1 || v != 1 {
		t.Fatalf("Latest(w) = %p, %d, %v; want r1, 1, true", r, v, ok)
	}
	if c.Get("w", 1) != r1 {
		t.Fatal("Get(w, 1) after Put(w, 1) did not find it")
	}
	if c.Get("w", 2) != nil || c.Get("v", 1) != nil {
		t.Fatal("Get found a router of another version or workspace")
	}
	c.Put("w", 2, r2)
	if c.Get("w", 1) != nil || c.Get("w", 2) != r2 {
		t.Fatal("Put of a new version did not replace the old")
	}
	if r, v, _ := c.Latest("w"); r != r2 || v != 2 {
		t.Fatal("Latest did not follow the new version")
	}
	if c.Len() != 1 {
		t.Fatalf("Len = %d, want 1", c.Len())
	}
}

func TestRouteCacheBound(t *testing.T) {
	t.Parallel()
	c := RouteCache{MaxWeight: 10}
	three := NewRouter([]RouteConsumer{{ID: "a", Subscriptions: []Subscription{{Topic: "a"}, {Topic: "b"}}}}) // weight 3
	for i := range 20 {
		c.Put(fmt.Sprint("w", i), 1, three)
		if c.weight > 10 || c.Len() > 3 {
			t.Fatalf("after %d puts: weight %d over %d workspaces, want at most 10", i+1, c.weight, c.Len())
		}
		if c.Get(fmt.Sprint("w", i), 1) != three {
			t.Fatalf("the router just put (w%d) was dropped", i)
		}
	}
	big := NewRouter([]RouteConsumer{{ID: "a", Subscriptions: make([]Subscription, 20)}})
	c.Put("big", 1, big)
	if c.Len() != 1 || c.Get("big", 1) != big {
		t.Fatalf("a router over the bound alone: Len %d, kept %v", c.Len(), c.Get("big", 1) == big)
	}
}

func BenchmarkRoute(b *testing.B) {
	cs := make([]RouteConsumer, 1000)
	for i := range cs {
		cs[i] = RouteConsumer{ID: fmt.Sprint("c", i), Subscriptions: []Subscription{
			{Topic: fmt.Sprintf("som.team%d.>", i)}, {Topic: fmt.Sprintf("som.bench.event%d", i)}, {Topic: fmt.Sprintf("som.*.event.c%d", i)},
		}}
	}
	for i := range 10 {
		cs[i*100].Subscriptions = append(cs[i*100].Subscriptions, Subscription{Topic: []string{"som.bench.event", "som.bench.*", "som.>"}[i%3]})
	}
	r := NewRouter(cs)
	b.Run("router", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(r.Route("som.bench.event", "p")) != 10 {
				b.Fatal("wrong routing")
			}
		}
	})
	b.Run("loop", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(routeOracle(cs, "som.bench.event", "p")) != 10 {
				b.Fatal("wrong routing")
			}
		}
	})
}
