package openapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sombus/sombus/internal/openapi/openapitest"
)

const (
	ws   = "wabcdefghijklmnopqrstuvwxyz"
	cons = "cabcdefghijklmnopqrstuvwxyz"
	prod = "c234567abcdefghijklmnopqrst"
	usr  = "uabcdefghijklmnopqrstuvwxyz"
)

type answer struct {
	name    string
	method  string
	target  string
	status  int
	headers map[string]string
	body    string
}

var rlHeaders = map[string]string{
	"Content-Type":        "application/json",
	"RateLimit-Limit":     "40",
	"RateLimit-Remaining": "39",
	"RateLimit-Reset":     "1",
}

func with(base map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(out, kv[i])
		} else {
			out[kv[i]] = kv[i+1]
		}
	}
	return out
}

var jsonOnly = map[string]string{"Content-Type": "application/json"}

const receivedMessage = `{"receipt_handle":"AQEBxyz","message_type":"story.context","correlation_id":"0192f5a0-1",
	"topic":"som.story.context","producer_id":"` + prod + `","receive_count":1,"enqueued_at":"2026-09-25T10:15:02.114Z",
	"envelope":{"som_version":"1.0.0","message_id":"m1","message_type":"story.context","correlation_id":"0192f5a0-1","payload":{}}}`

const consumerConn = `{"id":"` + cons + `","workspace_id":"` + ws + `","kind":"consumer","name":"reader","status":"active","attempt_limit":5,
	"quota_tier":"standard","credential_version":1,
	"secret":{"state":"active","issued_at":"2026-09-25T10:15:02.000Z","previous_expires_at":null},
	"subscriptions":[{"topic":"som.story.*"},{"topic":"som.>","producers":["` + prod + `"]}],"created_at":"2026-09-25T10:00:00.000Z",
	"ready":3,"in_flight":1,"delayed":0,"dead_letters":0,"oldest_ready_age_seconds":1.5}`

const producerConn = `{"id":"` + prod + `","workspace_id":"` + ws + `","kind":"producer","name":"writer","status":"revoked","attempt_limit":5,
	"quota_tier":"standard","credential_version":0,"secret":{"state":"none","issued_at":null,"previous_expires_at":null},
	"subscriptions":[],"created_at":"2026-09-25T10:00:00.000Z"}`

var good = []answer{
	{"receive", "GET", "/v1/tenants/" + ws + "/consumers/" + cons + "/messages?max=10&wait=20", 200, rlHeaders,
		`{"messages":[` + receivedMessage + `]}`},
	{"receive empty", "GET", "/v1/tenants/" + ws + "/consumers/" + cons + "/messages", 200,
		with(rlHeaders, "Content-Type", "application/json; charset=utf-8"), `{"messages":[]}`},
	{"receive bad param", "GET", "/v1/tenants/" + ws + "/consumers/" + cons + "/messages?max=11", 400, rlHeaders,
		`{"accepted":false,"violations":[{"rule":"pull.bad_request","message":"max must be an integer from 1 to 10."}]}`},
	{"receive 401 without rate-limit headers", "GET", "/v1/tenants/" + ws + "/consumers/" + cons + "/messages", 401, jsonOnly,
		`{"accepted":false,"violations":[{"rule":"producer.unauthenticated","message":"The token has expired."}]}`},
	{"receive 429", "GET", "/v1/tenants/" + ws + "/consumers/" + cons + "/messages", 429, with(rlHeaders, "Retry-After", "1", "RateLimit-Remaining", "0"),
		`{"accepted":false,"violations":[{"rule":"quota.exceeded","message":"Daily quota of 100000 requests used."}]}`},
	{"ack", "POST", "/v1/tenants/" + ws + "/consumers/" + cons + "/ack", 200, rlHeaders,
		`{"acked":["AQEB1"],"failed":[{"receipt_handle":"AQEB2","code":"ReceiptHandleIsInvalid","message":"not from this queue"}]}`},
	{"nack", "POST", "/v1/tenants/" + ws + "/consumers/" + cons + "/nack", 200, rlHeaders, `{"nacked":[],"failed":[]}`},
	{"consumer skills", "GET", "/v1/tenants/" + ws + "/consumers/" + cons + "/skills", 200, rlHeaders,
		`{"registrations":[{"instance_id":"i1","skill":"summarise","name":"Summary","values":{"k":1},"authority_scale":100}],"updated_at":"2026-09-25T10:15:02.114Z"}`},
	{"skills unavailable", "GET", "/v1/tenants/" + ws + "/consumers/" + cons + "/skills", 503, with(rlHeaders, "Retry-After", "5"),
		`{"accepted":false,"violations":[{"rule":"skills.unavailable","message":"try later"}]}`},
	{"publish", "POST", "/v1/tenants/" + ws + "/messages", 202, rlHeaders,
		`{"accepted":true,"message_id":"m1","topic":"som.story.context","deliveries":2}`},
	{"publish duplicate", "POST", "/v1/tenants/" + ws + "/messages", 202, rlHeaders,
		`{"accepted":true,"message_id":"m1","topic":"som.story.context","deliveries":2,"duplicate":true}`},
	{"publish refused", "POST", "/v1/tenants/" + ws + "/messages", 400, rlHeaders,
		`{"accepted":false,"violations":[{"rule":"envelope.som_version","message":"som_version must be 1.x.y"},{"rule":"envelope.payload","message":"payload must be an object"}]}`},
	{"publish too large", "POST", "/v1/tenants/" + ws + "/messages", 413, rlHeaders,
		`{"accepted":false,"violations":[{"rule":"envelope.too_large","message":"over 256 KiB"}]}`},
	{"publish forbidden", "POST", "/v1/tenants/" + ws + "/messages", 403, rlHeaders,
		`{"accepted":false,"violations":[{"rule":"producer.not_registered","message":"not a producer"}]}`},
	{"batch", "POST", "/v1/tenants/" + ws + "/messages/batch", 200, rlHeaders,
		`{"results":[{"accepted":true,"message_id":"m1","topic":"som.a","deliveries":0},{"accepted":false,"violations":[{"rule":"envelope.message_type","message":"bad"}]}]}`},
	{"token", "POST", "/v1/oauth/token", 200, map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store"},
		`{"access_token":"eyJ.a.b","token_type":"Bearer","expires_in":3600}`},
	{"token invalid_client", "POST", "/v1/oauth/token", 401,
		map[string]string{"Content-Type": "application/json", "WWW-Authenticate": `Basic realm="sombus"`}, `{"error":"invalid_client"}`},
	{"token slow_down", "POST", "/v1/oauth/token", 429, map[string]string{"Content-Type": "application/json", "Retry-After": "30"},
		`{"error":"slow_down","error_description":"too many failures"}`},
	{"jwks", "GET", "/v1/oauth/jwks", 200, jsonOnly,
		`{"keys":[{"kty":"EC","kid":"k1","use":"sig","alg":"ES256","crv":"P-256","x":"abc","y":"def"}]}`},
	{"whoami", "GET", "/v1/manage/whoami", 200, jsonOnly,
		`{"user":{"id":"` + usr + `","name":"Ada","email":"ada@example.com","operator":true,"created_at":"2026-09-25T10:00:00.000Z"},"roles":[{"workspace_id":"` + ws + `","role":"owner"}]}`},
	{"create user", "POST", "/v1/manage/users", 201, jsonOnly,
		`{"id":"` + usr + `","name":"Ada","email":"ada@example.com","operator":false,"created_at":"2026-09-25T10:00:00.000Z"}`},
	{"create key", "POST", "/v1/manage/users/" + usr + "/keys", 201, jsonOnly,
		`{"id":"kabc","api_key":"sbk_secret","created_at":"2026-09-25T10:00:00.000Z"}`},
	{"list workspaces", "GET", "/v1/manage/workspaces", 200, jsonOnly,
		`{"workspaces":[{"id":"` + ws + `","name":"House","created_at":"2026-09-25T10:00:00.000Z"}]}`},
	{"member put", "PUT", "/v1/manage/workspaces/" + ws + "/members/" + usr, 200, jsonOnly,
		`{"workspace_id":"` + ws + `","user_id":"` + usr + `","role":"developer"}`},
	{"member delete", "DELETE", "/v1/manage/workspaces/" + ws + "/members/" + usr, 204, nil, ``},
	{"member delete last owner", "DELETE", "/v1/manage/workspaces/" + ws + "/members/" + usr, 409, jsonOnly,
		`{"accepted":false,"violations":[{"rule":"manage.conflict","message":"last owner"}]}`},
	{"consumer connection", "GET", "/v1/manage/workspaces/" + ws + "/connections/" + cons, 200, jsonOnly, consumerConn},
	{"producer connection", "GET", "/v1/manage/workspaces/" + ws + "/connections/" + prod, 200, jsonOnly, producerConn},
	{"list connections", "GET", "/v1/manage/workspaces/" + ws + "/connections?kind=consumer", 200, jsonOnly,
		`{"connections":[` + consumerConn + `,` + producerConn + `],"next_cursor":null}`},
	{"list connections, more to follow", "GET", "/v1/manage/workspaces/" + ws + "/connections?limit=1&cursor=MTIzLjQ", 200, jsonOnly,
		`{"connections":[` + consumerConn + `],"next_cursor":"MTIzLjU"}`},
	{"create connection", "POST", "/v1/manage/workspaces/" + ws + "/connections", 201, jsonOnly, consumerConn},
	{"issue consumer secret", "POST", "/v1/manage/workspaces/" + ws + "/connections/" + cons + "/secret", 201, jsonOnly,
		`{"client_id":"` + cons + `","client_secret":"s3cr3t","credential_version":1,"token_url":"https://bus.example/v1/oauth/token",
		"messages_url":"https://bus.example/v1/tenants/` + ws + `/consumers/` + cons + `/messages","ack_url":"https://bus.example/a",
		"nack_url":"https://bus.example/n","skills_url":"https://bus.example/s"}`},
	{"issue producer secret", "POST", "/v1/manage/workspaces/" + ws + "/connections/" + prod + "/secret", 201, jsonOnly,
		`{"client_id":"` + prod + `","client_secret":"s3cr3t","credential_version":1,"token_url":"https://bus.example/v1/oauth/token",
		"messages_url":"https://bus.example/v1/tenants/` + ws + `/messages"}`},
	{"secret conflict", "POST", "/v1/manage/workspaces/" + ws + "/connections/" + cons + "/secret", 409, jsonOnly,
		`{"accepted":false,"violations":[{"rule":"manage.conflict","message":"A secret is active; rotate it instead."}]}`},
	{"stop previous", "POST", "/v1/manage/workspaces/" + ws + "/connections/" + cons + "/secret/stop-previous", 200, jsonOnly, consumerConn},
	{"revoke connection", "POST", "/v1/manage/workspaces/" + ws + "/connections/" + prod + "/revoke", 200, jsonOnly, producerConn},
	{"dead letters", "GET", "/v1/manage/workspaces/" + ws + "/connections/" + cons + "/dead-letters?limit=1", 200, jsonOnly,
		`{"dead_letters":[{"message_id":"m1","correlation_id":"s1","message_type":"story.context","topic":"som.story.context",
		"producer_id":"` + prod + `","receive_count":5,"enqueued_at":"2026-09-25T10:00:00.000Z","dead_lettered_at":"2026-09-25T10:05:00.000Z",
		"envelope":{"som_version":"1.0.0"}}],"next_cursor":"17"}`},
	{"redrive", "POST", "/v1/manage/workspaces/" + ws + "/connections/" + cons + "/dead-letters/redrive", 200, jsonOnly, `{"redriven":1}`},
	{"purge", "POST", "/v1/manage/workspaces/" + ws + "/connections/" + cons + "/purge", 200, jsonOnly, `{"purged":0}`},
	{"skills never put", "GET", "/v1/manage/workspaces/" + ws + "/connections/" + cons + "/skills", 200, jsonOnly,
		`{"registrations":[],"updated_at":"2026-09-25T10:00:00.000Z"}`},
	{"usage", "GET", "/v1/manage/workspaces/" + ws + "/connections/" + cons + "/usage", 200, jsonOnly,
		`{"connection_id":"` + cons + `","tier":"standard","day":"2026-09-25","requests_today":12,"daily_quota":100000,"remaining":99988,"resets_at":"2026-09-26T00:00:00.000Z"}`},
	{"audit", "GET", "/v1/manage/workspaces/" + ws + "/audit", 200, jsonOnly,
		`{"entries":[{"id":"a1","at":"2026-09-25T10:00:00.000Z","actor":"` + usr + `","action":"secret.rotate","target":"` + cons + `","details":{"overlap":"24h"}}],"next_cursor":null}`},
	{"global audit", "GET", "/v1/manage/audit?limit=1", 200, jsonOnly,
		`{"entries":[{"id":"a1","at":"2026-09-25T10:00:00.000Z","actor":"system","action":"user.create","target":"` + usr + `","details":{"operator":true}}],"next_cursor":"a1"}`},
	{"manage store down", "GET", "/v1/manage/workspaces", 503, with(jsonOnly, "Retry-After", "1"),
		`{"accepted":false,"violations":[{"rule":"store.unavailable","message":"The store cannot be reached."}]}`},
	{"healthz", "GET", "/healthz", 200, jsonOnly, `{"status":"ok"}`},
	{"readyz down", "GET", "/readyz", 503, with(jsonOnly, "Retry-After", "1"),
		`{"accepted":false,"violations":[{"rule":"store.unavailable","message":"The store cannot be reached."}]}`},
	{"metrics", "GET", "/metrics", 200, map[string]string{"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}, "# HELP x\nx 1\n"},
	{"unknown route", "GET", "/v1/nope", 404, jsonOnly,
		`{"accepted":false,"violations":[{"rule":"route.not_found","message":"No route GET /v1/nope."}]}`},
	{"wrong method", "DELETE", "/v1/tenants/" + ws + "/messages", 405, with(jsonOnly, "Allow", "POST"),
		`{"accepted":false,"violations":[{"rule":"route.method_not_allowed","message":"Use POST."}]}`},
	{"wrong method on token", "GET", "/v1/oauth/token", 405, with(jsonOnly, "Allow", "POST"),
		`{"accepted":false,"violations":[{"rule":"route.method_not_allowed","message":"Use POST."}]}`},
}

var bad = []struct {
	answer
	want string // a piece of the error message
}{
	{answer{"receive without rate-limit headers", "GET", "/v1/tenants/" + ws + "/consumers/" + cons + "/messages", 200, jsonOnly,
		`{"messages":[]}`}, `"RateLimit-Limit" missing`},
	{answer{"receive message with an extra field", "GET", "/v1/tenants/" + ws + "/consumers/" + cons + "/messages", 200, rlHeaders,
		`{"messages":[` + strings.Replace(receivedMessage, `"receive_count":1`, `"receive_count":1,"message_id":"m1"`, 1) + `]}`}, "message_id"},
	{answer{"time without milliseconds", "GET", "/v1/tenants/" + ws + "/consumers/" + cons + "/messages", 200, rlHeaders,
		`{"messages":[` + strings.Replace(receivedMessage, "10:15:02.114Z", "10:15:02Z", 1) + `]}`}, "enqueued_at"},
	{answer{"wrong rule for the status", "GET", "/v1/tenants/" + ws + "/consumers/" + cons + "/messages", 403, rlHeaders,
		`{"accepted":false,"violations":[{"rule":"manage.forbidden","message":"no"}]}`}, "rule"},
	{answer{"undocumented status", "GET", "/v1/tenants/" + ws + "/consumers/" + cons + "/messages", 409, rlHeaders,
		`{"accepted":false,"violations":[{"rule":"manage.conflict","message":"no"}]}`}, "status 409 is not documented"},
	{answer{"429 without Retry-After", "POST", "/v1/tenants/" + ws + "/consumers/" + cons + "/ack", 429, rlHeaders,
		`{"accepted":false,"violations":[{"rule":"rate.limited","message":"slow down"}]}`}, `"Retry-After" missing`},
	{answer{"duplicate false", "POST", "/v1/tenants/" + ws + "/messages", 202, rlHeaders,
		`{"accepted":true,"message_id":"m1","topic":"som.a","deliveries":1,"duplicate":false}`}, "duplicate"},
	{answer{"refusal without violations", "POST", "/v1/tenants/" + ws + "/messages", 400, rlHeaders,
		`{"accepted":false,"violations":[]}`}, "violations"},
	{answer{"consumer connection without counts", "GET", "/v1/manage/workspaces/" + ws + "/connections/" + cons, 200, jsonOnly,
		strings.Replace(consumerConn, `"ready":3,`, ``, 1)}, "schemas/Connection"},
	{answer{"producer connection with counts", "GET", "/v1/manage/workspaces/" + ws + "/connections/" + prod, 200, jsonOnly,
		strings.Replace(producerConn, `"subscriptions":[]`, `"subscriptions":[],"ready":0`, 1)}, "schemas/Connection"},
	{answer{"secret state unknown", "GET", "/v1/manage/workspaces/" + ws + "/connections/" + prod, 200, jsonOnly,
		strings.Replace(producerConn, `"state":"none"`, `"state":"gone"`, 1)}, "schemas/Connection"},
	{answer{"unknown route answering 200", "GET", "/v1/nope", 200, jsonOnly, `{}`}, "status 200 is not documented"},
	{answer{"405 without Allow", "DELETE", "/v1/tenants/" + ws + "/messages", 405, jsonOnly,
		`{"accepted":false,"violations":[{"rule":"route.method_not_allowed","message":"Use POST."}]}`}, `"Allow" missing`},
	{answer{"204 with a body", "DELETE", "/v1/manage/workspaces/" + ws + "/members/" + usr, 204, jsonOnly, `{}`}, "has no body"},
	{answer{"JSON as text/plain", "GET", "/healthz", 200, map[string]string{"Content-Type": "text/plain"}, `{"status":"ok"}`}, "text/plain"},
	{answer{"token without Cache-Control", "POST", "/v1/oauth/token", 200, jsonOnly,
		`{"access_token":"a","token_type":"Bearer","expires_in":3600}`}, `"Cache-Control" missing`},
	{answer{"token error as a Refusal", "POST", "/v1/oauth/token", 400, jsonOnly,
		`{"accepted":false,"violations":[{"rule":"manage.bad_request","message":"x"}]}`}, "error"},
	{answer{"not JSON", "GET", "/v1/manage/whoami", 200, jsonOnly, `{"user":`}, "decode"},
	{answer{"list as a bare array", "GET", "/v1/manage/workspaces", 200, jsonOnly, `[]`}, "object"},
	{answer{"ack with bad code", "POST", "/v1/tenants/" + ws + "/consumers/" + cons + "/ack", 200, rlHeaders,
		`{"acked":[],"failed":[{"receipt_handle":"x","code":"Nope","message":"m"}]}`}, "code"},
	{answer{"usage missing remaining", "GET", "/v1/manage/workspaces/" + ws + "/connections/" + cons + "/usage", 200, jsonOnly,
		`{"connection_id":"` + cons + `","tier":"standard","day":"2026-09-25","requests_today":12,"daily_quota":100000,"resets_at":"2026-09-26T00:00:00.000Z"}`}, "remaining"},
}

func (a answer) exchange() (*http.Request, *http.Response, []byte) {
	req := httptest.NewRequest(a.method, a.target, nil)
	resp := &http.Response{StatusCode: a.status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(a.body))}
	for k, v := range a.headers {
		resp.Header.Set(k, v)
	}
	return req, resp, []byte(a.body)
}

func TestValidateAcceptsGoodAnswers(t *testing.T) {
	for _, a := range good {
		t.Run(a.name, func(t *testing.T) {
			req, resp, body := a.exchange()
			openapitest.Validate(t, req, resp, body)
		})
	}
}

func TestValidateRejectsBadAnswers(t *testing.T) {
	for _, b := range bad {
		for _, base := range []string{consumerConn, producerConn, receivedMessage} {
			if strings.Contains(b.body, base) && b.body != `{"messages":[`+receivedMessage+`]}` {
				t.Fatalf("%s: the bad body still holds an unchanged good object (a Replace did not match)", b.name)
			}
		}
		t.Run(b.name, func(t *testing.T) {
			req, resp, body := b.exchange()
			err := openapitest.Check(req, resp, body)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), b.want) {
				t.Errorf("error does not mention %q:\n%v", b.want, err)
			}
		})
	}
}

// fakeTB records what Validate reports.
type fakeTB struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
}

func TestValidateFailsTheTest(t *testing.T) {
	b := bad[0]
	req, resp, body := b.exchange()
	f := &fakeTB{TB: t}
	openapitest.Validate(f, req, resp, body)
	if !f.failed {
		t.Fatal("Validate did not fail the test")
	}
	for _, want := range []string{"GET /v1/tenants/" + ws + "/consumers/" + cons + "/messages -> 200", "RateLimit-Limit"} {
		if !strings.Contains(f.msg, want) {
			t.Errorf("message does not name %q:\n%s", want, f.msg)
		}
	}

	g := good[0]
	req, resp, body = g.exchange()
	f = &fakeTB{TB: t}
	openapitest.Validate(f, req, resp, body)
	if f.failed {
		t.Fatalf("Validate failed a good answer: %s", f.msg)
	}
}
