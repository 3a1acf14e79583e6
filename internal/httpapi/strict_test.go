package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/strictjson"
)

// strictCases are envelopes that encoding/json would read (replacing bytes,
// keeping the last of two names) but strict parsers cannot, with what the
// refusal must name.
func strictCases() []struct {
	name, env string
	words     []string
} {
	const head = `{"som_version":"1.0.0","message_id":"m0","message_type":"story.context","correlation_id":"s0",`
	return []struct {
		name, env string
		words     []string
	}{
		{"0xFF", head + "\"payload\":{\"s\":\"\xff\"}}", []string{"UTF-8", "byte 110", "payload.s"}},
		{"overlong C0 AF", head + "\"payload\":{\"s\":\"\xc0\xaf\"}}", []string{"UTF-8", "byte 110", "payload.s"}},
		{"surrogate ED A0 80", head + "\"payload\":{\"s\":\"\xed\xa0\x80\"}}", []string{"UTF-8", "byte 110", "payload.s"}},
		{"0xFF in a name", head + "\"payload\":{\"\xff\":1}}", []string{"UTF-8", "byte 106", "payload"}},
		{"escaped lone surrogate", head + `"payload":{"s":"\ud800"}}`, []string{"surrogate", "byte 110", "payload.s"}},
		{"message_id twice", head + `"message_id":"m1","payload":{}}`, []string{`"message_id" given twice`, "byte 94"}},
		{"name twice deep down", head + `"payload":{"a":[{"b":1,"b":2}]}}`, []string{`"b" given twice`, "payload.a[0].b"}},
		{"1e999999", head + `"payload":{"n":1e999999}}`, []string{"number", "payload.n"}},
		{"200,000 digits", head + `"payload":{"n":` + strings.Repeat("7", 200000) + `}}`, []string{"number", "at most 100"}},
		{"deep nesting", head + `"payload":{"a":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}}`, []string{"nesting", "64"}},
	}
}

func TestPublishRefusesWhatStrictParsersCannotRead(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	for _, c := range strictCases() {
		r := n.Do("POST", p.PublishPath(), p.ProducerTok, c.env)
		wantMessage(t, wantRefusal(t, r, 400, bus.RuleEnvelopeMalformed), c.words...)
	}
	// In a batch each such envelope gets its own refusal; the others go
	// through.
	var body strings.Builder
	body.WriteString(`{"messages":[`)
	cases := strictCases()
	for _, c := range cases {
		body.WriteString(c.env)
		body.WriteByte(',')
	}
	body.WriteString(string(mpEnv("ok", nil)) + `]}`)
	var res struct {
		Results []struct {
			Accepted   bool            `json:"accepted"`
			Violations []bus.Violation `json:"violations"`
		} `json:"results"`
	}
	n.Do("POST", p.PublishPath()+"/batch", p.ProducerTok, body.String()).Must(t, 200).Decode(t, &res)
	if len(res.Results) != len(cases)+1 || !res.Results[len(cases)].Accepted {
		t.Fatalf("batch results: %+v", res.Results)
	}
	for i, c := range cases {
		r := res.Results[i]
		if r.Accepted || len(r.Violations) != 1 || r.Violations[0].Rule != bus.RuleEnvelopeMalformed {
			t.Errorf("%s: %+v", c.name, r)
			continue
		}
		wantMessage(t, r.Violations[0].Message, c.words[0])
	}
	if ids := mpDrain(t, n, p); len(ids) != 1 || ids[0] != "ok" {
		t.Errorf("delivered %q", ids)
	}
	// The batch's own object is checked too.
	r := n.Do("POST", p.PublishPath()+"/batch", p.ProducerTok, `{"messages":[`+string(mpEnv("a", nil))+`],"messages":[]}`)
	wantMessage(t, wantRefusal(t, r, 400, bus.RuleEnvelopeMalformed), `"messages" given twice`)
}

// TestBodiesRefuseWhatStrictParsersCannotRead covers the other routes that
// read JSON: settle and management.
func TestBodiesRefuseWhatStrictParsersCannotRead(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	for _, body := range []string{
		"{\"receipt_handles\":[\"\xff\"]}",
		`{"receipt_handles":["a"],"receipt_handles":["b"]}`,
		`{"receipt_handles":["a"],"delay_seconds":1e999}`,
	} {
		r := n.Do("POST", p.SettlePath("nack"), p.ConsumTok, body)
		wantMessage(t, wantRefusal(t, r, 400, bus.RulePullBadRequest), "byte")
	}
	conn := "/v1/manage/workspaces/" + p.WS + "/connections"
	for _, body := range []string{
		"{\"kind\":\"consumer\",\"name\":\"a\xffb\"}",
		`{"kind":"consumer","name":"a","name":"b"}`,
		`{"kind":"consumer","name":"a","subscriptions":[{"topic":"som.>","topic":"som.x"}]}`,
		`{"kind":"consumer","name":"a","attempt_limit":` + strings.Repeat("1", strictjson.MaxNumberLength+1) + `}`,
		`{"kind":"consumer","name":"a","x":` + strings.Repeat(`{"a":`, strictjson.MaxDepth) + `1` + strings.Repeat(`}`, strictjson.MaxDepth) + `}`,
	} {
		r := n.Do("POST", conn, opKey, body)
		wantMessage(t, wantRefusal(t, r, 400, bus.RuleManageBadRequest), "byte")
	}
	skills := conn + "/" + p.Consumer + "/skills"
	r := n.Do("PUT", skills, opKey, `{"registrations":[{"instance_id":"i","skill":"s","name":"n","values":{"k":1,"k":2},"authority_scale":1}]}`)
	wantMessage(t, wantRefusal(t, r, 400, bus.RuleManageBadRequest), `"k" given twice`, "registrations[0].values.k")
}

// TestBodiesRefuseAByteOrderMarkOrTwoContentTypes: a JSON body that starts
// with a byte order mark is refused saying so (not as an invalid character
// at byte 0), and so is a request with two Content-Type headers, on a
// publish, an ack, a management route and the token endpoint.
func TestBodiesRefuseAByteOrderMarkOrTwoContentTypes(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	bom := "\xef\xbb\xbf"
	conn := "/v1/manage/workspaces/" + p.WS + "/connections"
	for _, c := range []struct{ path, tok, body, rule string }{
		{p.PublishPath(), p.ProducerTok, string(mpEnv("bom-1", nil)), bus.RuleEnvelopeMalformed},
		{p.SettlePath("ack"), p.ConsumTok, `{"receipt_handles":["a"]}`, bus.RulePullBadRequest},
		{conn, opKey, `{"kind":"consumer","name":"a"}`, bus.RuleManageBadRequest},
	} {
		r := n.Do("POST", c.path, c.tok, bom+c.body)
		wantMessage(t, wantRefusal(t, r, 400, c.rule), "byte order mark")
		req, _ := http.NewRequest("POST", n.URL+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+c.tok)
		req.Header.Add("Content-Type", "application/json")
		req.Header.Add("Content-Type", "text/plain")
		wantMessage(t, wantRefusal(t, n.Send(req), 400, c.rule), "Content-Type", "2 times")
	}
	req, _ := http.NewRequest("POST", n.URL+"/v1/oauth/token", strings.NewReader("grant_type=client_credentials"))
	req.Header.Add("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Add("Content-Type", "text/plain")
	wantOAuthError(t, n.Send(req), 400, "invalid_request")
}

// TestManageGetAndDeleteTakeNoBody: a body on a management GET or DELETE
// is refused, as an unknown field of a POST is, and nothing is removed.
func TestManageGetAndDeleteTakeNoBody(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, nil)
	conn := "/v1/manage/workspaces/" + p.WS + "/connections/" + p.Consumer
	for _, method := range []string{"GET", "DELETE"} {
		r := n.Do(method, conn, opKey, `{"x":1}`)
		wantMessage(t, wantRefusal(t, r, 400, bus.RuleManageBadRequest), method, "takes no body")
	}
	n.Do("GET", conn, opKey, nil).Must(t, 200)
	n.Do("DELETE", conn, opKey, nil).Must(t, 204)
}
