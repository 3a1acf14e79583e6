package storetest

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

var publishTests = []test{
	{"FanOutToMatchingQueues", testFanOut},
	{"TopicPatterns", testTopicPatterns},
	{"ProducerFilter", testProducerFilter},
	{"RevokedConsumerReceives", testRevokedReceives},
	{"SubscriptionChangeAppliesToLaterMessages", testSubscriptionChange},
	{"NoMatchingQueue", testNoMatch},
	{"DeliveryFields", testDeliveryFields},
	{"EnvelopeBytesExact", testEnvelopeExact},
	{"OrderWithinBatchAndAcrossCalls", testPublishOrder},
	{"Dedup", testDedup},
	{"DedupWithinBatch", testDedupBatch},
	{"DedupWindowExpiry", testDedupExpiry},
	{"DedupPerProducer", testDedupPerProducer},
	{"StoryIDsNeverReused", testStoryIDsNeverReused},
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	sort.Strings(c)
	return c
}

// wantOutcome checks one publish outcome.
func wantOutcome(e *env, what string, got bus.PublishOutcome, dup bool, deliveries int, queues ...string) {
	e.t.Helper()
	if got.Duplicate != dup || got.Deliveries != deliveries {
		e.t.Errorf("%s: outcome %+v, want Duplicate=%v Deliveries=%d", what, got, dup, deliveries)
	}
	if g, w := sortedCopy(got.QueueIDs), sortedCopy(queues); !slices.Equal(g, w) && !(len(g) == 0 && len(w) == 0) {
		e.t.Errorf("%s: QueueIDs %q, want %q", what, g, w)
	}
}

// queued reports how many messages a queue holds (ready, nothing in flight).
func (e *env) queued(q string, now time.Time) int64 {
	e.t.Helper()
	st := e.stats(q, now)
	return st.Ready + st.InFlight + st.Delayed
}

func testFanOut(e *env) {
	ws := e.workspace()
	p := e.producer(ws)
	exact := e.consumer(ws, 5, "som.story.context")
	star := e.consumer(ws, 5, "som.story.*")
	gt := e.consumer(ws, 5, "som.>")
	two := e.consumer(ws, 5, "som.other", "som.story.context") // two matching subscriptions: placed once
	miss := e.consumer(ws, 5, "som.other.thing", "som.story")
	// A producer connection with subscriptions never gets a queue.
	prodWithSubs := connection(ws, bus.KindProducer, 5, bus.Subscription{Topic: "som.>"})
	e.update(func(tx bus.Tx) error { return tx.ConnectionCreate(prodWithSubs) })
	// Another workspace never gets the message.
	ws2 := e.workspace()
	foreign := e.consumer(ws2, 5, "som.>")

	out := e.publish(ws, p, T0, msgT("m1", "story.context", "s1"))
	wantOutcome(e, "publish", out[0], false, 4, exact, star, gt, two)
	now := at(time.Second)
	for _, q := range []string{exact, star, gt, two} {
		if n := e.queued(q, now); n != 1 {
			e.t.Errorf("matching queue holds %d messages, want 1", n)
		}
		wantIDs(e.t, e.receive(q, 10, time.Minute, now), "m1")
	}
	for _, q := range []string{miss, foreign} {
		if n := e.queued(q, now); n != 0 {
			e.t.Errorf("queue without a match holds %d messages", n)
		}
		wantIDs(e.t, e.receive(q, 10, time.Minute, now))
	}
}

func testTopicPatterns(e *env) {
	ws := e.workspace()
	p := e.producer(ws)
	star := e.consumer(ws, 5, "som.story.*")
	mid := e.consumer(ws, 5, "som.*.context")
	gt := e.consumer(ws, 5, "som.story.>")
	exact := e.consumer(ws, 5, "som.story")
	cases := []struct {
		typ  string
		want []string
	}{
		{"story", []string{exact}},                 // som.story: ">" needs one segment more; "*" needs exactly one
		{"story.context", []string{star, mid, gt}}, // som.story.context
		{"story.context.extra", []string{gt}},      // som.story.context.extra: "*" matches one segment only
		{"order.context", []string{mid}},           // som.order.context
		{"storyx.context", []string{mid}},          // segments match whole, not by prefix
		{"story.a.b.c.d", []string{gt}},
	}
	for i, c := range cases {
		out := e.publish(ws, p, T0, msgT(fmt.Sprintf("m%d", i), c.typ, "s"))
		wantOutcome(e, "publish "+c.typ, out[0], false, len(c.want), c.want...)
	}
}

func testProducerFilter(e *env) {
	ws := e.workspace()
	p1, p2 := e.producer(ws), e.producer(ws)
	only1 := e.consumerSubs(ws, 5, bus.Subscription{Topic: "som.>", Producers: []string{p1}})
	both := e.consumerSubs(ws, 5, bus.Subscription{Topic: "som.>", Producers: []string{p2, p1}})
	// A filtered subscription that does not match plus an unfiltered one that does.
	mixed := e.consumerSubs(ws, 5,
		bus.Subscription{Topic: "som.>", Producers: []string{p1}},
		bus.Subscription{Topic: "som.b.*"})
	out := e.publish(ws, p1, T0, msgT("from1", "a.x", "s"))
	wantOutcome(e, "publish from p1", out[0], false, 3, only1, both, mixed)
	out = e.publish(ws, p2, T0, msgT("from2", "a.x", "s"))
	wantOutcome(e, "publish from p2", out[0], false, 1, both)
	out = e.publish(ws, p2, T0, msgT("from2b", "b.x", "s"))
	wantOutcome(e, "publish from p2 to b.x", out[0], false, 2, both, mixed)
	d := e.receive(both, 10, time.Minute, at(time.Second))
	wantIDs(e.t, d, "from1")
	if d[0].ProducerID != p1 {
		e.t.Errorf("ProducerID = %q, want %q", d[0].ProducerID, p1)
	}
}

func testRevokedReceives(e *env) {
	f := e.fixture(5)
	e.update(func(tx bus.Tx) error {
		c, err := tx.ConnectionGet(f.Q)
		if err != nil {
			return err
		}
		c.Status = bus.StatusRevoked
		return tx.ConnectionUpdate(c)
	})
	out := e.publish(f.WS, f.P, T0, msg("m1", "s"))
	wantOutcome(e, "publish to a revoked consumer", out[0], false, 1, f.Q)
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, at(time.Second)), "m1")
}

func testSubscriptionChange(e *env) {
	f := e.fixture(5)
	e.publish(f.WS, f.P, T0, msgT("before", "a.x", "s"))
	e.update(func(tx bus.Tx) error {
		c, err := tx.ConnectionGet(f.Q)
		if err != nil {
			return err
		}
		c.Subscriptions = []bus.Subscription{{Topic: "som.b.*"}}
		return tx.ConnectionUpdate(c)
	})
	out := e.publish(f.WS, f.P, at(time.Second), msgT("after-a", "a.x", "s"), msgT("after-b", "b.x", "s"))
	wantOutcome(e, "publish a.x after the change", out[0], false, 0)
	wantOutcome(e, "publish b.x after the change", out[1], false, 1, f.Q)
	if n := e.queued(f.Q, at(2*time.Second)); n != 2 {
		e.t.Errorf("queue holds %d messages, want 2 (before, after-b)", n)
	}
}

func testNoMatch(e *env) {
	f := e.fixture(5)
	e.consumer(f.WS, 5, "som.zzz")
	out := e.publish(f.WS, f.P, T0, msgT("m1", "story.context", "s"))
	wantOutcome(e, "publish", out[0], false, 1, f.Q)
	ws := e.workspace()
	c := e.consumer(ws, 5, "som.zzz")
	out = e.publish(ws, e.producer(ws), T0, msgT("m2", "story.context", "s"))
	wantOutcome(e, "publish with no match", out[0], false, 0)
	if n := e.queued(c, T0); n != 0 {
		e.t.Errorf("non-matching queue holds %d", n)
	}
	// A message placed nowhere is still recorded for dedup.
	p := e.producer(ws)
	e.publish(ws, p, T0, msgT("m3", "story.context", "s"))
	out = e.publish(ws, p, at(time.Second), msgT("m3", "story.context", "s"))
	wantOutcome(e, "second publish of an unplaced message", out[0], true, 0)
}

func testDeliveryFields(e *env) {
	f := e.fixture(5)
	m := bus.PublishMessage{MessageID: "msg-Ünïcode/1 !~", MessageType: "order.created", Topic: "som.order.created", CorrelationID: "corr 0192f5a0-ä", Envelope: []byte(`{"x":1}`)}
	e.publish(f.WS, f.P, at(1234*time.Millisecond), m)
	ds := e.receive(f.Q, 10, time.Minute, at(2*time.Second))
	wantIDs(e.t, ds, m.MessageID)
	d := ds[0]
	if d.MessageType != m.MessageType || d.Topic != m.Topic || d.CorrelationID != m.CorrelationID || d.ProducerID != f.P {
		e.t.Errorf("delivery = %+v, want type %q topic %q correlation %q producer %q", d, m.MessageType, m.Topic, m.CorrelationID, f.P)
	}
	if d.ReceiveCount != 1 {
		e.t.Errorf("ReceiveCount = %d, want 1", d.ReceiveCount)
	}
	sameTime(e.t, "EnqueuedAt", d.EnqueuedAt, at(1234*time.Millisecond))
	if d.Handle.QueueID != f.Q || d.Handle.Seq != 1 || d.Handle.StoryID <= 0 || d.Handle.Nonce <= 0 {
		e.t.Errorf("Handle = %+v, want queue %s, seq 1, positive story id and nonce", d.Handle, f.Q)
	}
	if !bytes.Equal(d.Envelope, m.Envelope) {
		e.t.Errorf("Envelope = %q, want %q", d.Envelope, m.Envelope)
	}
}

func testEnvelopeExact(e *env) {
	f := e.fixture(5)
	big := []byte(`{"som_version":"1.0.0", "payload": {"blob": "` + strings.Repeat("x\\u00e9", 40000) + `"}}` + "\n")
	envs := [][]byte{
		[]byte("{ \"b\" : 1,\n\t\"a\": \"\u00e9\\u00e9\",  \"n\": 1.000e2 , \"z\": {\"k\":[ ]} }  \n"),
		[]byte(`{"a":"\u0000 nul","b":"quote \" and \\ backslash"}`),
		{'{', '"', 'x', '"', ':', '"', 0xc3, 0xa9, '"', '}'},
		big,
	}
	var msgs []bus.PublishMessage
	for i, env := range envs {
		m := msg(fmt.Sprintf("m%d", i), fmt.Sprintf("s%d", i))
		m.Envelope = env
		msgs = append(msgs, m)
	}
	e.publish(f.WS, f.P, T0, msgs...)
	ds := e.receive(f.Q, 10, time.Minute, at(time.Second))
	if len(ds) != len(envs) {
		e.t.Fatalf("received %d, want %d", len(ds), len(envs))
	}
	for _, d := range ds {
		var i int
		_, _ = fmt.Sscanf(d.MessageID, "m%d", &i)
		if !bytes.Equal(d.Envelope, envs[i]) {
			e.t.Errorf("envelope of %s changed: got %d bytes %.80q, want %d bytes %.80q", d.MessageID, len(d.Envelope), d.Envelope, len(envs[i]), envs[i])
		}
	}
}

func testPublishOrder(e *env) {
	f := e.fixture(5)
	e.pub(f, T0, "s", "m1", "m2", "m3")
	e.pub(f, at(time.Millisecond), "s", "m4")
	e.pub(f, at(2*time.Millisecond), "s", "m5", "m6")
	now := at(time.Second)
	for i := 1; i <= 6; i++ {
		d := e.receiveOne(f.Q, time.Minute, now, fmt.Sprintf("m%d", i))
		if d.Handle.Seq != int64(i) {
			e.t.Errorf("m%d has seq %d, want %d", i, d.Handle.Seq, i)
		}
		e.ackOK(f.Q, now, d.Handle)
	}
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, now))
}

func testDedup(e *env) {
	ws := e.workspace()
	p := e.producer(ws)
	q1 := e.consumer(ws, 5, "som.>")
	q2 := e.consumer(ws, 5, "som.story.*")
	out := e.publish(ws, p, T0, msg("m1", "s"))
	wantOutcome(e, "first publish", out[0], false, 2, q1, q2)
	// Subscriptions change: a duplicate still reports the original deliveries.
	e.update(func(tx bus.Tx) error { return tx.ConnectionDelete(q2) })
	dupMsg := msg("m1", "other-story")
	dupMsg.Envelope = []byte(`{"different":true}`)
	out = e.publish(ws, p, at(time.Minute), dupMsg)
	wantOutcome(e, "duplicate publish", out[0], true, 2)
	out = e.publish(ws, p, at(dedupWindow-time.Millisecond), msg("m1", "s"))
	wantOutcome(e, "duplicate just inside the window", out[0], true, 2)
	if n := e.queued(q1, at(dedupWindow)); n != 1 {
		e.t.Fatalf("queue holds %d messages after duplicates, want 1", n)
	}
	ds := e.receive(q1, 10, time.Minute, at(dedupWindow))
	wantIDs(e.t, ds, "m1")
	if !bytes.Equal(ds[0].Envelope, envelope("m1", "story.context", "s")) || ds[0].CorrelationID != "s" {
		e.t.Errorf("the duplicate replaced the original: %+v", ds[0])
	}
}

func testDedupBatch(e *env) {
	f := e.fixture(5)
	f2 := e.consumer(f.WS, 5, "som.>")
	out := e.publish(f.WS, f.P, T0, msg("a", "s"), msg("b", "s"), msg("a", "s"), msg("c", "t"), msg("b", "x"))
	wantOutcome(e, "a", out[0], false, 2, f.Q, f2)
	wantOutcome(e, "b", out[1], false, 2, f.Q, f2)
	wantOutcome(e, "a again", out[2], true, 2)
	wantOutcome(e, "c", out[3], false, 2, f.Q, f2)
	wantOutcome(e, "b again", out[4], true, 2)
	now := at(time.Second)
	d := e.receive(f.Q, 10, time.Minute, now)
	wantIDs(e.t, d, "a", "c")
	e.ackOK(f.Q, now, d[0].Handle)
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, now), "b")
	e.ackOK(f.Q, now, d[1].Handle)
	wantIDs(e.t, e.receive(f.Q, 10, time.Minute, now))
}

func testDedupExpiry(e *env) {
	f := e.fixture(5)
	out := e.publish(f.WS, f.P, T0, msg("m1", "s"))
	wantOutcome(e, "first", out[0], false, 1, f.Q)
	// accepted_at > Now - window is a duplicate; at exactly Now - window it
	// is not any more.
	t2 := at(dedupWindow)
	out = e.publish(f.WS, f.P, t2, msg("m1", "s"))
	wantOutcome(e, "publish one window later", out[0], false, 1, f.Q)
	// The new acceptance starts a new window.
	out = e.publish(f.WS, f.P, t2.Add(dedupWindow-time.Millisecond), msg("m1", "s"))
	wantOutcome(e, "publish within the renewed window", out[0], true, 1)
	if n := e.queued(f.Q, t2.Add(dedupWindow)); n != 2 {
		e.t.Errorf("queue holds %d, want 2", n)
	}
	// A shorter window given by the caller applies.
	out, err := e.s.MessagePublish(e.ctx, &bus.PublishParams{WorkspaceID: f.WS, ProducerID: f.P, Messages: []bus.PublishMessage{msg("m1", "s")}, Now: t2.Add(2 * time.Minute), DedupWindow: time.Minute})
	if err != nil {
		e.t.Fatal(err)
	}
	wantOutcome(e, "publish with a shorter window", out[0], false, 1, f.Q)
}

func testDedupPerProducer(e *env) {
	f := e.fixture(5)
	p2 := e.producer(f.WS)
	e.publish(f.WS, f.P, T0, msg("m1", "s"))
	out := e.publish(f.WS, p2, at(time.Second), msg("m1", "s"))
	wantOutcome(e, "same id from another producer", out[0], false, 1, f.Q)
	now := at(2 * time.Second)
	d := e.receive(f.Q, 10, time.Minute, now)
	if len(d) != 1 || d[0].ProducerID != f.P {
		e.t.Fatalf("first delivery %+v, want m1 from the first producer", d)
	}
	e.ackOK(f.Q, now, d[0].Handle)
	d = e.receive(f.Q, 10, time.Minute, now)
	if len(d) != 1 || d[0].ProducerID != p2 || d[0].MessageID != "m1" {
		e.t.Fatalf("second delivery %+v, want m1 from the second producer", d)
	}
}

// testStoryIDsNeverReused: a story that empties is deleted; the next story
// gets a new id, so old handles never match it.
func testStoryIDsNeverReused(e *env) {
	f := e.fixture(5)
	seen := map[int64]bool{}
	for i := range 3 {
		now := at(time.Duration(i) * time.Second)
		e.pub(f, now, "s", fmt.Sprintf("m%d", i))
		d := e.receiveOne(f.Q, time.Minute, now, fmt.Sprintf("m%d", i))
		if seen[d.Handle.StoryID] {
			e.t.Errorf("story id %d reused after the story emptied", d.Handle.StoryID)
		}
		seen[d.Handle.StoryID] = true
		e.ackOK(f.Q, now, d.Handle)
	}
	// Purged stories too.
	now := at(10 * time.Second)
	e.pub(f, now, "p", "p1")
	d := e.receiveOne(f.Q, time.Minute, now, "p1")
	if _, err := e.s.QueuePurge(e.ctx, &bus.PurgeParams{QueueID: f.Q, Now: now, Audit: auditEntry(f.WS, "queue.purge", now)}); err != nil {
		e.t.Fatal(err)
	}
	e.pub(f, now, "p", "p2")
	d2 := e.receiveOne(f.Q, time.Minute, now, "p2")
	if d2.Handle.StoryID == d.Handle.StoryID || seen[d2.Handle.StoryID] {
		e.t.Errorf("story id %d reused after a purge", d2.Handle.StoryID)
	}
	// A handle of the purged story with the new story's seq and nonce fails.
	forged := d.Handle
	forged.Nonce = d2.Handle.Nonce
	wantSettle(e.t, "ack of the purged story's handle", e.ack(f.Q, now, d.Handle, forged), false, false)
	e.ackOK(f.Q, now, d2.Handle)
}
