package httpapi_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
)

// mpTiersFile is a quota tier no test reaches: the manual clock never refills
// a rate limit. Unlike the built-in mpTier tier it is a real limit, so
// answers carry the RateLimit headers the OpenAPI document requires.
const mpTiersFile = `{"tiers":[{"name":"roomy","rate_per_second":1000000,"burst":1000000,"daily_quota":1000000000000}]}`

// mpStart starts a node whose answers are checked against the OpenAPI
// document, with the roomy tier.
func mpStart(t *testing.T) *servertest.Node {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiers.json")
	if err := os.WriteFile(path, []byte(mpTiersFile), 0o600); err != nil {
		t.Fatal(err)
	}
	return servertest.Start(t, servertest.Options{ValidateOpenAPI: true, TiersFile: path})
}

// mpTier merges quota_tier "roomy" into a connection's create body.
func mpTier(extra map[string]any) map[string]any {
	out := map[string]any{"quota_tier": "roomy"}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// mpPair is n.NewPair on the mpTier tier.
func mpPair(n *servertest.Node, consumerExtra map[string]any) *servertest.Pair {
	return n.NewPairWith(mpTier(nil), mpTier(consumerExtra))
}

// mpConsumer is n.AddConsumer on the mpTier tier.
func mpConsumer(n *servertest.Node, p *servertest.Pair, extra map[string]any) *servertest.Pair {
	return n.AddConsumer(p, mpTier(extra))
}

// mpRules returns every violation rule of a refusal body, sorted.
func mpRules(t *testing.T, r *servertest.Response) []string {
	t.Helper()
	var b struct {
		Accepted   *bool           `json:"accepted"`
		Violations []bus.Violation `json:"violations"`
	}
	r.Decode(t, &b)
	if b.Accepted == nil || *b.Accepted {
		t.Fatalf("refusal without accepted:false: %s", r.Body)
	}
	var out []string
	for _, v := range b.Violations {
		if v.Message == "" {
			t.Errorf("violation %s has no message", v.Rule)
		}
		out = append(out, v.Rule)
	}
	sort.Strings(out)
	return out
}

// mpEnv is a valid envelope with fields replaced (a nil value removes
// the field).
func mpEnv(id string, change map[string]any) []byte {
	e := servertest.Envelope(id, "story-1", nil)
	for k, v := range change {
		if v == nil {
			delete(e, k)
		} else {
			e[k] = v
		}
	}
	b, _ := json.Marshal(e)
	return b
}

// publishedIDs receives (wait=0, up to max, acking each) until the queue
// has nothing ready and returns the message ids in delivery order.
func mpDrain(t *testing.T, n *servertest.Node, p *servertest.Pair) []string {
	t.Helper()
	var ids []string
	for {
		ms := n.Receive(p, "max=10&wait=0")
		if len(ms) == 0 {
			return ids
		}
		var hs []string
		for _, m := range ms {
			ids = append(ids, m.MessageID())
			hs = append(hs, m.ReceiptHandle)
		}
		mpAckAll(t, n, p, hs)
	}
}

// mpAckAll acks handles and fails unless every one succeeded.
func mpAckAll(t *testing.T, n *servertest.Node, p *servertest.Pair, hs []string) {
	t.Helper()
	var out struct {
		Acked  []string          `json:"acked"`
		Failed []json.RawMessage `json:"failed"`
	}
	n.Settle(p, "ack", hs, nil).Must(t, 200).Decode(t, &out)
	if len(out.Acked) != len(hs) || len(out.Failed) != 0 {
		t.Fatalf("ack of %d handles: acked %d, failed %s", len(hs), len(out.Acked), out.Failed)
	}
}

func TestPublishEnvelopeRules(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	const (
		mal   = bus.RuleEnvelopeMalformed
		ver   = bus.RuleEnvelopeSomVersion
		mid   = bus.RuleEnvelopeMessageID
		typ   = bus.RuleEnvelopeMessageType
		cor   = bus.RuleEnvelopeCorrelationID
		pay   = bus.RuleEnvelopePayload
		big   = bus.RuleEnvelopeTooLarge
		id128 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	)
	type64 := strings.Repeat("a.", 64)[:127] + "b" // 128 characters
	bad := []struct {
		name  string
		body  string
		rules []string
	}{
		{"not JSON", `{"som_version":`, []string{mal}},
		{"array", `[]`, []string{mal}},
		{"null", `null`, []string{mal}},
		{"string", `"x"`, []string{mal}},
		{"two objects", `{"a":1} {"b":2}`, []string{mal}},
		{"empty body", ``, []string{mal}},
		{"empty object: every rule at once", `{}`, []string{cor, mid, typ, pay, ver}},
		{"som_version 2.0.0", string(mpEnv("m", map[string]any{"som_version": "2.0.0"})), []string{ver}},
		{"som_version 1.0", string(mpEnv("m", map[string]any{"som_version": "1.0"})), []string{ver}},
		{"som_version leading zero", string(mpEnv("m", map[string]any{"som_version": "1.01.0"})), []string{ver}},
		{"som_version number", string(mpEnv("m", map[string]any{"som_version": 1})), []string{ver}},
		{"som_version pre-release", string(mpEnv("m", map[string]any{"som_version": "1.0.0-rc1"})), []string{ver}},
		{"message_id empty", string(mpEnv("", nil)), []string{mid}},
		{"message_id 129", string(mpEnv(id128+"x", nil)), []string{mid}},
		{"message_id control", string(mpEnv("a\u0001b", nil)), []string{mid}},
		{"message_id tab", string(mpEnv("a\tb", nil)), []string{mid}},
		{"message_id non-ASCII", string(mpEnv("caf\u00e9", nil)), []string{mid}},
		{"message_id DEL", string(mpEnv("a\u007fb", nil)), []string{mid}},
		{"message_id number", string(mpEnv("m", map[string]any{"message_id": 7})), []string{mid}},
		{"message_id missing", string(mpEnv("m", map[string]any{"message_id": nil})), []string{mid}},
		{"message_type upper", string(mpEnv("m", map[string]any{"message_type": "Story.context"})), []string{typ}},
		{"message_type empty segment", string(mpEnv("m", map[string]any{"message_type": "story..context"})), []string{typ}},
		{"message_type leading dot", string(mpEnv("m", map[string]any{"message_type": ".story"})), []string{typ}},
		{"message_type trailing dot", string(mpEnv("m", map[string]any{"message_type": "story."})), []string{typ}},
		{"message_type space", string(mpEnv("m", map[string]any{"message_type": "story context"})), []string{typ}},
		{"message_type wildcard", string(mpEnv("m", map[string]any{"message_type": "story.*"})), []string{typ}},
		{"message_type 129", string(mpEnv("m", map[string]any{"message_type": type64 + "c"})), []string{typ}},
		{"message_type empty", string(mpEnv("m", map[string]any{"message_type": ""})), []string{typ}},
		{"correlation_id empty", string(mpEnv("m", map[string]any{"correlation_id": ""})), []string{cor}},
		{"correlation_id 129", string(mpEnv("m", map[string]any{"correlation_id": id128 + "x"})), []string{cor}},
		{"correlation_id newline", string(mpEnv("m", map[string]any{"correlation_id": "a\nb"})), []string{cor}},
		{"correlation_id object", string(mpEnv("m", map[string]any{"correlation_id": map[string]any{}})), []string{cor}},
		{"payload missing", string(mpEnv("m", map[string]any{"payload": nil})), []string{pay}},
		{"payload array", string(mpEnv("m", map[string]any{"payload": []int{1}})), []string{pay}},
		{"payload string", string(mpEnv("m", map[string]any{"payload": "{}"})), []string{pay}},
		{"payload null", `{"som_version":"1.0.0","message_id":"m","message_type":"a","correlation_id":"c","payload":null}`, []string{pay}},
		{"three at once", string(mpEnv("", map[string]any{"som_version": "0.9.0", "payload": 3})), []string{mid, pay, ver}},
		{"four at once", string(mpEnv("", map[string]any{"message_type": "A", "correlation_id": "", "payload": nil})), []string{cor, mid, typ, pay}},
	}
	for _, c := range bad {
		r := n.Publish(p, c.body)
		if r.Status != 400 {
			t.Errorf("%s: status %d, want 400: %s", c.name, r.Status, r.Body)
			continue
		}
		got := mpRules(t, r)
		want := slices.Clone(c.rules)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: rules %v, want %v", c.name, got, want)
		}
	}

	good := []struct {
		name string
		env  []byte
	}{
		{"plain", mpEnv("g1", nil)},
		{"som_version 1.12.30", mpEnv("g2", map[string]any{"som_version": "1.12.30"})},
		{"message_id 128 with spaces and tilde", mpEnv(" ~"+id128[2:], nil)},
		{"message_type 128", mpEnv("g3", map[string]any{"message_type": type64})},
		{"message_type one segment", mpEnv("g4", map[string]any{"message_type": "a"})},
		{"message_type _ and -", mpEnv("g5", map[string]any{"message_type": "story_x-1.y-2_z"})},
		{"correlation_id 128", mpEnv("g6", map[string]any{"correlation_id": id128})},
		{"correlation_id one space", mpEnv("g7", map[string]any{"correlation_id": " "})},
		{"unknown members kept", mpEnv("g8", map[string]any{"story_id": "s", "sequence_number": 3})},
		{"empty payload", mpEnv("g9", map[string]any{"payload": map[string]any{}})},
	}
	for _, c := range good {
		r := n.Publish(p, c.env)
		if r.Status != 202 {
			t.Errorf("%s: status %d, want 202: %s", c.name, r.Status, r.Body)
		}
	}

	// Content type.
	req := n.Do("POST", p.PublishPath(), p.ProducerTok, nil)
	if req.Status != 400 || req.Rule() != mal {
		t.Errorf("no body: %d %s", req.Status, req.Body)
	}

	// 256 KiB exactly is accepted; one byte more is 413 envelope.too_large.
	exact := mpSized(t, "size-ok", 256<<10)
	n.Publish(p, exact).Must(t, 202)
	over := mpSized(t, "size-over", 256<<10+1)
	r := n.Publish(p, over)
	if r.Status != 413 || r.Rule() != big {
		t.Errorf("256 KiB + 1: status %d rule %q, want 413 %s", r.Status, r.Rule(), big)
	}
	// The refused ones were not delivered; the accepted ones were, in order.
	ids := mpDrain(t, n, p)
	if len(ids) != len(good)+1 {
		t.Errorf("delivered %d messages, want %d: %v", len(ids), len(good)+1, ids)
	}
}

// mpSized returns an envelope of exactly size bytes (its payload padded).
func mpSized(t *testing.T, id string, size int) []byte {
	t.Helper()
	base := mpEnv(id, map[string]any{"payload": map[string]any{"pad": ""}})
	pad := size - len(base)
	if pad < 0 {
		t.Fatalf("size %d too small", size)
	}
	b := mpEnv(id, map[string]any{"payload": map[string]any{"pad": strings.Repeat("x", pad)}})
	if len(b) != size {
		t.Fatalf("mpSized envelope is %d bytes, want %d", len(b), size)
	}
	return b
}

func TestPublishAnswerAndTopic(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	r := n.Publish(p, servertest.Envelope("m1", "s1", map[string]any{"a": 1})).Must(t, 202)
	var a map[string]any
	r.Decode(t, &a)
	want := map[string]any{"accepted": true, "message_id": "m1", "topic": "som.story.context", "deliveries": float64(1)}
	if fmt.Sprint(a) != fmt.Sprint(want) {
		t.Errorf("answer %v, want %v", a, want)
	}
	if r.Header.Get("RateLimit-Limit") == "" || r.Header.Get("RateLimit-Remaining") == "" || r.Header.Get("RateLimit-Reset") == "" {
		t.Errorf("publish answer without RateLimit headers: %v", r.Header)
	}
	types := map[string]bool{"story.context": true}
	for _, mt := range []string{"a", "x.y.z", "story_x-1.y-2"} {
		env := servertest.Envelope("t-"+mt, "s-"+mt, nil)
		env["message_type"] = mt
		var got bus.PublishResult
		n.Publish(p, env).Must(t, 202).Decode(t, &got)
		if got.Topic != "som."+mt {
			t.Errorf("message_type %s: topic %q", mt, got.Topic)
		}
		types[mt] = true
	}
	ms := n.Receive(p, "wait=0")
	if len(ms) != len(types) {
		t.Fatalf("received %d messages, want %d", len(ms), len(types))
	}
	for _, m := range ms {
		if !types[m.MessageType] || m.Topic != "som."+m.MessageType || m.ProducerID != p.Producer {
			t.Errorf("received %+v", m)
		}
	}

	// A consumer's token cannot publish; no token is 401; another tenant 403.
	r = n.Do("POST", p.PublishPath(), p.ConsumTok, servertest.Envelope("x", "s", nil))
	if r.Status != 403 || r.Rule() != bus.RuleNotRegistered {
		t.Errorf("consumer token: %d %s", r.Status, r.Body)
	}
	r = n.Do("POST", p.PublishPath(), "", servertest.Envelope("x", "s", nil))
	if r.Status != 401 || r.Rule() != bus.RuleUnauthenticated {
		t.Errorf("no token: %d %s", r.Status, r.Body)
	}
	r = n.Do("POST", p.PublishPath(), "garbage.token.here", servertest.Envelope("x", "s", nil))
	if r.Status != 401 || r.Rule() != bus.RuleUnauthenticated {
		t.Errorf("bad token: %d %s", r.Status, r.Body)
	}
	other := n.Workspace("other")
	r = n.Do("POST", "/v1/tenants/"+other+"/messages", p.ProducerTok, servertest.Envelope("x", "s", nil))
	if r.Status != 403 || r.Rule() != bus.RuleTenantMismatch {
		t.Errorf("other tenant: %d %s", r.Status, r.Body)
	}
}

func TestPublishEnvelopeBytesKept(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	raws := []string{
		"  {\n\t\"payload\" : { \"b\":2 ,\"a\" : [1, 2.50, 1e3, -0] , \"s\":\"\\u00e9\\n\\/\"},\r\n" +
			"\"correlation_id\":\"s1\",   \"message_type\":\"story.context\",\"x-unknown\": {\"deep\": [null, true]},\n" +
			"\"message_id\":\"odd-1\", \"som_version\":\"1.0.0\"  }  \n\n",
		`{"som_version":"1.0.0","message_id":"odd-2","message_type":"story.context","correlation_id":"s1","payload":{"emoji":"😀","big":123456789012345678901234567890}}`,
		"{\"message_id\":\"odd-3\",\"som_version\":\"1.0.0\",\"message_type\":\"story.context\",\"correlation_id\":\"s1\",\"payload\":{}}",
	}
	for _, raw := range raws {
		n.Publish(p, raw).Must(t, 202)
	}
	// The batch route keeps the bytes of each item too (as they sat in the array).
	item := "{ \"som_version\" :\"1.0.0\",\"message_id\":\"odd-4\",\n \"message_type\":\"story.context\",\"correlation_id\":\"s1\",\"payload\":{\"z\":1,\"a\":0}}"
	n.Do("POST", "/v1/tenants/"+p.WS+"/messages/batch", p.ProducerTok, `{"messages":[`+item+`]}`).Must(t, 200)
	raws = append(raws, item)
	for i, raw := range raws {
		ms := n.Receive(p, "max=1&wait=0")
		if len(ms) != 1 {
			t.Fatalf("message %d not received", i)
		}
		// The receive answer splices the envelope in: its bytes, after
		// json.RawMessage compaction of surrounding whitespace, must be the
		// accepted bytes. Read them from the raw answer instead.
		if got := string(ms[0].Envelope); got != strings.TrimSpace(raw) && got != raw {
			t.Errorf("envelope %d:\n got %q\nwant %q", i, got, raw)
		}
		mpAckAll(t, n, p, []string{ms[0].ReceiptHandle})
	}
	// Check the raw answer bytes too: publish once more and look for the
	// accepted bytes, verbatim, inside the receive answer.
	n.Publish(p, raws[0]).Must(t, 202) // odd-1 again: a duplicate, not delivered
	odd := strings.Replace(raws[0], "odd-1", "odd-5", 1)
	n.Publish(p, odd).Must(t, 202)
	r := n.Do("GET", p.MessagesPath()+"?wait=0", p.ConsumTok, nil).Must(t, 200)
	if !strings.Contains(string(r.Body), `"envelope":`+odd) {
		t.Errorf("receive answer does not hold the accepted bytes verbatim:\n%s", r.Body)
	}
}

func TestPublishDuplicates(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	clock := n.ManualClock()
	p := mpPair(n, nil)
	p2 := mpConsumer(n, p, nil) // two queues: deliveries 2

	var first, dup map[string]any
	n.Publish(p, servertest.Envelope("dup-1", "s1", map[string]any{"v": 1})).Must(t, 202).Decode(t, &first)
	if first["deliveries"] != float64(2) || first["duplicate"] != nil {
		t.Fatalf("first publish: %v", first)
	}
	// Same id, other payload and story, a little later: a duplicate with
	// the original's deliveries.
	clock.Advance(4*time.Minute + 59*time.Second + 999*time.Millisecond)
	n.Publish(p, servertest.Envelope("dup-1", "s2", map[string]any{"v": 2})).Must(t, 202).Decode(t, &dup)
	if dup["accepted"] != true || dup["duplicate"] != true || dup["deliveries"] != float64(2) || dup["message_id"] != "dup-1" || dup["topic"] != "som.story.context" {
		t.Errorf("duplicate answer: %v", dup)
	}
	for _, q := range []*servertest.Pair{p, p2} {
		if ids := mpDrain(t, n, q); !slices.Equal(ids, []string{"dup-1"}) {
			t.Errorf("queue %s got %v, want only the first dup-1", q.Consumer, ids)
		}
	}
	// Another producer's same message_id is its own message.
	p3 := mpPair(n, nil)
	n.Publish(p3, servertest.Envelope("dup-1", "s1", nil)).Must(t, 202).Decode(t, &first)
	if first["duplicate"] != nil {
		t.Errorf("other producer's dup-1 was a duplicate: %v", first)
	}
	// Five minutes after the first acceptance the id is new again.
	clock.Advance(time.Millisecond)
	var again map[string]any
	n.Publish(p, servertest.Envelope("dup-1", "s3", map[string]any{"v": 3})).Must(t, 202).Decode(t, &again)
	if again["duplicate"] != nil || again["deliveries"] != float64(2) {
		t.Errorf("after 5 minutes: %v", again)
	}
	ms := n.Receive(p, "wait=0")
	if len(ms) != 1 || ms[0].CorrelationID != "s3" {
		t.Fatalf("after 5 minutes: received %+v", ms)
	}
	// A duplicate within one batch: the second is a duplicate.
	var b struct {
		Results []map[string]any `json:"results"`
	}
	n.PublishBatch(p, []any{servertest.Envelope("b-1", "s4", nil), servertest.Envelope("b-1", "s4", nil)}).Must(t, 200).Decode(t, &b)
	if len(b.Results) != 2 || b.Results[0]["duplicate"] != nil || b.Results[1]["duplicate"] != true {
		t.Errorf("batch duplicate: %v", b.Results)
	}
	// The duplicate window restarts with a re-acceptance, not a duplicate.
	clock.Advance(3 * time.Minute)
	n.Publish(p, servertest.Envelope("dup-1", "s3", nil)).Must(t, 202).Decode(t, &again)
	if again["duplicate"] != true {
		t.Errorf("3 minutes after the re-acceptance: %v", again)
	}
}

func TestPublishBatch(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	batchPath := "/v1/tenants/" + p.WS + "/messages/batch"

	// 1 and 100 envelopes are accepted; accepted ones in array order.
	n.PublishBatch(p, []any{servertest.Envelope("one", "s0", nil)}).Must(t, 200)
	var envs []any
	var want []string
	for i := range 100 {
		id := fmt.Sprintf("b%03d", i)
		envs = append(envs, servertest.Envelope(id, "s1", nil))
		want = append(want, id)
	}
	var res struct {
		Results []bus.PublishResult `json:"results"`
	}
	n.PublishBatch(p, envs).Must(t, 200).Decode(t, &res)
	if len(res.Results) != 100 {
		t.Fatalf("%d results", len(res.Results))
	}
	for i, r := range res.Results {
		if !r.Accepted || r.MessageID != want[i] || r.Deliveries == nil || *r.Deliveries != 1 || r.Topic != "som.story.context" {
			t.Errorf("result %d: %+v", i, r)
		}
	}
	got := mpDrain(t, n, p)
	if !slices.Equal(got, append([]string{"one"}, want...)) {
		t.Errorf("delivery order %v", got)
	}

	// Refusals of the whole batch.
	for name, body := range map[string]string{
		"no messages":     `{"messages":[]}`,
		"messages null":   `{"messages":null}`,
		"missing":         `{}`,
		"not an array":    `{"messages":{}}`,
		"unknown field":   `{"messages":[` + string(mpEnv("u", nil)) + `],"x":1}`,
		"not JSON":        `{"messages":[`,
		"array body":      `[` + string(mpEnv("u", nil)) + `]`,
		"101 messages":    `{"messages":[` + strings.Repeat(string(mpEnv("u", nil))+",", 100) + string(mpEnv("u", nil)) + `]}`,
		"trailing object": `{"messages":[` + string(mpEnv("u", nil)) + `]} {}`,
		"stray brace":     `{"messages":[` + string(mpEnv("u", nil)) + `]}}`,
	} {
		r := n.Do("POST", batchPath, p.ProducerTok, body)
		if r.Status != 400 || r.Rule() != bus.RuleEnvelopeMalformed {
			t.Errorf("%s: status %d %s", name, r.Status, r.Body)
		}
	}

	// Per-item results: good, bad (several rules), too large, good.
	items := []json.RawMessage{
		mpEnv("m-a", map[string]any{"correlation_id": "s2"}),
		mpEnv("", map[string]any{"som_version": "3.0.0", "correlation_id": "s2"}),
		mpSized(t, "m-big", 256<<10+1),
		json.RawMessage(`"not an object"`),
		mpEnv("m-b", map[string]any{"correlation_id": "s2"}),
	}
	var mixed struct {
		Results []struct {
			bus.PublishResult
			Violations []bus.Violation `json:"violations"`
		} `json:"results"`
	}
	body, _ := json.Marshal(map[string]any{"messages": items})
	n.Do("POST", batchPath, p.ProducerTok, body).Must(t, 200).Decode(t, &mixed)
	if len(mixed.Results) != 5 {
		t.Fatalf("%d results", len(mixed.Results))
	}
	rules := func(vs []bus.Violation) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.Rule)
		}
		sort.Strings(out)
		return out
	}
	if r := mixed.Results[0]; !r.Accepted || r.MessageID != "m-a" {
		t.Errorf("item 0: %+v", r)
	}
	if r := mixed.Results[1]; r.Accepted || !slices.Equal(rules(r.Violations), []string{bus.RuleEnvelopeMessageID, bus.RuleEnvelopeSomVersion}) {
		t.Errorf("item 1: %+v", r)
	}
	if r := mixed.Results[2]; r.Accepted || !slices.Equal(rules(r.Violations), []string{bus.RuleEnvelopeTooLarge}) {
		t.Errorf("item 2: %+v", r)
	}
	if r := mixed.Results[3]; r.Accepted || !slices.Equal(rules(r.Violations), []string{bus.RuleEnvelopeMalformed}) {
		t.Errorf("item 3: %+v", r)
	}
	if r := mixed.Results[4]; !r.Accepted || r.MessageID != "m-b" {
		t.Errorf("item 4: %+v", r)
	}
	if got := mpDrain(t, n, p); !slices.Equal(got, []string{"m-a", "m-b"}) {
		t.Errorf("delivered %v", got)
	}

	// 1 MiB in all: four envelopes of 256 KiB minus a little fit; over
	// 1 MiB is 413.
	var fit []json.RawMessage
	for i := range 4 {
		fit = append(fit, mpSized(t, fmt.Sprintf("fit-%d", i), 256<<10-64))
	}
	body, _ = json.Marshal(map[string]any{"messages": fit})
	if len(body) > 1<<20 {
		t.Fatalf("fitting batch is %d bytes", len(body))
	}
	n.Do("POST", batchPath, p.ProducerTok, body).Must(t, 200)
	fit = append(fit, mpSized(t, "fit-4", 1024))
	body, _ = json.Marshal(map[string]any{"messages": fit})
	r := n.Do("POST", batchPath, p.ProducerTok, body)
	if r.Status != 413 || r.Rule() != bus.RuleEnvelopeTooLarge {
		t.Errorf("over 1 MiB: %d %s", r.Status, r.Rule())
	}
}

func TestSubscriptionsAndFanOut(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	other := n.Connection(p.WS, "producer", mpTier(nil))
	sub := func(subs ...map[string]any) *servertest.Pair {
		return mpConsumer(n, p, map[string]any{"subscriptions": append([]map[string]any{}, subs...)}) // [] for none: null is refused
	}
	type consumer struct {
		name string
		q    *servertest.Pair
		want []string // message types it gets
	}
	cs := []consumer{
		{"all", p, []string{"story", "story.context", "story.context.deep", "task.done"}},
		{"story.*", sub(map[string]any{"topic": "som.story.*"}), []string{"story.context"}},
		{"story.>", sub(map[string]any{"topic": "som.story.>"}), []string{"story.context", "story.context.deep"}},
		{"*", sub(map[string]any{"topic": "som.*"}), []string{"story"}},
		{"exact", sub(map[string]any{"topic": "som.story.context"}), []string{"story.context"}},
		{"*.context", sub(map[string]any{"topic": "som.*.context"}), []string{"story.context"}},
		{"two subs, once", sub(map[string]any{"topic": "som.story.*"}, map[string]any{"topic": "som.>"}), []string{"story", "story.context", "story.context.deep", "task.done"}},
		{"other producer only", sub(map[string]any{"topic": "som.>", "producers": []string{other}}), nil},
		{"this producer", sub(map[string]any{"topic": "som.task.*", "producers": []string{other, p.Producer}}), []string{"task.done"}},
		{"no match", sub(map[string]any{"topic": "som.other.>"}), nil},
		{"no subscriptions", sub(), nil},
	}
	wantDeliveries := map[string]int{}
	for _, c := range cs {
		for _, mt := range c.want {
			wantDeliveries[mt]++
		}
	}
	for _, mt := range []string{"story", "story.context", "story.context.deep", "task.done"} {
		env := servertest.Envelope("m-"+mt, "s-"+mt, nil)
		env["message_type"] = mt
		var r bus.PublishResult
		n.Publish(p, env).Must(t, 202).Decode(t, &r)
		if *r.Deliveries != wantDeliveries[mt] {
			t.Errorf("%s: deliveries %d, want %d", mt, *r.Deliveries, wantDeliveries[mt])
		}
	}
	for _, c := range cs {
		var got []string
		for _, id := range mpDrain(t, n, c.q) {
			got = append(got, strings.TrimPrefix(id, "m-"))
		}
		sort.Strings(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("consumer %s got %v, want %v", c.name, got, c.want)
		}
	}

	// Bad patterns are refused.
	for _, pat := range []string{"", "som..story", "som.>.story", "som.Story", "som.st ory", ">.x", "som.**"} {
		r := n.Do("POST", "/v1/manage/workspaces/"+p.WS+"/connections", servertest.BootstrapKey,
			map[string]any{"kind": "consumer", "name": "bad", "subscriptions": []map[string]any{{"topic": pat}}})
		if r.Status != 400 || r.Rule() != bus.RuleManageBadRequest {
			t.Errorf("pattern %q: %d %s", pat, r.Status, r.Body)
		}
	}

	// A change applies to messages accepted after it.
	q := cs[9].q // "no match"
	n.Publish(p, servertest.Envelope("before", "s9", nil)).Must(t, 202)
	n.Do("PATCH", "/v1/manage/workspaces/"+p.WS+"/connections/"+q.Consumer, servertest.BootstrapKey,
		map[string]any{"subscriptions": []map[string]any{{"topic": "som.story.context"}}}).Must(t, 200)
	n.Publish(p, servertest.Envelope("after", "s9", nil)).Must(t, 202)
	if got := mpDrain(t, n, q); !slices.Equal(got, []string{"after"}) {
		t.Errorf("after the change: %v", got)
	}

	// A revoked consumer's queue keeps receiving messages.
	n.Do("POST", "/v1/manage/workspaces/"+p.WS+"/connections/"+q.Consumer+"/revoke", servertest.BootstrapKey, nil).Must(t, 200)
	var r bus.PublishResult
	n.Publish(p, servertest.Envelope("while-revoked", "s9", nil)).Must(t, 202).Decode(t, &r)
	if st := n.QueueCounts(q); st.Ready != 1 {
		t.Errorf("revoked consumer's queue: %+v", st)
	}
}
