package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
)

// TestPullRefusals: the pull API's 401/403 rules on every pull route, and on
// publish.
func TestPullRefusals(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "a")
	other := n.workspace(t, opKey, "b")
	c := n.connection(t, ws, "consumer", nil)
	c2 := n.connection(t, ws, "consumer", nil)
	p := n.connection(t, ws, "producer", nil)
	oc := n.connection(t, other, "consumer", nil)
	ctok := n.token(t, c.ID, n.issue(t, ws, c.ID).ClientSecret)
	ptok := n.token(t, p.ID, n.issue(t, ws, p.ID).ClientSecret)
	otok := n.token(t, oc.ID, n.issue(t, other, oc.ID).ClientSecret)

	type route struct {
		method, path string
		body         any
	}
	pullRoutes := func(ws, c string) []route {
		base := "/v1/tenants/" + ws + "/consumers/" + c
		h := map[string]any{"receipt_handles": []string{"AQEBx"}}
		return []route{{"GET", base + "/messages?wait=0", nil}, {"POST", base + "/ack", h}, {"POST", base + "/nack", h}, {"GET", base + "/skills", nil}}
	}
	for _, rt := range pullRoutes(ws, c.ID) {
		n.do(t, rt.method, rt.path, ctok, rt.body).Must(t, 200)
		wantRefusal(t, n.do(t, rt.method, rt.path, "", rt.body), 401, "producer.unauthenticated")
		wantRefusal(t, n.do(t, rt.method, rt.path, "x.y.z", rt.body), 401, "producer.unauthenticated")
		msg := wantRefusal(t, n.do(t, rt.method, rt.path, ptok, rt.body), 403, "producer.not_registered")
		wantMessage(t, msg, "consumer")
		// Another workspace's consumer, on this workspace's URL.
		msg = wantRefusal(t, n.do(t, rt.method, rt.path, otok, rt.body), 403, "tenant.mismatch")
		wantMessage(t, msg, other)
	}
	for _, rt := range pullRoutes(ws, c2.ID) { // a sibling's queue
		msg := wantRefusal(t, n.do(t, rt.method, rt.path, ctok, rt.body), 403, "consumer.not_owner")
		wantMessage(t, msg, c.ID)
	}
	for _, rt := range pullRoutes(other, c.ID) { // own id, other workspace
		wantRefusal(t, n.do(t, rt.method, rt.path, ctok, rt.body), 403, "tenant.mismatch")
	}
	for _, rt := range pullRoutes("wnosuchworkspace", "cnosuchconnection") {
		wantRefusal(t, n.do(t, rt.method, rt.path, ctok, rt.body), 403, "tenant.mismatch")
	}
	// Publish: a consumer's token is not a producer's.
	for _, path := range []string{publishPath(ws), publishPath(ws) + "/batch"} {
		var body any = map[string]any{"messages": []any{map[string]any{}}}
		if !strings.HasSuffix(path, "batch") {
			body = map[string]any{}
		}
		wantRefusal(t, n.do(t, "POST", path, ctok, body), 403, "producer.not_registered")
		wantRefusal(t, n.do(t, "POST", path, "", body), 401, "producer.unauthenticated")
		wantRefusal(t, n.do(t, "POST", strings.Replace(path, ws, other, 1), ptok, body), 403, "tenant.mismatch")
	}
	// A 401 has no RateLimit headers; a 403 after the token check has them.
	r := n.pull(t, ws, c.ID, "")
	if r.Header.Get("RateLimit-Limit") != "" {
		t.Errorf("401 with RateLimit headers: %v", r.Header)
	}
	// Even with the allowance used up, a 403 carries no Retry-After: no
	// wait makes it pass.
	for range 45 {
		n.do(t, "GET", "/v1/tenants/"+ws+"/consumers/"+c.ID+"/messages?wait=0", ctok, nil)
	}
	r = n.do(t, "GET", "/v1/tenants/"+other+"/consumers/"+c.ID+"/messages?wait=0", ctok, nil)
	if r.Status != 403 || r.Header.Get("Retry-After") != "" || r.Header.Get("RateLimit-Remaining") != "0" {
		t.Errorf("403 past the allowance: %d, Retry-After %q, RateLimit-Remaining %q; want no Retry-After, 0 remaining",
			r.Status, r.Header.Get("Retry-After"), r.Header.Get("RateLimit-Remaining"))
	}
}

// TestRoutes: unknown routes and wrong methods get the refusal body.
func TestRoutes(t *testing.T) {
	t.Parallel()
	n := start(t)
	for _, p := range []string{"/", "/v1", "/v1/nope", "/v1/manage", "/v1/manage/workspaces/w1/nothing", "/v1/tenants/w1", "/v1/oauth/jwks/x", "/v2/manage/whoami"} {
		msg := wantRefusal(t, n.do(t, "GET", p, opKey, nil), 404, "route.not_found")
		wantMessage(t, msg, p)
	}
	for _, c := range []struct{ method, path, allow string }{
		{"DELETE", "/v1/manage/whoami", "GET"},
		{"POST", "/v1/manage/workspaces/w1", "GET"},
		{"PUT", "/v1/oauth/token", "POST"},
		{"POST", "/v1/oauth/jwks", "GET"},
		{"GET", "/v1/tenants/w1/messages", "POST"},
		{"PATCH", "/healthz", "GET"},
		{"DELETE", "/v1/tenants/w1/consumers/c1/ack", "POST"},
	} {
		r := n.do(t, c.method, c.path, opKey, nil)
		msg := wantRefusal(t, r, 405, "route.method_not_allowed")
		wantMessage(t, msg, c.method)
		if !strings.Contains(r.Header.Get("Allow"), c.allow) {
			t.Errorf("%s %s: Allow %q, want %s", c.method, c.path, r.Header.Get("Allow"), c.allow)
		}
	}
}

// TestUncleanPathsAreNotFound: a path with an empty, "." or ".." segment
// answers like any unknown route, 404 route.not_found with the refusal
// body, for every method, and never a redirect to its cleaned path (which
// a client following redirects would send its POST to again). Under the
// portal it is the portal's not-found page; the portal's own paths work.
func TestUncleanPathsAreNotFound(t *testing.T) {
	t.Parallel()
	n := start(t)
	client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path, body string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, n.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+opKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	for _, path := range []string{
		"/v1//tenants/w1/consumers/c1/ack", "//v1/manage/whoami", "/v1/./manage/whoami", "/v1/manage/../manage/whoami",
		"/v1/manage/whoami/.", "/v1/manage/whoami/..", "/v1/manage/whoami//", "/v1/%2e%2e/v1/manage/whoami", "/healthz/.",
	} {
		for _, method := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
			resp, b := send(method, path, `{"receipt_handles":["x"]}`)
			if resp.StatusCode != 404 || resp.Header.Get("Location") != "" {
				t.Errorf("%s %s: %d Location %q, want 404 without one", method, path, resp.StatusCode, resp.Header.Get("Location"))
				continue
			}
			if method != "HEAD" {
				msg := wantRefusal(t, &servertest.Response{Status: resp.StatusCode, Body: b}, 404, "route.not_found")
				wantMessage(t, msg, method)
			}
		}
	}
	for _, path := range []string{"/portal//signin", "/portal/./signin", "/portal/static/../signin", "/portal/static//portal.css"} {
		for _, method := range []string{"GET", "POST"} {
			resp, b := send(method, path, "")
			if resp.StatusCode != 404 || resp.Header.Get("Location") != "" || !strings.Contains(string(b), "Page not found") {
				t.Errorf("%s %s: %d Location %q, want the portal's 404 page: %.200s", method, path, resp.StatusCode, resp.Header.Get("Location"), b)
			}
		}
	}
	for _, c := range []struct {
		path     string
		status   int
		location string
	}{{"/portal/signin", 200, ""}, {"/portal/static/portal.css", 200, ""}, {"/portal", 301, "/portal/"}, {"/portal/", 303, "/portal/signin"}} {
		resp, _ := send("GET", c.path, "")
		if resp.StatusCode != c.status || !strings.HasPrefix(resp.Header.Get("Location"), c.location) {
			t.Errorf("GET %s: %d Location %q, want %d %q", c.path, resp.StatusCode, resp.Header.Get("Location"), c.status, c.location)
		}
	}
}

// TestManageBodies: malformed JSON, unknown fields, wrong types, wrong
// content types and oversized bodies are refused with the field named, and
// nothing is written.
func TestManageBodies(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "bodies")
	c := n.connection(t, ws, "consumer", nil)
	n.issue(t, ws, c.ID)
	uid, _ := n.user(t, "member", false)
	n.member(t, ws, uid, bus.RoleViewer)
	beforeAudit := len(n.auditLog(t, ws))
	beforeConn := n.getConn(t, ws, c.ID)

	type route struct{ method, path string }
	routes := []route{
		{"POST", "/v1/manage/users"},
		{"POST", "/v1/manage/workspaces"},
		{"PUT", "/v1/manage/workspaces/" + ws + "/members/" + uid},
		{"POST", connsPath(ws)},
		{"PATCH", connPath(ws, c.ID)},
		{"POST", connPath(ws, c.ID) + "/secret/rotate"},
		{"PUT", connPath(ws, c.ID) + "/skills"},
		{"POST", connPath(ws, c.ID) + "/dead-letters/redrive"},
		// Routes that take no parameters.
		{"POST", "/v1/manage/users/" + uid + "/keys"},
		{"POST", connPath(ws, c.ID) + "/secret"},
		{"POST", connPath(ws, c.ID) + "/secret/stop-previous"},
		{"POST", connPath(ws, c.ID) + "/secret/revoke"},
		{"POST", connPath(ws, c.ID) + "/revoke"},
		{"POST", connPath(ws, c.ID) + "/restore"},
		{"POST", connPath(ws, c.ID) + "/purge"},
	}
	t.Run("routes", func(t *testing.T) {
		for _, rt := range routes {
			t.Run(rt.method+" "+rt.path, func(t *testing.T) {
				t.Parallel()
				refuseBodies(t, n, rt.method, rt.path)
			})
		}
	})
	send := func(rt route, body []byte, ct string) (int, string) {
		t.Helper()
		return sendBody(t, n, rt.method, rt.path, body, ct)
	}

	// Exactly 1 MiB is within the limit: refused for its content, not its size.
	head, tail := `{"kind":"consumer","name":"`, `"}`
	exact := head + strings.Repeat("x", 1<<20-len(head)-len(tail)) + tail
	if status, msg := send(routes[3], []byte(exact), "application/json"); status != 400 || !strings.Contains(msg, "name") {
		t.Errorf("a body of exactly 1 MiB: %d %q", status, msg)
	}

	// Wrong types, the field named.
	for _, tc := range []struct {
		rt    route
		body  string
		field string
	}{
		{routes[0], `{"name":"x","email":"x@example.com","operator":"yes"}`, "operator"},
		{routes[0], `{"name":1,"email":"x@example.com"}`, "name"},
		{routes[1], `{"name":["x"]}`, "name"},
		{routes[2], `{"role":1}`, "role"},
		{routes[3], `{"kind":"consumer","name":"x","attempt_limit":"5"}`, "attempt_limit"},
		{routes[3], `{"kind":"consumer","name":"x","attempt_limit":5.5}`, "attempt_limit"},
		{routes[3], `{"kind":"consumer","name":"x","attempt_limit":1e400}`, "attempt_limit"},
		{routes[3], `{"kind":"consumer","name":"x","subscriptions":"som.>"}`, "subscriptions"},
		{routes[3], `{"kind":"consumer","name":"x","subscriptions":[{"topic":5}]}`, "topic"},
		{routes[3], `{"kind":"consumer","name":"x","subscriptions":[{"topic":"som.>","colour":1}]}`, "colour"},
		{routes[3], `{"kind":"consumer","name":"x","quota_tier":"standard","extra":1}`, "extra"},
		{routes[3], `{"kind":"consumer","name":"x","quota_tier":null,"extra":1}`, "quota_tier"}, // the first fault
		{routes[4], `{"attempt_limit":true}`, "attempt_limit"},
		{routes[5], `{"overlap":24}`, "overlap"},
		{routes[6], `{"registrations":{}}`, "registrations"},
		{routes[7], `{"message_ids":"m1"}`, "message_ids"},
	} {
		_, msg := send(tc.rt, []byte(tc.body), "application/json")
		if !strings.Contains(msg, tc.field) {
			t.Errorf("%s %s: message %q does not name %q", tc.rt.path, tc.body, msg, tc.field)
		}
	}

	// Nothing was written.
	if got := n.auditLog(t, ws); len(got) != beforeAudit {
		t.Fatalf("refused bodies wrote audit entries: %v", actions(got[:len(got)-beforeAudit]))
	}
	var l struct {
		Connections []conn `json:"connections"`
	}
	n.do(t, "GET", connsPath(ws), opKey, nil).Must(t, 200).Decode(t, &l)
	if len(l.Connections) != 1 {
		t.Fatalf("refused bodies made connections: %+v", l.Connections)
	}
	if got := n.getConn(t, ws, c.ID); got.CredentialVersion != beforeConn.CredentialVersion || got.Status != "active" || got.Name != beforeConn.Name {
		t.Fatalf("refused bodies changed the connection: %+v", got)
	}
	var ls struct {
		Workspaces []bus.Workspace `json:"workspaces"`
	}
	n.do(t, "GET", "/v1/manage/workspaces", opKey, nil).Must(t, 200).Decode(t, &ls)
	if len(ls.Workspaces) != 1 {
		t.Fatalf("refused bodies made workspaces: %+v", ls.Workspaces)
	}
	// No user was made either: the email is still free.
	n.do(t, "POST", "/v1/manage/users", opKey, map[string]any{"name": "x", "email": "x@example.com"}).Must(t, 201)

	// Routes without parameters take no body, an empty one, or {}.
	n.do(t, "POST", connPath(ws, c.ID)+"/revoke", opKey, "{}").Must(t, 200)
	n.do(t, "POST", connPath(ws, c.ID)+"/restore", opKey, nil).Must(t, 200)
	n.do(t, "POST", connPath(ws, c.ID)+"/revoke", opKey, "").Must(t, 200) // Content-Type: application/json, no bytes
	n.raw(t, "POST", connPath(ws, c.ID)+"/restore", []byte{}, map[string]string{"Authorization": "Bearer " + opKey, "Content-Type": "text/plain"}).Must(t, 200)
	chunked, _ := http.NewRequest("POST", n.URL+connPath(ws, c.ID)+"/secret/rotate", io.MultiReader(strings.NewReader("")))
	chunked.Header.Set("Content-Type", "application/json")
	chunked.Header.Set("Authorization", "Bearer "+opKey)
	var rot bus.SecretIssued
	n.send(t, chunked).Must(t, 201).Decode(t, &rot)
	if got := n.getConn(t, ws, c.ID); got.Secret.PreviousExpiresAt == nil || *got.Secret.PreviousExpiresAt != bus.FormatTime(t0.Add(24*time.Hour)) {
		t.Errorf("rotate with an empty body: previous_expires_at %v, want the 24h default", got.Secret.PreviousExpiresAt)
	}
	wantRefusal(t, n.do(t, "POST", connPath(ws, c.ID)+"/secret/stop-previous", opKey, "  "), 400, "manage.bad_request")
	// Query strings on management routes.
	wantRefusal(t, n.do(t, "GET", connPath(ws, c.ID)+"?verbose=1", opKey, nil), 400, "manage.bad_request")
}

// TestNoSecretInLogsOrAudit runs the credential lifecycle with the node's
// log captured and looks for every secret, API key and token in the log,
// the audit log and the answers that must not show them.
func TestNoSecretInLogsOrAudit(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "secrets")
	uid, ukey := n.user(t, "dev", false)
	n.member(t, ws, uid, bus.RoleDeveloper)
	c := n.connection(t, ws, "consumer", nil)
	p := n.connection(t, ws, "producer", nil)

	var secrets []string
	add := func(s string) string { secrets = append(secrets, s); return s }
	add(ukey)
	add(opKey)
	s1 := add(n.issue(t, ws, c.ID).ClientSecret)
	ps := add(n.issue(t, ws, p.ID).ClientSecret)
	tok := add(n.token(t, c.ID, s1))
	ptok := add(n.token(t, p.ID, ps))
	n.publish(t, ws, ptok, "m1").Must(t, 202)
	s2 := add(n.rotate(t, ws, c.ID, "1h").ClientSecret)
	add(n.token(t, c.ID, s2))
	n.tokenResp(t, c.ID, s1+"wrong")
	n.tokenResp(t, p.ID, s1) // a real secret, the wrong client
	n.tokenForm(t, nil, c.ID, s2)
	n.do(t, "POST", connPath(ws, c.ID)+"/secret/stop-previous", ukey, nil).Must(t, 200)
	n.do(t, "POST", connPath(ws, c.ID)+"/secret/revoke", ukey, nil).Must(t, 200)
	s3 := add(n.issue(t, ws, c.ID).ClientSecret)
	n.do(t, "POST", connPath(ws, c.ID)+"/revoke", opKey, nil).Must(t, 200)
	n.tokenResp(t, c.ID, s3)
	n.pull(t, ws, c.ID, tok)
	n.do(t, "POST", connPath(ws, c.ID)+"/restore", opKey, nil).Must(t, 200)
	n.do(t, "GET", "/v1/manage/whoami", ukey+"x", nil)
	n.do(t, "GET", "/v1/manage/whoami", s3, nil)
	n.do(t, "POST", connsPath(ws), ukey, map[string]any{"kind": "consumer", "name": s3})
	n.do(t, "DELETE", connPath(ws, p.ID), opKey, nil).Must(t, 204)
	n.publish(t, ws, ptok, "m2")

	var audit []byte
	for _, e := range n.auditLog(t, ws) {
		b, _ := json.Marshal(e)
		audit = append(audit, b...)
	}
	got := actions(n.auditLog(t, ws))
	want := []string{"connection.remove", "connection.restore", "connection.revoke", "secret.issue", "secret.revoke", "secret.stop_previous",
		"secret.rotate", "secret.issue", "secret.issue", "connection.create", "connection.create", "member.set", "workspace.create"}
	if !slices.Equal(got, want) {
		t.Errorf("audit %v, want %v", got, want)
	}
	logs := n.logs.String()
	db := string(n.storeBytes(t))
	for i, s := range secrets {
		if strings.Contains(string(audit), s) {
			t.Errorf("secret %d is in the audit log", i)
		}
		if strings.Contains(logs, s) {
			t.Errorf("secret %d is in the log", i)
		}
		if i < len(secrets) && !strings.Contains(s, ".") && strings.Contains(db, s) { // tokens are not stored at all
			t.Errorf("secret %d is in the SQLite files", i)
		}
	}
	if len(logs) == 0 {
		t.Log("no log lines were written")
	}
}

// sendBody sends body as the operator and checks it is refused with
// manage.bad_request; it returns the status and the message.
func sendBody(t testing.TB, n *node, method, path string, body []byte, ct string) (int, string) {
	t.Helper()
	h := map[string]string{"Authorization": "Bearer " + opKey}
	if ct != "" {
		h["Content-Type"] = ct
	}
	r := n.raw(t, method, path, body, h)
	if r.Status == 413 {
		return 413, wantRefusal(t, r, 413, "manage.bad_request")
	}
	return r.Status, wantRefusal(t, r, 400, "manage.bad_request")
}

// refuseBodies sends bad bodies of every kind to one route.
func refuseBodies(t *testing.T, n *node, method, path string) {
	big := append([]byte(`{"name":"`), bytes.Repeat([]byte("x"), 1<<20)...)
	big = append(big, `"}`...)
	for _, tc := range []struct {
		name  string
		body  string
		ct    string
		words []string
	}{
		{"cut short", `{"name":`, "application/json", []string{"JSON"}},
		{"not JSON", `{name: 1}`, "application/json", []string{"JSON"}},
		{"unknown field", `{"colour":"red"}`, "application/json", []string{"colour"}},
		{"array", `[]`, "application/json", []string{"object"}},
		{"null", `null`, "application/json", []string{"object"}},
		{"string", `"x"`, "application/json", []string{"object"}},
		{"trailing data", `{} {}`, "application/json", []string{"one JSON object"}},
		{"stray brace after", `{} }`, "application/json", []string{"one JSON object"}},
		{"stray bracket after", `{}]`, "application/json", []string{"one JSON object"}},
		{"text/plain", `{}`, "text/plain", []string{"Content-Type"}},
		{"form", `name=x`, "application/x-www-form-urlencoded", []string{"Content-Type"}},
		{"no content type", `{}`, "", []string{"Content-Type"}},
	} {
		status, msg := sendBody(t, n, method, path, []byte(tc.body), tc.ct)
		if status != 400 {
			t.Errorf("%s: status %d", tc.name, status)
		}
		wantMessage(t, msg, tc.words...)
	}
	status, msg := sendBody(t, n, method, path, big, "application/json")
	if status != 413 {
		t.Errorf("%d bytes got %d", len(big), status)
	}
	wantMessage(t, msg, "1048576")
	// The same without a Content-Length (chunked).
	req, _ := http.NewRequest(method, n.URL+path, io.MultiReader(bytes.NewReader(big)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+opKey)
	wantRefusal(t, n.send(t, req), 413, "manage.bad_request")
}
