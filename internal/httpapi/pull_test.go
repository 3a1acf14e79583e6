package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
)

// mpSettleAnswer is the body of an ack or nack answer.
type mpSettleAnswer struct {
	Acked  []string `json:"acked"`
	Nacked []string `json:"nacked"`
	Failed []struct {
		ReceiptHandle string `json:"receipt_handle"`
		Code          string `json:"code"`
		Message       string `json:"message"`
	} `json:"failed"`
}

// mpSettle acks or nacks and decodes the answer.
func mpSettle(t *testing.T, n *servertest.Node, p *servertest.Pair, verb string, hs []string, delay *int) mpSettleAnswer {
	t.Helper()
	var a mpSettleAnswer
	n.Settle(p, verb, hs, delay).Must(t, 200).Decode(t, &a)
	return a
}

// mpOne expects exactly one message from a receive.
func mpOne(t *testing.T, n *servertest.Node, p *servertest.Pair, query string) servertest.Message {
	t.Helper()
	ms := n.Receive(p, query)
	if len(ms) != 1 {
		t.Fatalf("receive %s: %d messages, want 1: %+v", query, len(ms), ms)
	}
	return ms[0]
}

// mpNone expects an empty receive (wait=0).
func mpNone(t *testing.T, n *servertest.Node, p *servertest.Pair) {
	t.Helper()
	if ms := n.Receive(p, "wait=0"); len(ms) != 0 {
		t.Fatalf("receive: %d messages, want none: %v", len(ms), ms[0].MessageID())
	}
}

func mpInt(i int) *int { return &i }

func TestReceiveParameters(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, map[string]any{"attempt_limit": 1000}) // one message, received many times
	n.Publish(p, servertest.Envelope("m1", "s1", nil)).Must(t, 202)
	bad := map[string]string{ // query -> the parameter the message must name
		"max=0": "max", "max=11": "max", "max=-1": "max", "max=1.5": "max", "max=abc": "max", "max=": "max",
		"max=1&max=2": "max", "max=%201": "max", "max=1e1": "max", "max=0x5": "max", "max=99999999999999999999": "max",
		"wait=21": "wait", "wait=-1": "wait", "wait=1.5": "wait", "wait=abc": "wait", "wait=": "wait", "wait=0&wait=0": "wait",
		"visibility=43201": "visibility", "visibility=-1": "visibility", "visibility=1.5": "visibility",
		"visibility=abc": "visibility", "visibility=": "visibility", "visibility=5&visibility=5": "visibility",
		"attempt=": "attempt", "attempt=" + strings.Repeat("a", 129): "attempt", "attempt=a%20b": "attempt",
		"attempt=a%7Fb": "attempt", "attempt=caf%C3%A9": "attempt", "attempt=a%09b": "attempt", "attempt=a&attempt=b": "attempt",
		"foo=1": "foo", "MAX=1": "MAX", "max=1&waitt=2": "waitt", "delay_seconds=1": "delay_seconds",
		// Not URL encoding: refused, not read without the pairs that do not decode.
		"max=%zz": "query string", "wait=0&max=1%": "query string", "max=1;wait=0": "query string", "%zz=1": "query string",
		"zz=1&foo=2&max=1": "foo", // the first unknown parameter in byte order, every time
		"=1":               "Unknown query parameter \"\"", "max=1&=&=": "Unknown query parameter \"\"",
	}
	for q, param := range bad {
		r := n.Do("GET", p.MessagesPath()+"?"+q, p.ConsumTok, nil)
		if r.Status != 400 || r.Rule() != bus.RulePullBadRequest {
			t.Errorf("%s: status %d %s, want 400 pull.bad_request", q, r.Status, r.Body)
			continue
		}
		var b struct{ Violations []bus.Violation }
		r.Decode(t, &b)
		if !strings.Contains(b.Violations[0].Message, param) {
			t.Errorf("%s: message %q does not name %s", q, b.Violations[0].Message, param)
		}
	}
	// Every bound is accepted. visibility=0 leaves the message visible, so
	// each receive finds it at once (no waiting, whatever wait says).
	allPrintable := ""
	for c := byte('!'); c <= '~'; c++ {
		allPrintable += string(c)
	}
	good := []string{
		"visibility=0", "max=1&visibility=0", "max=10&visibility=0", "wait=0&visibility=0", "wait=20&visibility=0",
		"wait=1&visibility=0", "visibility=0", "max=5&wait=7&visibility=0&attempt=x",
		"attempt=" + url.QueryEscape(allPrintable) + "&visibility=0",
		"attempt=" + strings.Repeat("z", 128) + "&visibility=0", "visibility=43200",
	}
	for i, q := range good {
		if i == len(good)-1 {
			// The last takes the message for 12 hours: it then is in flight.
			clock := n.ManualClock()
			m := mpOne(t, n, p, q)
			clock.Advance(43199 * time.Second)
			p.ConsumTok = n.Token(p.Consumer, p.ConsumerSecret) // the first one expired
			mpNone(t, n, p)
			clock.Advance(time.Second)
			if m2 := mpOne(t, n, p, "wait=0"); m2.ReceiveCount != m.ReceiveCount+1 {
				t.Errorf("after 43200 s: receive_count %d after %d", m2.ReceiveCount, m.ReceiveCount)
			}
			continue
		}
		mpOne(t, n, p, q)
	}
	if len(allPrintable) != 94 {
		t.Fatalf("printable set is %d characters", len(allPrintable))
	}
}

func TestSettleBodies(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	for i := range 12 {
		n.Publish(p, servertest.Envelope(fmt.Sprintf("m%d", i), fmt.Sprintf("s%d", i), nil)).Must(t, 202)
	}
	ms := n.Receive(p, "max=10&wait=0")
	if len(ms) != 10 {
		t.Fatalf("received %d", len(ms))
	}
	var hs []string
	for _, m := range ms {
		hs = append(hs, m.ReceiptHandle)
	}
	for _, verb := range []string{"ack", "nack"} {
		path := p.SettlePath(verb)
		bad := map[string]string{
			"empty list":      `{"receipt_handles":[]}`,
			"null list":       `{"receipt_handles":null}`,
			"null handle":     `{"receipt_handles":["x",null]}`,
			"missing":         `{}`,
			"eleven":          mustJSON(map[string]any{"receipt_handles": append(slices.Clone(hs), "x")}),
			"repeated":        mustJSON(map[string]any{"receipt_handles": []string{hs[0], hs[1], hs[0]}}),
			"not a list":      `{"receipt_handles":"x"}`,
			"numbers":         `{"receipt_handles":[1]}`,
			"unknown field":   `{"receipt_handles":["x"],"foo":1}`,
			"not JSON":        `{"receipt_handles":[`,
			"array":           `["x"]`,
			"trailing":        `{"receipt_handles":["x"]} {}`,
			"stray bracket":   `{"receipt_handles":["x"]}]`,
			"empty body":      ``,
			"delay -1":        `{"receipt_handles":["x"],"delay_seconds":-1}`,
			"delay 43201":     `{"receipt_handles":["x"],"delay_seconds":43201}`,
			"delay 1.5":       `{"receipt_handles":["x"],"delay_seconds":1.5}`,
			"delay string":    `{"receipt_handles":["x"],"delay_seconds":"5"}`,
			"delay on ack":    `{"receipt_handles":["x"],"delay_seconds":0}`,
			"over 64 KiB":     `{"receipt_handles":["` + strings.Repeat("x", 64<<10) + `"]}`,
			"ack as the body": `{"acked":["x"]}`,
		}
		for name, body := range bad {
			if verb == "nack" && name == "delay on ack" {
				continue
			}
			if verb == "ack" && strings.HasPrefix(name, "delay ") {
				continue // refused too, but by the same rule as "delay on ack"
			}
			r := n.Do("POST", path, p.ConsumTok, body)
			want := 400
			if name == "over 64 KiB" {
				want = 413
			}
			if r.Status != want || r.Rule() != bus.RulePullBadRequest {
				t.Errorf("%s %s: %d %s", verb, name, r.Status, r.Body)
			}
		}
		// Wrong content type.
		if r := n.Do("POST", path, p.ConsumTok, nil); r.Status != 400 || r.Rule() != bus.RulePullBadRequest {
			t.Errorf("%s without a body: %d %s", verb, r.Status, r.Body)
		}
	}
	// Ten distinct handles, some bad: 200 with a result per handle.
	// An empty handle is a malformed one: it fails on its own, as the
	// others do, and does not refuse the request.
	mixed := []string{hs[0], hs[1], "garbage", hs[2][:len(hs[2])-2], "", hs[3] + "x"}
	a := mpSettle(t, n, p, "ack", mixed, nil)
	if !slices.Equal(a.Acked, []string{hs[0], hs[1]}) || len(a.Failed) != 4 {
		t.Errorf("mixed ack: %+v", a)
	}
	for _, f := range a.Failed {
		if f.Code != bus.CodeReceiptHandleIsInvalid || f.Message == "" {
			t.Errorf("failure %+v", f)
		}
	}
	// delay_seconds 0 and 43200 are accepted; so is leaving it out.
	a = mpSettle(t, n, p, "nack", []string{hs[2]}, mpInt(0))
	b := mpSettle(t, n, p, "nack", []string{hs[3]}, mpInt(43200))
	c := mpSettle(t, n, p, "nack", []string{hs[4]}, nil)
	if len(a.Nacked) != 1 || len(b.Nacked) != 1 || len(c.Nacked) != 1 || a.Acked != nil {
		t.Errorf("nacks: %+v %+v %+v", a, b, c)
	}
	// All ten at once (the rest of them).
	a = mpSettle(t, n, p, "ack", hs[2:], nil)
	if len(a.Acked) != 8 || len(a.Failed) != 0 {
		t.Errorf("ack of 8: %+v", a)
	}
	// A handle of another queue fails on its own.
	q := mpConsumer(n, p, nil)
	n.Publish(p, servertest.Envelope("q1", "qs", nil)).Must(t, 202)
	m := mpOne(t, n, q, "wait=0")
	a = mpSettle(t, n, p, "ack", []string{m.ReceiptHandle}, nil)
	if len(a.Failed) != 1 || a.Failed[0].Code != bus.CodeReceiptHandleIsInvalid {
		t.Errorf("another queue's handle: %+v", a)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestReceiveAnswer(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	clock := n.ManualClock()
	enq := clock.Now()
	n.Publish(p, servertest.Envelope("m1", "story-7", map[string]any{"k": "v"})).Must(t, 202)
	r := n.Do("GET", p.MessagesPath()+"?wait=0", p.ConsumTok, nil).Must(t, 200)
	for _, h := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
		if r.Header.Get(h) == "" {
			t.Errorf("receive answer without %s", h)
		}
	}
	var raw struct {
		Messages []map[string]json.RawMessage `json:"messages"`
	}
	r.Decode(t, &raw)
	if len(raw.Messages) != 1 {
		t.Fatalf("%s", r.Body)
	}
	var keys []string
	for k := range raw.Messages[0] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := []string{"correlation_id", "enqueued_at", "envelope", "message_type", "producer_id", "receipt_handle", "receive_count", "topic"}
	if !slices.Equal(keys, want) {
		t.Errorf("message fields %v, want exactly %v", keys, want)
	}
	var m servertest.Message
	if err := json.Unmarshal(r.Body[len(`{"messages":[`):len(r.Body)-3], &m); err != nil {
		t.Fatalf("%v: %s", err, r.Body)
	}
	if m.MessageType != "story.context" || m.CorrelationID != "story-7" || m.Topic != "som.story.context" ||
		m.ProducerID != p.Producer || m.ReceiveCount != 1 || m.EnqueuedAt != enq.Format("2006-01-02T15:04:05.000Z") || m.MessageID() != "m1" {
		t.Errorf("message %+v", m)
	}
	// Empty: {"messages": []}.
	r = n.Do("GET", p.MessagesPath()+"?wait=0", p.ConsumTok, nil).Must(t, 200)
	if strings.TrimSpace(string(r.Body)) != `{"messages":[]}` {
		t.Errorf("empty answer %s", r.Body)
	}

	// Refusals: a producer's token, another connection, another tenant.
	q := mpConsumer(n, p, nil)
	for name, c := range map[string]struct {
		path, tok, rule string
		status          int
	}{
		"producer token": {p.MessagesPath(), p.ProducerTok, bus.RuleNotRegistered, 403},
		"not owner":      {q.MessagesPath(), p.ConsumTok, bus.RuleNotOwner, 403},
		"other tenant":   {"/v1/tenants/" + n.Workspace("x") + "/consumers/" + p.Consumer + "/messages", p.ConsumTok, bus.RuleTenantMismatch, 403},
		"no token":       {p.MessagesPath(), "", bus.RuleUnauthenticated, 401},
		"ack not owner":  {q.SettlePath("ack"), p.ConsumTok, bus.RuleNotOwner, 403},
		"skills, prod":   {"/v1/tenants/" + p.WS + "/consumers/" + p.Consumer + "/skills", p.ProducerTok, bus.RuleNotRegistered, 403},
	} {
		method, body := "GET", any(nil)
		if strings.HasSuffix(c.path, "/ack") {
			method, body = "POST", map[string]any{"receipt_handles": []string{"x"}}
		}
		r := n.Do(method, c.path+"?wait=0", c.tok, body)
		if strings.HasSuffix(c.path, "/ack") || strings.HasSuffix(c.path, "/skills") {
			r = n.Do(method, c.path, c.tok, body)
		}
		if r.Status != c.status || r.Rule() != c.rule {
			t.Errorf("%s: %d %s", name, r.Status, r.Body)
		}
	}
}

func TestVisibilityAndReceiveCount(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	clock := n.ManualClock()
	n.Publish(p, servertest.Envelope("m1", "s1", nil)).Must(t, 202)
	n.Publish(p, servertest.Envelope("m2", "s1", nil)).Must(t, 202)

	m1 := mpOne(t, n, p, "wait=0&visibility=30")
	if m1.MessageID() != "m1" || m1.ReceiveCount != 1 {
		t.Fatalf("first: %s %d", m1.MessageID(), m1.ReceiveCount)
	}
	st := n.QueueCounts(p)
	if st.InFlight != 1 || st.Ready != 1 || st.Delayed != 0 {
		t.Errorf("counts while in flight: %+v", st)
	}
	clock.Advance(29999 * time.Millisecond)
	mpNone(t, n, p) // m1 in flight: m2 waits too
	clock.Advance(time.Millisecond)
	m1b := mpOne(t, n, p, "wait=0&visibility=30")
	if m1b.MessageID() != "m1" || m1b.ReceiveCount != 2 || m1b.ReceiptHandle == m1.ReceiptHandle {
		t.Fatalf("redelivery: %s count %d", m1b.MessageID(), m1b.ReceiveCount)
	}
	// The first delivery's handle no longer settles.
	for _, verb := range []string{"ack", "nack"} {
		a := mpSettle(t, n, p, verb, []string{m1.ReceiptHandle}, nil)
		if len(a.Failed) != 1 || a.Failed[0].Code != bus.CodeReceiptHandleIsInvalid {
			t.Errorf("%s with a stale handle: %+v", verb, a)
		}
	}
	// The latest handle acknowledges even after its visibility ran out.
	clock.Advance(time.Minute)
	if a := mpSettle(t, n, p, "ack", []string{m1b.ReceiptHandle}, nil); len(a.Acked) != 1 {
		t.Fatalf("late ack: %+v", a)
	}
	// Again: idempotent.
	if a := mpSettle(t, n, p, "ack", []string{m1b.ReceiptHandle}, nil); len(a.Acked) != 1 {
		t.Errorf("second ack: %+v", a)
	}
	// A nack of an acknowledged message fails.
	if a := mpSettle(t, n, p, "nack", []string{m1b.ReceiptHandle}, nil); len(a.Failed) != 1 {
		t.Errorf("nack after ack: %+v", a)
	}
	m2 := mpOne(t, n, p, "wait=0&visibility=0")
	if m2.MessageID() != "m2" || m2.ReceiveCount != 1 {
		t.Fatalf("m2: %s %d", m2.MessageID(), m2.ReceiveCount)
	}
	// visibility=0: visible again at once, and each receive counts.
	m2b := mpOne(t, n, p, "wait=0&visibility=0")
	if m2b.ReceiveCount != 2 {
		t.Errorf("m2 again: %d", m2b.ReceiveCount)
	}
	// The handle of a message received again fails, the latest works.
	if a := mpSettle(t, n, p, "ack", []string{m2.ReceiptHandle, m2b.ReceiptHandle}, nil); len(a.Acked) != 1 || a.Acked[0] != m2b.ReceiptHandle {
		t.Errorf("ack of both: %+v", a)
	}
	mpNone(t, n, p)
	if st := n.QueueCounts(p); st != (bus.QueueStats{}) {
		t.Errorf("counts when empty: %+v", st)
	}
}

func TestNackDelayKeepsStoryLocked(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	clock := n.ManualClock()
	for _, id := range []string{"a1", "a2"} {
		n.Publish(p, servertest.Envelope(id, "A", nil)).Must(t, 202)
	}
	n.Publish(p, servertest.Envelope("b1", "B", nil)).Must(t, 202)

	ms := n.Receive(p, "wait=0")
	if len(ms) != 2 || ms[0].MessageID() != "a1" || ms[1].MessageID() != "b1" {
		t.Fatalf("first receive: %v", ms)
	}
	a1 := ms[0]
	mpAckAll(t, n, p, []string{ms[1].ReceiptHandle})
	if a := mpSettle(t, n, p, "nack", []string{a1.ReceiptHandle}, mpInt(60)); len(a.Nacked) != 1 {
		t.Fatalf("nack: %+v", a)
	}
	if st := n.QueueCounts(p); st.Delayed != 1 || st.InFlight != 0 || st.Ready != 1 {
		t.Errorf("counts during the delay: %+v", st)
	}
	// During the delay neither a1 nor a2 is delivered.
	clock.Advance(59999 * time.Millisecond)
	mpNone(t, n, p)
	// The nacked handle still settles until the next receive: a second
	// nack with a delay of 0 would release at once; instead let the delay run.
	clock.Advance(time.Millisecond)
	m := mpOne(t, n, p, "wait=0")
	if m.MessageID() != "a1" || m.ReceiveCount != 2 {
		t.Fatalf("after the delay: %s count %d", m.MessageID(), m.ReceiveCount)
	}
	// A release with no delay: visible at once; the release did not count.
	if a := mpSettle(t, n, p, "nack", []string{m.ReceiptHandle}, nil); len(a.Nacked) != 1 {
		t.Fatalf("nack 0: %+v", a)
	}
	m = mpOne(t, n, p, "wait=0")
	if m.MessageID() != "a1" || m.ReceiveCount != 3 {
		t.Fatalf("after nack 0: %s count %d", m.MessageID(), m.ReceiveCount)
	}
	// Released with a delay, the handle still acknowledges (no receive since).
	mpSettle(t, n, p, "nack", []string{m.ReceiptHandle}, mpInt(600))
	if a := mpSettle(t, n, p, "ack", []string{m.ReceiptHandle}, nil); len(a.Acked) != 1 {
		t.Fatalf("ack during the delay: %+v", a)
	}
	if m := mpOne(t, n, p, "wait=0"); m.MessageID() != "a2" || m.ReceiveCount != 1 {
		t.Fatalf("next: %s %d", m.MessageID(), m.ReceiveCount)
	}
}

// mpDeadLetters lists a consumer's dead letters.
func mpDeadLetters(t *testing.T, n *servertest.Node, p *servertest.Pair, query string) (dls []bus.DeadLetter, next *string) {
	t.Helper()
	var page struct {
		DeadLetters []bus.DeadLetter `json:"dead_letters"`
		NextCursor  *string          `json:"next_cursor"`
	}
	n.Do("GET", "/v1/manage/workspaces/"+p.WS+"/connections/"+p.Consumer+"/dead-letters"+query, servertest.BootstrapKey, nil).
		Must(t, 200).Decode(t, &page)
	return page.DeadLetters, page.NextCursor
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, map[string]any{"attempt_limit": 2})
	clock := n.ManualClock()
	for _, id := range []string{"x1", "x2", "x3"} {
		n.Publish(p, servertest.Envelope(id, "X", map[string]any{"id": id})).Must(t, 202)
	}

	// x1 by expiry: delivered twice, both visibilities run out.
	first := mpOne(t, n, p, "max=1&wait=0&visibility=10")
	clock.Advance(10 * time.Second)
	second := mpOne(t, n, p, "max=1&wait=0&visibility=10")
	n.Publish(p, servertest.Envelope("y1", "Y", nil)).Must(t, 202)
	if first.MessageID() != "x1" || second.MessageID() != "x1" || second.ReceiveCount != 2 {
		t.Fatalf("x1 deliveries: %s %s %d", first.MessageID(), second.MessageID(), second.ReceiveCount)
	}
	clock.Advance(10 * time.Second)
	// The next receive moves x1 to the dead letters; its story moves on.
	ms := n.Receive(p, "wait=0&visibility=10")
	var got []string
	for _, m := range ms {
		got = append(got, m.MessageID())
	}
	if !slices.Equal(got, []string{"y1", "x2"}) && !slices.Equal(got, []string{"x2", "y1"}) {
		t.Fatalf("after the move: %v", got)
	}
	if a := mpSettle(t, n, p, "ack", []string{second.ReceiptHandle}, nil); len(a.Failed) != 1 {
		t.Errorf("ack of a dead-lettered message: %+v", a)
	}
	dls, next := mpDeadLetters(t, n, p, "")
	if len(dls) != 1 || next != nil || dls[0].MessageID != "x1" || dls[0].ReceiveCount != 2 || dls[0].CorrelationID != "X" ||
		!dls[0].DeadLetteredAt.Equal(clock.Now()) || dls[0].ProducerID != p.Producer || !strings.Contains(string(dls[0].Envelope), `"id":"x1"`) {
		t.Errorf("dead letters: %+v next %v", dls, next)
	}
	var x2 servertest.Message
	for _, m := range ms {
		if m.MessageID() == "x2" {
			x2 = m
		} else {
			mpAckAll(t, n, p, []string{m.ReceiptHandle})
		}
	}
	// x2 by nack: the second delivery's release moves it at once.
	mpSettle(t, n, p, "nack", []string{x2.ReceiptHandle}, mpInt(0))
	x2b := mpOne(t, n, p, "wait=0")
	if x2b.MessageID() != "x2" || x2b.ReceiveCount != 2 {
		t.Fatalf("x2 again: %s %d", x2b.MessageID(), x2b.ReceiveCount)
	}
	if a := mpSettle(t, n, p, "nack", []string{x2b.ReceiptHandle}, mpInt(3600)); len(a.Nacked) != 1 {
		t.Fatalf("final nack: %+v", a)
	}
	if dls, _ := mpDeadLetters(t, n, p, ""); len(dls) != 2 || dls[1].MessageID != "x2" {
		t.Errorf("after the nack: %+v", dls)
	}
	// x3 is next, at once (no delay: it is a new head).
	x3 := mpOne(t, n, p, "wait=0&visibility=5")
	if x3.MessageID() != "x3" || x3.ReceiveCount != 1 {
		t.Fatalf("x3: %s %d", x3.MessageID(), x3.ReceiveCount)
	}
	// x3 by expiry with nobody receiving: the sweeper moves it.
	clock.Advance(5 * time.Second)
	x3b := mpOne(t, n, p, "wait=0&visibility=5")
	clock.Advance(5 * time.Second)
	n.Maintain()
	if x3b.ReceiveCount != 2 {
		t.Errorf("x3 count %d", x3b.ReceiveCount)
	}
	st := n.QueueCounts(p)
	if st.DeadLetters != 3 || st.Ready != 0 || st.InFlight != 0 || st.Delayed != 0 {
		t.Errorf("counts: %+v", st)
	}
	// Paging.
	page1, next := mpDeadLetters(t, n, p, "?limit=2")
	if len(page1) != 2 || next == nil {
		t.Fatalf("page 1: %d %v", len(page1), next)
	}
	page2, next2 := mpDeadLetters(t, n, p, "?limit=2&cursor="+url.QueryEscape(*next))
	if len(page2) != 1 || next2 != nil || page2[0].MessageID != "x3" {
		t.Errorf("page 2: %+v %v", page2, next2)
	}

	// Redrive one, then the rest: back at the end of their stories, counts
	// starting again.
	n.Publish(p, servertest.Envelope("x4", "X", nil)).Must(t, 202)
	var rd struct {
		Redriven int `json:"redriven"`
	}
	dlPath := "/v1/manage/workspaces/" + p.WS + "/connections/" + p.Consumer + "/dead-letters/redrive"
	n.Do("POST", dlPath, servertest.BootstrapKey, map[string]any{"message_ids": []string{"x2", "nope"}}).Must(t, 200).Decode(t, &rd)
	if rd.Redriven != 1 {
		t.Errorf("redrive x2: %d", rd.Redriven)
	}
	n.Do("POST", dlPath, servertest.BootstrapKey, nil).Must(t, 200).Decode(t, &rd)
	if rd.Redriven != 2 {
		t.Errorf("redrive all: %d", rd.Redriven)
	}
	if st := n.QueueCounts(p); st.DeadLetters != 0 || st.Ready != 4 {
		t.Errorf("counts after redrive: %+v", st)
	}
	var order []string
	for {
		ms := n.Receive(p, "wait=0")
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			if m.ReceiveCount != 1 {
				t.Errorf("%s redriven with receive_count %d", m.MessageID(), m.ReceiveCount)
			}
			order = append(order, m.MessageID())
			mpAckAll(t, n, p, []string{m.ReceiptHandle})
		}
	}
	if !slices.Equal(order, []string{"x4", "x2", "x1", "x3"}) {
		t.Errorf("order after redrive: %v", order)
	}

	// Purge drops the queue's messages, not its dead letters.
	for i := range 3 {
		n.Publish(p, servertest.Envelope(fmt.Sprintf("p%d", i), "P", nil)).Must(t, 202)
	}
	pm := mpOne(t, n, p, "wait=0")
	mpSettle(t, n, p, "nack", []string{pm.ReceiptHandle}, nil)
	pm = mpOne(t, n, p, "wait=0")
	mpSettle(t, n, p, "nack", []string{pm.ReceiptHandle}, nil) // p0 to the dead letters
	var pu struct {
		Purged int `json:"purged"`
	}
	n.Do("POST", "/v1/manage/workspaces/"+p.WS+"/connections/"+p.Consumer+"/purge", servertest.BootstrapKey, nil).Must(t, 200).Decode(t, &pu)
	if pu.Purged != 2 {
		t.Errorf("purged %d", pu.Purged)
	}
	if st := n.QueueCounts(p); st != (bus.QueueStats{DeadLetters: 1}) {
		t.Errorf("counts after purge: %+v", st)
	}
	mpNone(t, n, p)
}

func TestQueueCounts(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	clock := n.ManualClock()
	for i := range 4 {
		n.Publish(p, servertest.Envelope(fmt.Sprintf("m%d", i), fmt.Sprintf("s%d", i), nil)).Must(t, 202)
	}
	n.Publish(p, servertest.Envelope("m0b", "s0", nil)).Must(t, 202)
	clock.Advance(1500 * time.Millisecond)
	ms := n.Receive(p, "max=2&wait=0")
	mpSettle(t, n, p, "nack", []string{ms[1].ReceiptHandle}, mpInt(30))
	st := n.QueueCounts(p)
	// s0: in flight (m0) + m0b ready behind it; s1 delayed; s2, s3 ready.
	if st.InFlight != 1 || st.Delayed != 1 || st.Ready != 3 || st.DeadLetters != 0 || st.OldestReadyAgeSeconds != 1.5 {
		t.Errorf("counts %+v", st)
	}
}

func TestAttemptReplay(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	clock := n.ManualClock()
	for i := range 5 {
		n.Publish(p, servertest.Envelope(fmt.Sprintf("m%d", i), fmt.Sprintf("s%d", i), nil)).Must(t, 202)
	}
	first := n.Receive(p, "max=3&wait=0&visibility=60&attempt=try-1")
	if len(first) != 3 {
		t.Fatalf("first: %d", len(first))
	}
	// A retry returns the same messages, handles and counts; nothing new,
	// though two more are ready.
	again := n.Receive(p, "max=10&wait=0&visibility=60&attempt=try-1")
	if len(again) != 3 {
		t.Fatalf("retry: %d", len(again))
	}
	for i := range first {
		if again[i].ReceiptHandle != first[i].ReceiptHandle || again[i].ReceiveCount != first[i].ReceiveCount || again[i].MessageID() != first[i].MessageID() {
			t.Errorf("retry %d: %+v vs %+v", i, again[i], first[i])
		}
	}
	// The retry restarts their visibility with its own.
	clock.Advance(50 * time.Second)
	n.Receive(p, "max=3&wait=0&visibility=60&attempt=try-1")
	clock.Advance(50 * time.Second) // 100 s after the first receive
	rest := n.Receive(p, "max=10&wait=0")
	if len(rest) != 2 {
		t.Fatalf("other receive while the attempt's messages are in flight: %d", len(rest))
	}
	// Settled messages drop out of the replay.
	mpAckAll(t, n, p, []string{first[0].ReceiptHandle})
	mpSettle(t, n, p, "nack", []string{first[1].ReceiptHandle}, mpInt(30))
	replay := n.Receive(p, "wait=0&attempt=try-1")
	if len(replay) != 1 || replay[0].ReceiptHandle != first[2].ReceiptHandle {
		t.Fatalf("replay after settling: %+v", replay)
	}
	// Nothing left in flight from it: an empty answer, at once, even with
	// wait and messages ready elsewhere.
	mpAckAll(t, n, p, []string{first[2].ReceiptHandle})
	clock.Advance(30 * time.Second) // m1's delay over: ready
	startAt := time.Now()
	if ms := n.Receive(p, "wait=20&attempt=try-1"); len(ms) != 0 {
		t.Errorf("replay with nothing in flight: %d", len(ms))
	}
	if d := time.Since(startAt); d > 5*time.Second {
		t.Errorf("a replay waited %v", d)
	}
	// Another connection's attempt ids are its own.
	q := mpConsumer(n, p, nil)
	n.Publish(p, servertest.Envelope("q1", "qs", nil)).Must(t, 202)
	if ms := n.Receive(q, "wait=0&attempt=try-1"); len(ms) == 0 {
		t.Errorf("another connection's attempt id replayed")
	}
	// After five minutes the id is a fresh receive.
	clock.Advance(5 * time.Minute)
	fresh := n.Receive(p, "max=10&wait=0&attempt=try-1")
	if len(fresh) == 0 {
		t.Fatalf("after 5 minutes: nothing")
	}
	// An attempt that returned nothing records nothing.
	for _, m := range fresh {
		mpAckAll(t, n, p, []string{m.ReceiptHandle})
	}
	for _, m := range rest {
		mpSettle(t, n, p, "ack", []string{m.ReceiptHandle}, nil)
	}
	if ms := n.Receive(p, "wait=0&attempt=empty-1"); len(ms) != 0 {
		t.Fatalf("queue not empty: %v", ms[0].MessageID())
	}
	n.Publish(p, servertest.Envelope("late", "late", nil)).Must(t, 202)
	if ms := n.Receive(p, "wait=0&attempt=empty-1"); len(ms) != 1 || ms[0].MessageID() != "late" {
		t.Errorf("attempt id of an empty receive: %v", ms)
	}
}

func TestSkills(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	mpath := "/v1/manage/workspaces/" + p.WS + "/connections/" + p.Consumer + "/skills"
	cpath := "/v1/tenants/" + p.WS + "/consumers/" + p.Consumer + "/skills"
	var sk struct {
		Registrations []bus.SkillRegistration `json:"registrations"`
		UpdatedAt     *string                 `json:"updated_at"`
	}
	n.Do("GET", cpath, p.ConsumTok, nil).Must(t, 200).Decode(t, &sk)
	if sk.Registrations == nil || len(sk.Registrations) != 0 || sk.UpdatedAt == nil || !strings.HasSuffix(*sk.UpdatedAt, "Z") {
		t.Errorf("before any put: %+v (want no registrations, updated_at the connection's creation)", sk)
	}
	regs := []map[string]any{
		{"instance_id": "i1", "skill": "summarise", "name": "Summary", "values": map[string]any{"lang": "en", "n": 3}, "authority_scale": 0},
		{"instance_id": "i2", "skill": "translate", "name": "T", "values": map[string]any{}, "authority_scale": 100},
	}
	var put struct {
		Registrations []map[string]any `json:"registrations"`
		UpdatedAt     string           `json:"updated_at"`
	}
	n.Do("PUT", mpath, servertest.BootstrapKey, map[string]any{"registrations": regs}).Must(t, 200).Decode(t, &put)
	for _, path := range []struct{ p, tok string }{{mpath, servertest.BootstrapKey}, {cpath, p.ConsumTok}} {
		var got struct {
			Registrations []map[string]any `json:"registrations"`
			UpdatedAt     string           `json:"updated_at"`
		}
		n.Do("GET", path.p, path.tok, nil).Must(t, 200).Decode(t, &got)
		if mustJSON(got.Registrations) != mustJSON(regs) || got.UpdatedAt != n.Clock.Now().Format("2006-01-02T15:04:05.000Z") {
			t.Errorf("GET %s: %+v", path.p, got)
		}
	}
	if r := n.Do("GET", cpath+"?x=1", p.ConsumTok, nil); r.Status != 400 || r.Rule() != bus.RulePullBadRequest {
		t.Errorf("skills with a parameter: %d %s", r.Status, r.Body)
	}
	for name, body := range map[string]any{
		"scale 101":   map[string]any{"registrations": []map[string]any{{"instance_id": "i", "skill": "s", "name": "n", "values": map[string]any{}, "authority_scale": 101}}},
		"scale -1":    map[string]any{"registrations": []map[string]any{{"instance_id": "i", "skill": "s", "name": "n", "values": map[string]any{}, "authority_scale": -1}}},
		"repeated id": map[string]any{"registrations": []map[string]any{{"instance_id": "i", "skill": "s", "name": "n", "values": map[string]any{}, "authority_scale": 1}, {"instance_id": "i", "skill": "s", "name": "n", "values": map[string]any{}, "authority_scale": 1}}},
		"values list": map[string]any{"registrations": []map[string]any{{"instance_id": "i", "skill": "s", "name": "n", "values": []int{}, "authority_scale": 1}}},
		"missing":     map[string]any{},
		"empty name":  map[string]any{"registrations": []map[string]any{{"instance_id": "i", "skill": "s", "name": "", "values": map[string]any{}, "authority_scale": 1}}},
		"empty skill": map[string]any{"registrations": []map[string]any{{"instance_id": "i", "skill": "", "name": "n", "values": map[string]any{}, "authority_scale": 1}}},
		"empty id":    map[string]any{"registrations": []map[string]any{{"instance_id": "", "skill": "s", "name": "n", "values": map[string]any{}, "authority_scale": 1}}},
	} {
		if r := n.Do("PUT", mpath, servertest.BootstrapKey, body); r.Status != 400 || r.Rule() != bus.RuleManageBadRequest {
			t.Errorf("%s: %d %s", name, r.Status, r.Body)
		}
	}
	// A producer has no skills.
	if r := n.Do("GET", "/v1/manage/workspaces/"+p.WS+"/connections/"+p.Producer+"/skills", servertest.BootstrapKey, nil); r.Status != 404 {
		t.Errorf("producer skills: %d", r.Status)
	}
}

// mpAsync receives in another goroutine; the answer comes on the channel.
type mpResult struct {
	r   *servertest.Response
	err error
	at  time.Time
}

func mpAsyncReceive(n *servertest.Node, p *servertest.Pair, query string) <-chan mpResult {
	ch := make(chan mpResult, 1)
	go func() {
		r, err := n.Try(context.Background(), "GET", p.MessagesPath()+"?"+query, p.ConsumTok, nil)
		ch <- mpResult{r, err, time.Now()}
	}()
	return ch
}

// mpMessages decodes a receive answer.
func mpMessages(t *testing.T, res mpResult) []servertest.Message {
	t.Helper()
	if res.err != nil {
		t.Fatalf("receive: %v", res.err)
	}
	var out struct {
		Messages []servertest.Message `json:"messages"`
	}
	res.r.Must(t, 200).Decode(t, &out)
	return out.Messages
}

// mpSettleDelay lets a long poll reach its wait: there is no hook for "the
// poll is now waiting", so give it a moment (it only makes the test
// stricter: a poll not yet waiting finds the message at once).
const mpSettleDelay = 100 * time.Millisecond

func TestLongPollWakesOnPublish(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	for i := range 3 {
		ch := mpAsyncReceive(n, p, "wait=20")
		time.Sleep(mpSettleDelay)
		t0 := time.Now()
		n.Publish(p, servertest.Envelope(fmt.Sprintf("w%d", i), "s", nil)).Must(t, 202)
		select {
		case res := <-ch:
			ms := mpMessages(t, res)
			if len(ms) != 1 {
				t.Fatalf("woken poll: %d messages", len(ms))
			}
			d := res.at.Sub(t0)
			t.Logf("wake-up %d: %v after the publish was sent", i, d)
			if d > 500*time.Millisecond {
				t.Errorf("the poll answered %v after the publish", d)
			}
			mpAckAll(t, n, p, []string{ms[0].ReceiptHandle})
		case <-time.After(5 * time.Second):
			t.Fatalf("the poll did not wake")
		}
	}
	// An ack that advances a story wakes a poll for the next message.
	n.Publish(p, servertest.Envelope("a1", "A", nil)).Must(t, 202)
	n.Publish(p, servertest.Envelope("a2", "A", nil)).Must(t, 202)
	a1 := mpOne(t, n, p, "wait=0")
	ch := mpAsyncReceive(n, p, "wait=20")
	time.Sleep(mpSettleDelay)
	t0 := time.Now()
	mpAckAll(t, n, p, []string{a1.ReceiptHandle})
	res := <-ch
	if ms := mpMessages(t, res); len(ms) != 1 || ms[0].MessageID() != "a2" {
		t.Fatalf("after the ack: %v", ms)
	}
	if d := res.at.Sub(t0); d > 500*time.Millisecond {
		t.Errorf("ack wake-up took %v", d)
	}
}

func TestLongPollWakesWhenVisibleAgain(t *testing.T) {
	t.Parallel()
	// The real clock: visibility and release delays run out by themselves.
	n := servertest.Start(t, servertest.Options{Clock: bus.SystemClock{}})
	p := mpPair0(n)
	n.Publish(p, servertest.Envelope("v1", "s", nil)).Must(t, 202)
	// Each clock starts before the request that starts the server's own
	// (the receive, the nack), so a slow machine cannot make it look early.
	t0 := time.Now()
	m := mpOne(t, n, p, "wait=0&visibility=1")
	res := <-mpAsyncReceive(n, p, "wait=20")
	ms := mpMessages(t, res)
	if len(ms) != 1 || ms[0].ReceiveCount != 2 {
		t.Fatalf("after visibility: %+v", ms)
	}
	if d := res.at.Sub(t0); d < 990*time.Millisecond || d > 3*time.Second {
		t.Errorf("visibility 1 s: the poll answered after %v", d)
	}
	_ = m
	// A release delay of 1 s.
	t0 = time.Now()
	mpSettle(t, n, p, "nack", []string{ms[0].ReceiptHandle}, mpInt(1))
	res = <-mpAsyncReceive(n, p, "wait=20")
	if ms := mpMessages(t, res); len(ms) != 1 || ms[0].ReceiveCount != 3 {
		t.Fatalf("after the delay: %+v", ms)
	}
	if d := res.at.Sub(t0); d < 990*time.Millisecond || d > 3*time.Second {
		t.Errorf("delay 1 s: the poll answered after %v", d)
	}
	// wait runs out: 200 with no messages, after about wait seconds.
	t0 = time.Now()
	res = <-mpAsyncReceive(n, p, "wait=1")
	if ms := mpMessages(t, res); len(ms) != 0 {
		t.Errorf("wait=1 on a locked story: %d", len(ms))
	}
	if d := res.at.Sub(t0); d < 900*time.Millisecond || d > 3*time.Second {
		t.Errorf("wait=1 answered after %v", d)
	}
}

// mpPair0 is a pair on a node started without the roomy tier: unlimited.
func mpPair0(n *servertest.Node) *servertest.Pair {
	u := map[string]any{"quota_tier": "unlimited"}
	return n.NewPairWith(u, u)
}

func TestStopEndsLongPolls(t *testing.T) {
	t.Parallel()
	n := servertest.Start(t, servertest.Options{})
	p := mpPair0(n)
	var chs []<-chan mpResult
	for range 3 {
		chs = append(chs, mpAsyncReceive(n, p, "wait=20"))
	}
	time.Sleep(mpSettleDelay)
	t0 := time.Now()
	n.Close()
	for _, ch := range chs {
		select {
		case res := <-ch:
			if ms := mpMessages(t, res); len(ms) != 0 {
				t.Errorf("stopping: %d messages", len(ms))
			}
			if d := res.at.Sub(t0); d > 2*time.Second {
				t.Errorf("the poll ended %v after the stop began", d)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a long poll outlived the server")
		}
	}
}

// TestHeadOnReceiveTakesNothing: net/http's mux serves HEAD with a GET
// route. A HEAD on the receive route is 405 with Allow: GET, and takes no
// message: a GET right after gets it on its first delivery.
func TestHeadOnReceiveTakesNothing(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	n.Publish(p, servertest.Envelope("m1", "s1", nil)).Must(t, 202)
	for _, q := range []string{"wait=0", "max=10&wait=0&visibility=600", ""} {
		r := n.Do("HEAD", p.MessagesPath()+"?"+q, p.ConsumTok, nil)
		if r.Status != 405 || r.Header.Get("Allow") != "GET" {
			t.Fatalf("HEAD ?%s: %d, Allow %q; want 405, Allow GET", q, r.Status, r.Header.Get("Allow"))
		}
	}
	if m := mpOne(t, n, p, "wait=0"); m.ReceiveCount != 1 {
		t.Fatalf("receive_count %d after the HEADs, want 1", m.ReceiveCount)
	}
}

// TestReceiveAllowsOnlyGet: every other method on the receive route is
// refused with the same Allow header and message as HEAD is, GET alone
// (the mux would offer HEAD, which the route refuses); a GET route that
// serves HEAD still offers it.
func TestReceiveAllowsOnlyGet(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	for _, method := range []string{"HEAD", "OPTIONS", "PUT", "POST", "PATCH", "DELETE"} {
		r := n.Do(method, p.MessagesPath(), p.ConsumTok, nil)
		if r.Status != 405 || method != "HEAD" && r.Rule() != bus.RuleMethodNotAllowed || r.Header.Get("Allow") != "GET" {
			t.Errorf("%s: %d %s, Allow %q; want 405 %s, Allow GET", method, r.Status, r.Rule(), r.Header.Get("Allow"), bus.RuleMethodNotAllowed)
		}
		if method != "HEAD" && !strings.Contains(string(r.Body), "allowed: GET.") {
			t.Errorf("%s: message %s does not say allowed: GET.", method, r.Body)
		}
	}
	r := n.Do("POST", "/v1/tenants/"+p.WS+"/consumers/"+p.Consumer+"/skills", p.ConsumTok, nil)
	if r.Status != 405 || r.Header.Get("Allow") != "GET, HEAD" || !strings.Contains(string(r.Body), "allowed: GET, HEAD.") {
		t.Errorf("POST on skills: %d, Allow %q, %s; want 405, Allow GET, HEAD", r.Status, r.Header.Get("Allow"), r.Body)
	}
}
