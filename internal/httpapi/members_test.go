package httpapi_test

import (
	"strings"
	"testing"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
)

// Request bodies name their members exactly: encoding/json would take a
// member whose name differs from a field's only by case ("MESSAGE_IDS",
// or "meſsage_ids" with a long s) for that field, the later of two
// winning. Each such body is refused with the route's bad-request rule,
// naming the member and the field it resembles, and changes nothing.
func TestBodiesNamesAreExact(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, map[string]any{"attempt_limit": 1})
	ws := "/v1/manage/workspaces/" + p.WS
	conn := ws + "/connections/" + p.Consumer
	dead := membersDeadLetters(t, n, p, 2)
	uid, memberKey := (&node{Node: n}).user(t, "member", false)
	n.Do("PUT", ws+"/members/"+uid, opKey, map[string]any{"role": "viewer"}).Must(t, 200)
	before := n.Do("GET", conn, opKey, nil).Must(t, 200).Body

	skill := func(change string) string {
		return `{"registrations":[{"instance_id":"i","skill":"s","name":"n","values":{"a":1},"authority_scale":5` + change + `}]}`
	}
	for _, c := range []struct {
		method, path, body string
		member, field      string
	}{
		{"POST", conn + "/dead-letters/redrive", `{"message_ids":["nope"],"MESSAGE_IDS":null}`, "MESSAGE_IDS", "message_ids"},
		{"POST", conn + "/dead-letters/redrive", `{"meſsage_ids":["nope"]}`, "meſsage_ids", "message_ids"},
		{"POST", conn + "/secret/rotate", `{"overlap":"none","OVERLAP":"3d"}`, "OVERLAP", "overlap"},
		{"PUT", ws + "/members/" + uid, `{"role":"viewer","Role":"owner"}`, "Role", "role"},
		{"POST", "/v1/manage/workspaces", `{"NAME":"upper"}`, "NAME", "name"},
		{"POST", "/v1/manage/users", `{"name":"x","email":"op@example.com","OPERATOR":true}`, "OPERATOR", "operator"},
		{"PUT", "/v1/manage/users/" + uid + "/password", `{"Password":"long enough password"}`, "Password", "password"},
		{"PATCH", conn, `{"Name":"renamed"}`, "Name", "name"},
		{"PATCH", conn, `{"attempt_limit":3,"ATTEMPT_LIMIT":9}`, "ATTEMPT_LIMIT", "attempt_limit"},
		{"POST", ws + "/connections", `{"\u212aind":"consumer","name":"kelvin"}`, "\u212aind", "kind"},
		{"POST", ws + "/connections", `{"kind":"consumer","name":"x","subscriptions":[{"TOPIC":"som.>"}]}`, "subscriptions[0].TOPIC", "subscriptions[0].topic"},
		{"PATCH", conn, `{"subscriptions":[{"topic":"som.>","Producers":["` + p.Producer + `"]}]}`, "subscriptions[0].Producers", "subscriptions[0].producers"},
		{"PUT", conn + "/skills", skill(`,"Authority_Scale":100`), "registrations[0].Authority_Scale", "registrations[0].authority_scale"},
		{"PUT", conn + "/skills", `{"Registrations":[]}`, "Registrations", "registrations"},
	} {
		r := n.Do(c.method, c.path, opKey, c.body)
		msg := wantRefusal(t, r, 400, bus.RuleManageBadRequest)
		wantMessage(t, msg, `"`+c.member+`"`, `"`+c.field+`"`, "only by case")
	}
	// Nothing changed: the dead letters are all there, the member is a
	// viewer, the connection is as it was, no workspace, user or skill
	// was made.
	if got := n.QueueCounts(p).DeadLetters; got != dead {
		t.Errorf("dead letters: %d, want %d", got, dead)
	}
	var who struct {
		Roles []struct {
			Role string `json:"role"`
		} `json:"roles"`
	}
	n.Do("GET", "/v1/manage/whoami", memberKey, nil).Must(t, 200).Decode(t, &who)
	if len(who.Roles) != 1 || who.Roles[0].Role != "viewer" {
		t.Errorf("the member's roles: %+v", who.Roles)
	}
	if got := n.Do("GET", conn, opKey, nil).Must(t, 200).Body; string(got) != string(before) {
		t.Errorf("the connection changed:\n%s\n%s", before, got)
	}
	if r := n.Do("GET", "/v1/manage/workspaces", opKey, nil).Must(t, 200); strings.Contains(string(r.Body), "upper") {
		t.Errorf("a workspace was made: %s", r.Body)
	}
	n.Do("POST", "/v1/manage/users", opKey, map[string]any{"name": "x", "email": "op@example.com"}).Must(t, 201)
	if r := n.Do("GET", conn+"/skills", opKey, nil).Must(t, 200); strings.Contains(string(r.Body), `"i"`) {
		t.Errorf("skills were put: %s", r.Body)
	}

	// The pull routes: rule pull.bad_request, and publishing's
	// envelope.malformed for the batch's own object.
	ms := n.Receive(p, "max=1&wait=0")
	if len(ms) != 0 {
		t.Fatalf("received %d: the queue should be empty", len(ms))
	}
	for _, verb := range []string{"ack", "nack"} {
		r := n.Do("POST", p.SettlePath(verb), p.ConsumTok, `{"RECEIPT_HANDLES":["x"]}`)
		wantMessage(t, wantRefusal(t, r, 400, bus.RulePullBadRequest), `"RECEIPT_HANDLES"`, `"receipt_handles"`, "only by case")
	}
	r := n.Do("POST", p.SettlePath("nack"), p.ConsumTok, `{"receipt_handles":["x"],"Delay_Seconds":5}`)
	wantMessage(t, wantRefusal(t, r, 400, bus.RulePullBadRequest), `"Delay_Seconds"`, `"delay_seconds"`)
	r = n.Do("POST", p.PublishPath()+"/batch", p.ProducerTok, `{"messages":[],"MESSAGES":[`+string(mpEnv("sneaked", nil))+`]}`)
	wantMessage(t, wantRefusal(t, r, 400, bus.RuleEnvelopeMalformed), `"MESSAGES"`, `"messages"`)
	if st := n.QueueCounts(p); st.Ready != 0 {
		t.Errorf("a refused batch published: %+v", st)
	}
}

// An explicit null is not "left out": no member of a request body is
// nullable, so null is refused, naming the member (or the array item),
// rather than read as absent.
func TestBodiesRefuseNull(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	p := mpPair(n, map[string]any{"attempt_limit": 1})
	ws := "/v1/manage/workspaces/" + p.WS
	conn := ws + "/connections/" + p.Consumer
	dead := membersDeadLetters(t, n, p, 2)
	before := n.Do("GET", conn, opKey, nil).Must(t, 200).Body

	reg := func(members string) string {
		return `{"registrations":[{"instance_id":"i","skill":"s","name":"n"` + members + `}]}`
	}
	for _, c := range []struct {
		method, path, body string
		words              []string
	}{
		{"POST", conn + "/dead-letters/redrive", `{"message_ids":null}`, []string{"message_ids must be an array or left out, not null"}},
		{"POST", conn + "/dead-letters/redrive", `{"message_ids":["a",null]}`, []string{"message_ids[1] must be a string, not null"}},
		{"POST", conn + "/secret/rotate", `{"overlap":null}`, []string{"overlap must be a string or left out"}},
		{"PATCH", conn, `{"name":null}`, []string{"name must be a string or left out, not null"}},
		{"PATCH", conn, `{"attempt_limit":null}`, []string{"attempt_limit must be an integer or left out"}},
		{"PATCH", conn, `{"quota_tier":null}`, []string{"quota_tier"}},
		{"PATCH", conn, `{"subscriptions":null}`, []string{"subscriptions must be an array or left out"}},
		{"PATCH", conn, `{"subscriptions":[null]}`, []string{"subscriptions[0] must be an object, not null"}},
		{"PATCH", conn, `{"subscriptions":[{"topic":"som.>","producers":null}]}`, []string{"subscriptions[0].producers"}},
		{"POST", ws + "/connections", `{"kind":"consumer","name":null}`, []string{"name must be a string, not null"}},
		{"POST", "/v1/manage/workspaces", `{"name":null}`, []string{"name must be a string, not null"}},
		{"POST", "/v1/manage/users", `{"name":"x","email":"nullop@example.com","operator":null}`, []string{"operator must be true or false or left out"}},
		{"PUT", conn + "/skills", `{"registrations":null}`, []string{"registrations must be an array, not null"}},
		{"PUT", conn + "/skills", reg(`,"values":{"a":1}`), []string{"registrations[0].authority_scale is required"}},
		{"PUT", conn + "/skills", reg(`,"values":{},"authority_scale":null`), []string{"registrations[0].authority_scale must be an integer, not null"}},
		{"PUT", conn + "/skills", `{"registrations":[{"skill":"s","name":"n","values":{},"authority_scale":5}]}`, []string{"registrations[0].instance_id is required"}},
	} {
		r := n.Do(c.method, c.path, opKey, c.body)
		wantMessage(t, wantRefusal(t, r, 400, bus.RuleManageBadRequest), c.words...)
	}
	if got := n.QueueCounts(p).DeadLetters; got != dead {
		t.Errorf("dead letters: %d, want %d", got, dead)
	}
	if got := n.Do("GET", conn, opKey, nil).Must(t, 200).Body; string(got) != string(before) {
		t.Errorf("the connection changed:\n%s\n%s", before, got)
	}
	if r := n.Do("GET", conn+"/skills", opKey, nil).Must(t, 200); strings.Contains(string(r.Body), `"i"`) {
		t.Errorf("skills were put: %s", r.Body)
	}
	// Values left out or null are {}: the Go client before this version sent
	// null for a registration without values, and the API took it.
	for _, body := range []string{reg(`,"authority_scale":5`), reg(`,"values":null,"authority_scale":5`)} {
		n.Do("PUT", conn+"/skills", opKey, body).Must(t, 200)
		if r := n.Do("GET", conn+"/skills", opKey, nil).Must(t, 200); !strings.Contains(string(r.Body), `"values":{}`) {
			t.Errorf("values left out or null: stored %s, want {}", r.Body)
		}
	}
	// Values that are data keep their nulls.
	n.Do("PUT", conn+"/skills", opKey, reg(`,"values":{"a":null,"B":[null]},"authority_scale":0`)).Must(t, 200)

	// Receipt handles: null and empty items are refused with their index;
	// nack's delay_seconds may be left out, not null.
	for _, c := range []struct{ verb, body, words string }{
		{"ack", `{"receipt_handles":null}`, "receipt_handles must be an array, not null"},
		{"ack", `{"receipt_handles":[null]}`, "receipt_handles[0] must be a string, not null"},
		{"nack", `{"receipt_handles":["x",null]}`, "receipt_handles[1] must be a string, not null"},
		{"nack", `{"receipt_handles":["x"],"delay_seconds":null}`, "delay_seconds must be an integer or left out"},
		{"ack", `{}`, "receipt_handles is required"},
	} {
		r := n.Do("POST", p.SettlePath(c.verb), p.ConsumTok, c.body)
		wantMessage(t, wantRefusal(t, r, 400, bus.RulePullBadRequest), c.words)
	}
	r := n.Do("POST", p.PublishPath()+"/batch", p.ProducerTok, `{"messages":null}`)
	wantMessage(t, wantRefusal(t, r, 400, bus.RuleEnvelopeMalformed), "messages must be an array, not null")
	// A batch's null item is an envelope like any other: refused on its own.
	var res struct {
		Results []struct {
			Accepted bool `json:"accepted"`
		} `json:"results"`
	}
	n.Do("POST", p.PublishPath()+"/batch", p.ProducerTok, `{"messages":[null,`+string(mpEnv("ok", nil))+`]}`).Must(t, 200).Decode(t, &res)
	if len(res.Results) != 2 || res.Results[0].Accepted || !res.Results[1].Accepted {
		t.Errorf("batch with a null item: %+v", res.Results)
	}
}

// membersDeadLetters publishes k messages and moves them to the consumer's
// dead-letter queue (its attempt limit is 1), returning the count there.
func membersDeadLetters(t *testing.T, n *servertest.Node, p *servertest.Pair, k int) int64 {
	t.Helper()
	for i := range k {
		n.Publish(p, mpEnv("dead-"+string(rune('a'+i)), nil)).Must(t, 202)
		var hs []string
		for _, m := range n.Receive(p, "max=10&wait=0") {
			hs = append(hs, m.ReceiptHandle)
		}
		n.Settle(p, "nack", hs, nil).Must(t, 200)
	}
	n.Maintain()
	got := n.QueueCounts(p).DeadLetters
	if got != int64(k) {
		t.Fatalf("dead letters: %d, want %d (%+v)", got, k, n.QueueCounts(p))
	}
	return got
}
