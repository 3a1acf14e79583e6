package httpapi_test

import (
	"strings"
	"testing"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
)

// repeat is "name=value" n times, joined with "&".
func repeat(name, value string, n int) string {
	return strings.TrimSuffix(strings.Repeat(name+"="+value+"&", n), "&")
}

// wantQueryRefusal checks that GET path?query is refused 400 with rule and
// a message naming each of words.
func wantQueryRefusal(t *testing.T, n *servertest.Node, path, query, bearer, rule string, words ...string) {
	t.Helper()
	wantQueryRefusalOf(t, n, "GET", path, query, bearer, nil, rule, words...)
}

// wantQueryRefusalOf checks that method path?query with body is refused
// 400 with rule and a message naming each of words.
func wantQueryRefusalOf(t *testing.T, n *servertest.Node, method, path, query, bearer string, body any, rule string, words ...string) {
	t.Helper()
	r := n.Do(method, path+"?"+query, bearer, body)
	label := query
	if len(label) > 60 {
		label = label[:60] + "..."
	}
	if r.Status != 400 || r.Rule() != rule {
		t.Errorf("%s: status %d %.200s, want 400 %s", label, r.Status, r.Body, rule)
		return
	}
	var b struct{ Violations []bus.Violation }
	r.Decode(t, &b)
	for _, w := range words {
		if !strings.Contains(b.Violations[0].Message, w) {
			t.Errorf("%s: message %q does not name %q", label, b.Violations[0].Message, w)
		}
	}
}

// TestRepeatedQueryParameters: a query parameter given more than once is
// refused on every route that reads query parameters (decision 26), even
// when each copy alone would be accepted; each route refuses it with its
// own bad-request rule and names the parameter.
func TestRepeatedQueryParameters(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	n.Publish(p, servertest.Envelope("m1", "s1", nil)).Must(t, 202)

	const twice = "is given more than once"
	pull := []struct{ query, param string }{
		{"max=1&max=1", "max"},
		{"max=1&max=2", "max"},
		{repeat("max", "1", 200), "max"},
		{repeat("max", "1", 10000), "max"}, // about 60 KB of URL: within the server's header limit
		{"wait=0&max=1&wait=0", "wait"},
		{"visibility=0&visibility=0&wait=0", "visibility"},
		{"attempt=a&wait=0&attempt=a", "attempt"},
	}
	for _, c := range pull {
		wantQueryRefusal(t, n, p.MessagesPath(), c.query, p.ConsumTok, bus.RulePullBadRequest, c.param+" "+twice)
	}
	// A query string that is not percent-encoding is refused, not dropped.
	wantQueryRefusal(t, n, p.MessagesPath(), "max=%zz", p.ConsumTok, bus.RulePullBadRequest, "query string")
	wantQueryRefusal(t, n, p.MessagesPath(), "m%zzax=1", p.ConsumTok, bus.RulePullBadRequest, "query string")
	skills := "/v1/tenants/" + p.WS + "/consumers/" + p.Consumer + "/skills"
	wantQueryRefusal(t, n, skills, "x=1&x=1", p.ConsumTok, bus.RulePullBadRequest, `"x"`)
	// The refusals above took nothing: the message is still there.
	mpOne(t, n, p, "max=1&wait=0&visibility=0")

	ws := "/v1/manage/workspaces/" + p.WS
	dead := ws + "/connections/" + p.Consumer + "/dead-letters"
	manage := []struct{ path, query, param string }{
		{ws + "/audit", "limit=5&limit=5", "limit"},
		{ws + "/audit", repeat("limit", "1", 200), "limit"},
		{ws + "/audit", "cursor=a&limit=1&cursor=a", "cursor"},
		{"/v1/manage/audit", "limit=1&limit=2", "limit"},
		{"/v1/manage/audit", repeat("limit", "1", 10000), "limit"},
		{ws + "/connections", "kind=consumer&kind=consumer", "kind"},
		{ws + "/connections", "limit=2&kind=producer&limit=2", "limit"},
		{dead, "limit=1&limit=1", "limit"},
		{dead, "cursor=1&cursor=1", "cursor"},
	}
	for _, c := range manage {
		wantQueryRefusal(t, n, c.path, c.query, opKey, bus.RuleManageBadRequest, c.param+" "+twice)
		// Given once, it is accepted.
		n.Do("GET", c.path+"?limit=1", opKey, nil).Must(t, 200)
	}
	// A route that takes no parameters names the repeated one as unknown.
	wantQueryRefusal(t, n, "/v1/manage/whoami", "a=1&a=1", opKey, bus.RuleManageBadRequest, `"a"`)
}

// TestBodyRoutesRefuseQueryParameters: publishing, batch publishing, ack
// and nack define no query parameter; one given anyway (once, twice, or
// not even percent-encoding) is refused with the route's bad-request rule
// and named, before the body is read, and the request does nothing: the
// same request without the query string then works.
func TestBodyRoutesRefuseQueryParameters(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	env := servertest.Envelope("m1", "s1", nil)
	batch := map[string]any{"messages": []any{servertest.Envelope("m2", "s2", nil)}}
	queries := []struct{ query, words string }{
		{"x=1", `"x"`},
		{"x=1&x=1", `"x"`},
		{"dedup=false", `"dedup"`},
		{"x=%zz", "query string"},
		{"=", `""`},
	}
	for _, q := range queries {
		wantQueryRefusalOf(t, n, "POST", p.PublishPath(), q.query, p.ProducerTok, env, bus.RuleEnvelopeMalformed, q.words, "takes no query parameters")
		wantQueryRefusalOf(t, n, "POST", p.PublishPath()+"/batch", q.query, p.ProducerTok, batch, bus.RuleEnvelopeMalformed, q.words)
	}
	// Nothing was accepted: m1 and m2 are new, not duplicates.
	for _, r := range []*servertest.Response{n.Publish(p, env), n.PublishBatch(p, batch["messages"].([]any))} {
		if r.Status/100 != 2 || strings.Contains(string(r.Body), `"duplicate":true`) {
			t.Fatalf("publish after the refusals: %d %s", r.Status, r.Body)
		}
	}
	m := mpOne(t, n, p, "max=1&wait=0")
	for _, verb := range []string{"nack", "ack"} {
		body := map[string]any{"receipt_handles": []string{m.ReceiptHandle}}
		for _, q := range queries {
			wantQueryRefusalOf(t, n, "POST", p.SettlePath(verb), q.query, p.ConsumTok, body, bus.RulePullBadRequest, q.words)
		}
	}
	// Neither the nacks nor the acks were applied: the message is still in
	// flight under its handle, which an ack without a query settles.
	r := n.Do("POST", p.SettlePath("ack"), p.ConsumTok, map[string]any{"receipt_handles": []string{m.ReceiptHandle}}).Must(t, 200)
	if !strings.Contains(string(r.Body), `"failed":[]`) {
		t.Fatalf("ack after the refusals: %s", r.Body)
	}
}
