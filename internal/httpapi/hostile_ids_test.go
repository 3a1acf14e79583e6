package httpapi_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sombus/sombus/internal/server/servertest"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// TestHostileIDs sends ids and text with NUL and bytes that are not UTF-8
// to every kind of route, on both stores: each must answer what an unknown
// id or a bad value answers (never 500, never 503), the same on both.
func TestHostileIDs(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			o := servertest.Options{}
			if store == "postgres" {
				o.Store = pgtest.URL(t)
			}
			n := startWith(t, o)
			hostileIDs(t, n)
		})
	}
}

func hostileIDs(t *testing.T, n *node) {
	ws := n.workspace(t, opKey, "hostile")
	uid, _ := n.user(t, "someone", false)
	n.member(t, ws, uid, "viewer")
	cons := n.connection(t, ws, "consumer", map[string]any{"subscriptions": []map[string]any{{"topic": "som.>"}}})
	type call struct {
		method, path string
		body         string
		status       int
		rule         string
	}
	var calls []call
	for _, bad := range []string{"%ff", "w%00", "%c0%af", "%ed%a0%80", "w%01"} {
		calls = append(calls,
			call{"GET", "/v1/manage/workspaces/" + bad, "", 404, "manage.not_found"},
			call{"GET", connsPath(bad), "", 404, "manage.not_found"},
			call{"GET", connPath(ws, bad), "", 404, "manage.not_found"},
			call{"GET", connPath(ws, "c"+bad) + "/skills", "", 404, "manage.not_found"},
			call{"PATCH", connPath(ws, bad), `{"name":"x"}`, 404, "manage.not_found"},
			call{"DELETE", connPath(ws, bad), "", 404, "manage.not_found"},
			call{"POST", connPath(ws, bad) + "/secret", "", 404, "manage.not_found"},
			call{"PUT", "/v1/manage/workspaces/" + ws + "/members/" + bad, `{"role":"viewer"}`, 404, "manage.not_found"},
			call{"DELETE", "/v1/manage/workspaces/" + ws + "/members/" + bad, "", 404, "manage.not_found"},
			call{"POST", "/v1/manage/users/" + bad + "/keys", "", 404, "manage.not_found"},
			call{"GET", "/v1/manage/workspaces/" + ws + "/audit?cursor=" + bad, "", 400, "manage.bad_request"},
			call{"GET", connsPath(ws) + "?kind=" + bad, "", 400, "manage.bad_request"},
		)
	}
	skills := connPath(ws, cons.ID) + "/skills"
	for _, v := range []string{`"a\u0000b"`, `"a\u0007b"`, `{"k":["\u0000"]}`, `{"\u0000":1}`} {
		calls = append(calls, call{"PUT", skills,
			`{"registrations":[{"instance_id":"i1","skill":"s","name":"n","values":{"k":` + v + `},"authority_scale":1}]}`, 400, "manage.bad_request"})
	}
	for _, f := range []string{"instance_id", "skill"} {
		calls = append(calls, call{"PUT", skills,
			strings.Replace(`{"registrations":[{"instance_id":"i1","skill":"s","name":"n","values":{},"authority_scale":1}]}`, `"`+f+`":"`, `"`+f+`":"\u0000`, 1), 400, "manage.bad_request"})
	}
	calls = append(calls,
		call{"POST", connPath(ws, cons.ID) + "/dead-letters/redrive", `{"message_ids":["m\u0000"]}`, 400, "manage.bad_request"},
		call{"POST", connPath(ws, cons.ID) + "/dead-letters/redrive", `{"message_ids":["m\udbff\udfff"]}`, 400, "manage.bad_request"},
		// An id twice (the list's items are unique).
		call{"POST", connPath(ws, cons.ID) + "/dead-letters/redrive", `{"message_ids":["a","b","a"]}`, 400, "manage.bad_request"},
		call{"POST", "/v1/manage/workspaces", `{"name":"a\u0000"}`, 400, "manage.bad_request"},
		call{"POST", "/v1/manage/users", `{"name":"a","email":"a\u0000@example.com"}`, 400, "manage.bad_request"},
	)
	for _, c := range calls {
		var body []byte
		h := map[string]string{"Authorization": "Bearer " + opKey}
		if c.body != "" {
			body = []byte(c.body)
			h["Content-Type"] = "application/json"
		}
		req, err := http.NewRequest(c.method, n.URL+"/", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		// Keep the escapes as sent (url.Parse would refuse %00 in a host
		// but takes it in a path).
		u, err := url.Parse(n.URL + c.path)
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		req.URL = u
		for k, v := range h {
			req.Header.Set(k, v)
		}
		r := n.send(t, req)
		if r.Status != c.status || r.Rule() != c.rule {
			t.Errorf("%s %s %s: got %d %s, want %d %s", c.method, c.path, c.body, r.Status, r.Body, c.status, c.rule)
		}
	}

	// The token endpoint: a client id or secret with NUL or a byte that is
	// not UTF-8 is an unknown client.
	for _, id := range []string{"c\x00", "\xff", cons.ID + "\x00", "c%00", "%ff"} {
		wantOAuthError(t, n.tokenForm(t, url.Values{"grant_type": {"client_credentials"}}, id, "secret"), 401, "invalid_client")
		wantOAuthError(t, n.tokenForm(t, url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {"s"}}, "", ""), 401, "invalid_client")
	}
	wantOAuthError(t, n.tokenForm(t, url.Values{"grant_type": {"client_credentials"}, "client_id": {cons.ID}, "client_secret": {"s\x00\xff"}}, "", ""), 401, "invalid_client")

	// A client id of any length is an unknown client too, and its failures
	// are counted (under a key of bounded size): the 21st attempt within
	// the minute is slowed down, as for a real id.
	for _, id := range []string{strings.Repeat("c", 8000), strings.Repeat("\x00\xff", 3000)} {
		for range 20 {
			wantOAuthError(t, n.tokenForm(t, url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {"s"}}, "", ""), 401, "invalid_client")
		}
		wantOAuthError(t, n.tokenForm(t, url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {"s"}}, "", ""), 429, "slow_down")
	}
}
