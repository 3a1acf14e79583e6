package portal_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
)

// operatorActor is the bootstrap operator as the bus sees them.
func operatorActor(t *testing.T, n *servertest.Node) *bus.Actor {
	t.Helper()
	a, err := n.Server.Service().AuthenticateAPIKey(context.Background(), servertest.BootstrapKey)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// signedInOperator starts a node, signs its operator in and makes a
// workspace (the operator is its owner).
func signedInOperator(t *testing.T) (*servertest.Node, *browser, string) {
	t.Helper()
	n := startNode(t)
	b := newBrowser(t, n)
	if resp := b.signIn("operator@localhost", operatorPassword); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d\n%s", resp.StatusCode, b.last)
	}
	return n, b, n.Workspace("Portal test")
}

// post sends a form of the last page with its CSRF token.
func (b *browser) post(path string, form url.Values) *http.Response {
	b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", b.csrf())
	return b.do("POST", path, form)
}

// wantStatus fails the test unless resp has the status.
func (b *browser) wantStatus(what string, resp *http.Response, status int) {
	b.t.Helper()
	if resp.StatusCode != status {
		b.t.Fatalf("%s: %d, want %d\n%s", what, resp.StatusCode, status, b.last)
	}
}

// follow GETs the redirect target of resp.
func (b *browser) follow(resp *http.Response) *http.Response {
	b.t.Helper()
	if resp.StatusCode != http.StatusSeeOther {
		b.t.Fatalf("want a 303, got %d\n%s", resp.StatusCode, b.last)
	}
	return b.do("GET", resp.Header.Get("Location"), nil)
}

func (b *browser) wantText(texts ...string) {
	b.t.Helper()
	page := html.UnescapeString(b.last)
	for _, s := range texts {
		if !strings.Contains(page, s) {
			b.t.Errorf("the page lacks %q:\n%s", s, b.last)
		}
	}
}

var codeOf = func(id string) *regexp.Regexp { return regexp.MustCompile(`<code id="` + id + `">([^<]+)</code>`) }

// TestConnectionPages walks a consumer through the portal: create, get a
// secret that works at the token endpoint, rotate, stop the old secret,
// revoke the secret, revoke and restore the connection, remove; each change
// audited with the signed-in operator as actor.
func TestConnectionPages(t *testing.T) {
	n, b, ws := signedInOperator(t)
	op := operatorActor(t, n)
	base := "/portal/workspaces/" + ws

	b.wantStatus("consumers", b.do("GET", base+"/consumers", nil), 200)
	b.wantText("No consumer connections yet", "Create a consumer connection")
	// A refusal stays on the page with what was typed.
	b.wantStatus("bad create", b.post(base+"/connections", url.Values{"kind": {"consumer"}, "name": {"w"}, "attempt_limit": {"0"}, "subscriptions": {"som.>"}}), 400)
	b.wantText("attempt_limit", `value="w"`)
	resp := b.post(base+"/connections", url.Values{"kind": {"consumer"}, "name": {"billing worker"}, "attempt_limit": {"3"}, "subscriptions": {"som.orders.>\r\nsom.refunds.>"}})
	loc := resp.Header.Get("Location")
	b.wantStatus("connection page", b.follow(resp), 200)
	id := strings.TrimPrefix(strings.SplitN(loc, "?", 2)[0], base+"/connections/")
	b.wantText("Connection created", "billing worker", "som.orders.>", "som.refunds.>", "Get client secret", "Attempt limit", "Requests today", "Queue over the last hour")
	conn := base + "/connections/" + id

	// The list shows it with its counts.
	b.wantStatus("consumers", b.do("GET", base+"/consumers", nil), 200)
	b.wantText("billing worker", id)

	// Get client secret: shown once, with the URLs and commands filled in.
	b.do("GET", conn, nil)
	b.wantStatus("secret", b.post(conn+"/secret", nil), 200)
	secret := codeOf("client-secret").FindStringSubmatch(b.last)
	if secret == nil {
		t.Fatalf("no secret on the page:\n%s", b.last)
	}
	b.wantText(n.URL+"/v1/oauth/token", "/consumers/"+id+"/messages", "/consumers/"+id+"/ack", "/consumers/"+id+"/nack", "/consumers/"+id+"/skills",
		"-u '"+id+":"+html.UnescapeString(secret[1])+"'", `data-copy="client-secret"`, "/portal/static/copy.js")
	n.Token(id, html.UnescapeString(secret[1]))
	// The form sent again (the page that showed the secret reloaded, a
	// second click): refused, saying what to do if the secret was missed.
	b.wantStatus("secret again", b.post(conn+"/secret", nil), 409)
	b.wantText("rotate the secret to get another one")
	// Reloading never shows it again; with a secret active the page offers
	// rotate and revoke, not another Get client secret.
	b.do("GET", conn, nil)
	if strings.Contains(b.last, secret[1]) {
		t.Fatal("the secret is shown again on reload")
	}
	b.wantText("Rotate secret", "Revoke secret")
	if strings.Contains(b.last, `id="get-secret"`) {
		t.Error("Get client secret offered while a secret is active")
	}

	// Rotate with an overlap of an hour: both secrets work until Stop old secret now.
	version := regexp.MustCompile(`name="version" value="([0-9]+)"`).FindStringSubmatch(b.last)
	if version == nil {
		t.Fatalf("the rotate form names no version:\n%s", b.last)
	}
	rotate := url.Values{"overlap": {"1h"}, "version": {version[1]}}
	b.wantStatus("rotate", b.post(conn+"/rotate", rotate), 200)
	rotated := html.UnescapeString(codeOf("client-secret").FindStringSubmatch(b.last)[1])
	// The same form sent again (a reload of the page with the new secret)
	// rotates nothing: the secret just shown and the old one keep working.
	b.wantStatus("rotate again", b.post(conn+"/rotate", rotate), 409)
	b.wantText("The secret was rotated since this page was shown", "rotate the secret to get another one")
	n.Token(id, rotated)
	n.Token(id, html.UnescapeString(secret[1]))
	b.do("GET", conn, nil)
	b.wantText("Stop old secret now", "Old secret")
	b.follow(b.post(conn+"/stop-previous", nil))
	b.wantText("The old secret stopped working")
	n.TokenResponse(id, html.UnescapeString(secret[1])).Must(t, 401)
	n.Token(id, rotated)

	// Revoke and restore the connection; revoke the secret.
	b.follow(b.post(conn+"/revoke", nil))
	b.wantText("Connection revoked", "Restore connection")
	b.follow(b.post(conn+"/restore", nil))
	b.wantText("Connection restored", "Revoke connection")
	b.follow(b.post(conn+"/revoke-secret", nil))
	b.wantText("Secret revoked", "The secret was revoked", "Get client secret")
	n.TokenResponse(id, rotated).Must(t, 401)

	// Remove asks for the name.
	b.wantStatus("remove without the name", b.post(conn+"/remove", url.Values{"confirm_name": {"billing"}}), 400)
	b.wantText("Type the connection's name")
	b.follow(b.post(conn+"/remove", url.Values{"confirm_name": {"billing worker"}}))
	b.wantText("Connection removed", "No consumer connections yet")

	// Every change was audited with the operator as actor.
	page, err := n.Server.Service().SearchAudit(context.Background(), op, ws, bus.AuditFilter{Target: id}, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range page.Entries {
		if e.Actor != op.User.ID {
			t.Errorf("entry %s by %s, want the operator %s", e.Action, e.Actor, op.User.ID)
		}
		actions = append(actions, e.Action)
	}
	want := "connection.remove secret.revoke connection.restore connection.revoke secret.stop_previous secret.rotate secret.issue connection.create"
	if strings.Join(actions, " ") != want {
		t.Errorf("audit %q, want %q", strings.Join(actions, " "), want)
	}
}

// TestDeadLetterPages: a message that exhausted its attempts shows on the
// dead-letter page with its envelope; redrive one, a selection and all;
// purge; and the queue chart draws the samples.
func TestDeadLetterPages(t *testing.T) {
	n, b, _ := signedInOperator(t)
	p := n.NewPair(map[string]any{"attempt_limit": 1})
	base := "/portal/workspaces/" + p.WS
	conn := base + "/connections/" + p.Consumer
	for _, m := range []string{"m-1", "m-2", "m-3"} {
		n.Publish(p, servertest.Envelope(m, "story-"+m, map[string]any{"n": m})).Must(t, 202)
	}
	deadLetter := func() {
		t.Helper()
		msgs := n.Receive(p, "max=10&wait=0")
		var hs []string
		for _, m := range msgs {
			hs = append(hs, m.ReceiptHandle)
		}
		n.Settle(p, "nack", hs, nil).Must(t, 200)
		n.Receive(p, "max=10&wait=0") // moves the exhausted heads
	}
	deadLetter()
	b.wantStatus("dead letters", b.do("GET", conn+"/dead-letters", nil), 200)
	b.wantText("m-1", "m-2", "m-3", "Deliveries", "Redrive all", "Purge queue", `"payload": {`+"\n"+`    "n": "m-1"`)

	b.follow(b.post(conn+"/dead-letters/redrive", url.Values{"message_id": {"m-2"}}))
	b.wantText("Redriven")
	if strings.Contains(b.last, "<code>m-2</code>") {
		t.Errorf("m-2 still a dead letter")
	}
	b.wantStatus("redrive nothing selected", b.post(conn+"/dead-letters/redrive", nil), 400)
	b.wantText("Select the dead letters")
	b.follow(b.post(conn+"/dead-letters/redrive", url.Values{"message_ids": {"m-1", "m-3"}}))
	b.wantText("No dead letters")
	deadLetter()
	b.do("GET", conn+"/dead-letters", nil)
	b.follow(b.post(conn+"/dead-letters/redrive", url.Values{"all": {"1"}}))
	b.wantText("No dead letters")
	if st := n.QueueCounts(p); st.Ready != 3 || st.DeadLetters != 0 {
		t.Fatalf("after redrive: %+v", st)
	}

	// The chart draws the samples.
	if _, err := n.Server.Service().Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.wantStatus("connection", b.do("GET", conn+"?window=24h", nil), 200)
	b.wantText("Queue over the last 24 hours", "<svg", "ready 3 now", `aria-current="page">Last 24 hours`)

	b.do("GET", conn+"/dead-letters", nil)
	b.follow(b.post(conn+"/purge", nil))
	b.wantText("Queue purged")
	if st := n.QueueCounts(p); st.Ready != 0 {
		t.Fatalf("after purge: %+v", st)
	}
}

// TestConnectionPagesRefusals: another workspace's connection in the URL
// is not found; a viewer sees no buttons and the server refuses the forms
// anyway; a producer has no dead-letter page.
func TestConnectionPagesRefusals(t *testing.T) {
	n, b, ws := signedInOperator(t)
	other := n.NewPair(nil)
	mine := n.Connection(ws, "consumer", map[string]any{"subscriptions": []map[string]any{{"topic": "som.>"}}})
	for _, path := range []string{
		"/portal/workspaces/" + ws + "/connections/" + other.Consumer,
		"/portal/workspaces/" + ws + "/connections/" + other.Consumer + "/dead-letters",
	} {
		b.wantStatus(path, b.do("GET", path, nil), 404)
	}
	b.do("GET", "/portal/workspaces/"+ws+"/connections/"+mine, nil)
	b.wantStatus("revoke another workspace's connection", b.post("/portal/workspaces/"+ws+"/connections/"+other.Consumer+"/revoke", nil), 404)
	b.wantStatus("producer dead letters", b.do("GET", "/portal/workspaces/"+other.WS+"/connections/"+other.Producer+"/dead-letters", nil), 404)

	// A viewer.
	svc := n.Server.Service()
	op := operatorActor(t, n)
	u, err := svc.CreateUser(context.Background(), op, bus.CreateUserParams{Name: "Vera Viewer", Email: "vera@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	setPassword(t, n, u.ID, "viewer-password-123")
	if _, err := svc.SetMember(context.Background(), op, ws, u.ID, bus.RoleViewer); err != nil {
		t.Fatal(err)
	}
	v := newBrowser(t, n)
	v.wantStatus("viewer sign in", v.signIn("vera@example.com", "viewer-password-123"), 303)
	conn := "/portal/workspaces/" + ws + "/connections/" + mine
	v.wantStatus("viewer page", v.do("GET", conn, nil), 200)
	for _, button := range []string{"get-secret", "rotate", "revoke-connection", "remove-connection"} {
		if strings.Contains(v.last, `id="`+button+`"`) {
			t.Errorf("a viewer sees the %s button", button)
		}
	}
	for _, action := range []string{"/secret", "/revoke", "/remove", "/purge", "/dead-letters/redrive"} {
		v.do("GET", conn, nil)
		v.wantStatus("viewer "+action, v.post(conn+action, url.Values{"confirm_name": {"consumer connection"}, "all": {"1"}}), 403)
	}
	v.wantStatus("viewer audit", v.do("GET", "/portal/workspaces/"+ws+"/audit", nil), 403)
	for _, q := range []string{"?from=x", "?to=2026-13-01", "?actor=%00"} {
		v.wantStatus("viewer audit "+q, v.do("GET", "/portal/workspaces/"+ws+"/audit"+q, nil), 403)
	}
	v.wantStatus("viewer consumers", v.do("GET", "/portal/workspaces/"+ws+"/consumers", nil), 200)
	if strings.Contains(v.last, "Create a consumer connection") {
		t.Error("a viewer sees the create form")
	}
}

// TestAuditPage: the audit log filters by actor, action, connection and
// days, and pages with its filters kept.
func TestAuditPage(t *testing.T) {
	n, b, ws := signedInOperator(t)
	op := operatorActor(t, n)
	a := n.Connection(ws, "consumer", map[string]any{"name": "alpha"})
	c := n.Connection(ws, "producer", map[string]any{"name": "charlie"})
	n.Secret(ws, a)
	n.Secret(ws, c)
	base := "/portal/workspaces/" + ws + "/audit"
	b.wantStatus("audit", b.do("GET", base, nil), 200)
	b.wantText("workspace.create", "connection.create", "secret.issue", "alpha", "charlie")

	b.wantStatus("by action", b.do("GET", base+"?action=secret.issue", nil), 200)
	if got := strings.Count(b.last, "<code>secret.issue</code>"); got != 2 || strings.Contains(b.last, "<code>connection.create</code>") {
		t.Errorf("action filter: %d secret.issue rows\n%s", got, b.last)
	}
	b.do("GET", base+"?connection="+a, nil)
	if strings.Contains(b.last, c) && strings.Count(b.last, "<code class=\"small\">"+c+"</code>") > 0 {
		t.Errorf("connection filter shows charlie")
	}
	b.wantText("alpha")
	b.do("GET", base+"?actor="+op.User.ID+"&action=connection.create", nil)
	if got := strings.Count(b.last, "<code>connection.create</code>"); got != 2 {
		t.Errorf("actor and action filter: %d rows", got)
	}
	day := n.Clock.Now().UTC().Format("2006-01-02")
	b.do("GET", base+"?from="+day+"&to="+day, nil)
	b.wantText("secret.issue")
	b.do("GET", base+"?to="+n.Clock.Now().UTC().AddDate(0, 0, -1).Format("2006-01-02"), nil)
	b.wantText("No entries")
	b.wantStatus("bad date", b.do("GET", base+"?from=yesterday", nil), 400)
	b.wantText("from must be a date")

	// More entries than a page: the next page keeps the filter.
	for range 30 {
		for _, id := range []string{a, c} {
			if _, err := n.Server.Service().RotateSecret(context.Background(), op, ws, id, "none"); err != nil {
				t.Fatal(err)
			}
		}
	}
	b.do("GET", base+"?action=secret.rotate", nil)
	next := regexp.MustCompile(`href="\?([^"]+)">Older entries`).FindStringSubmatch(b.last)
	if next == nil {
		t.Fatalf("no next page link:\n%s", b.last)
	}
	q, _ := url.ParseQuery(html.UnescapeString(next[1]))
	if q.Get("action") != "secret.rotate" || q.Get("cursor") == "" {
		t.Fatalf("next page query %q", next[1])
	}
	b.wantStatus("page 2", b.do("GET", base+"?"+html.UnescapeString(next[1]), nil), 200)
	if got := strings.Count(b.last, "<code>secret.rotate</code>"); got != 10 || strings.Contains(b.last, "<code>connection.create</code>") {
		t.Errorf("page 2: %d secret.rotate rows, want 10", got)
	}
}

// TestProducerPages: a producer's page has what applies to it: its secret
// with the publish command, status and removal; no queue, chart or dead
// letters.
func TestProducerPages(t *testing.T) {
	n, b, ws := signedInOperator(t)
	base := "/portal/workspaces/" + ws
	b.do("GET", base+"/producers", nil)
	b.wantText("No producer connections yet", "Create a producer connection")
	if strings.Contains(b.last, `name="subscriptions"`) {
		t.Error("the producer form asks for subscriptions")
	}
	resp := b.post(base+"/connections", url.Values{"kind": {"producer"}, "name": {"web shop"}})
	loc := resp.Header.Get("Location")
	b.follow(resp)
	id := strings.TrimPrefix(strings.SplitN(loc, "?", 2)[0], base+"/connections/")
	b.wantText("web shop", "producer connection", "Get client secret", "Remove connection")
	for _, absent := range []string{"Queue now", "Queue over", "Dead letters", "Skill registrations", "Attempt limit"} {
		if strings.Contains(b.last, absent) {
			t.Errorf("a producer's page shows %q", absent)
		}
	}
	b.wantStatus("secret", b.post(base+"/connections/"+id+"/secret", nil), 200)
	b.wantText("Publish a message", "/v1/tenants/"+ws+"/messages")
	if strings.Contains(b.last, "Ack URL") {
		t.Error("a producer's secret shows an ack URL")
	}
	n.Token(id, html.UnescapeString(codeOf("client-secret").FindStringSubmatch(b.last)[1]))
	b.wantStatus("producer list", b.do("GET", base+"/producers", nil), 200)
	b.wantText("web shop", "active")
}

// TestPortalNameNotUTF8: a name whose bytes are not UTF-8 (a form can
// carry any bytes) is refused saying so, not with the length limit it
// keeps.
func TestPortalNameNotUTF8(t *testing.T) {
	_, b, ws := signedInOperator(t)
	page := "/portal/workspaces/" + ws + "/consumers"
	for path, form := range map[string]url.Values{
		"/portal/workspaces":                        {"name": {"a\xff\xfeb"}},
		"/portal/workspaces/" + ws + "/connections": {"name": {"a\xff\xfeb"}, "kind": {"consumer"}},
	} {
		b.do("GET", page, nil)
		resp := b.post(path, form)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(b.last, "name must be UTF-8 text.") || strings.Contains(b.last, "at most 128 characters") {
			t.Errorf("%s with a name not UTF-8: %d, want 400 saying the name must be UTF-8\n%s", path, resp.StatusCode, b.last)
		}
	}
}

// TestPortalTierChoicesOfNonOperators: the create form offers a
// non-operator only the tiers they may assign; "unlimited", kept for
// operators, would be refused with a 403 page that loses the form.
func TestPortalTierChoicesOfNonOperators(t *testing.T) {
	n, b, ws := signedInOperator(t)
	page := "/portal/workspaces/" + ws + "/consumers"
	unlimited := `<option value="unlimited">`
	b.wantStatus("operator's consumers", b.do("GET", page, nil), 200)
	if !strings.Contains(b.last, unlimited) {
		t.Fatalf("the operator is not offered the unlimited tier:\n%s", b.last)
	}
	svc := n.Server.Service()
	op := operatorActor(t, n)
	u, err := svc.CreateUser(context.Background(), op, bus.CreateUserParams{Name: "Dev", Email: "dev@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	setPassword(t, n, u.ID, "developer-password-123")
	if _, err := svc.SetMember(context.Background(), op, ws, u.ID, bus.RoleOwner); err != nil {
		t.Fatal(err)
	}
	d := newBrowser(t, n)
	d.wantStatus("owner sign in", d.signIn("dev@example.com", "developer-password-123"), 303)
	d.wantStatus("owner's consumers", d.do("GET", page, nil), 200)
	if strings.Contains(d.last, unlimited) || !strings.Contains(d.last, `<option value="standard">`) {
		t.Errorf("a non-operator is offered %s, or not standard:\n%s", unlimited, d.last)
	}
}

// TestPortalAttemptLimitOutOfRange: an attempt limit too large for a
// number is refused naming the limit's range, as any other out of range.
func TestPortalAttemptLimitOutOfRange(t *testing.T) {
	_, b, ws := signedInOperator(t)
	for _, v := range []string{"99999999999999999999", "-99999999999999999999", "1001"} {
		b.do("GET", "/portal/workspaces/"+ws+"/consumers", nil)
		resp := b.post("/portal/workspaces/"+ws+"/connections", url.Values{"name": {"c"}, "kind": {"consumer"}, "attempt_limit": {v}})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(b.last, "attempt_limit must be between 1 and 1000.") {
			t.Errorf("attempt limit %s: %d, want 400 naming the range\n%s", v, resp.StatusCode, b.last)
		}
	}
}

// TestPortalConnectionKindRefused: a create form naming a kind the form
// never offers is refused saying which kinds there are, not taken for a
// consumer.
func TestPortalConnectionKindRefused(t *testing.T) {
	_, b, ws := signedInOperator(t)
	for _, kind := range []string{"admin", ""} {
		b.do("GET", "/portal/workspaces/"+ws+"/consumers", nil)
		resp := b.post("/portal/workspaces/"+ws+"/connections", url.Values{"name": {"k"}, "kind": {kind}})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(b.last, `kind must be &#34;consumer&#34; or &#34;producer&#34;.`) {
			t.Errorf("kind %q: %d, want 400 naming the kinds\n%s", kind, resp.StatusCode, b.last)
		}
	}
	b.wantStatus("consumers", b.do("GET", "/portal/workspaces/"+ws+"/consumers", nil), 200)
	if strings.Contains(b.last, "<bdi>k</bdi></a>") {
		t.Errorf("a connection was created with a kind the form does not offer:\n%s", b.last)
	}
}

// TestPortalNamesIsolated: names are shown inside <bdi>, so that a name in
// a right-to-left script (or one stored before its bidirectional controls
// were refused) does not reorder the sentence around it.
func TestPortalNamesIsolated(t *testing.T) {
	n, b, _ := signedInOperator(t)
	name := "طلبات 2"
	ws := n.Workspace(name)
	page := "/portal/workspaces/" + ws
	b.wantStatus("workspace", b.do("GET", page, nil), 200)
	if !strings.Contains(b.last, "<h1><bdi>"+name+"</bdi></h1>") {
		t.Errorf("the workspace's name is not isolated in its title:\n%s", b.last)
	}
	b.wantStatus("consumers", b.do("GET", page+"/consumers", nil), 200)
	resp := b.post(page+"/connections", url.Values{"name": {name}, "kind": {"consumer"}})
	b.wantStatus("create", resp, http.StatusSeeOther)
	b.wantStatus("connection", b.do("GET", resp.Header.Get("Location"), nil), 200)
	if !strings.Contains(b.last, "<strong><bdi>"+name+"</bdi></strong>, to remove") {
		t.Errorf("the name in the removal's label is not isolated:\n%s", b.last)
	}
}

// nextPage is the cursor of the last page's "Next page" link ("" without
// one).
func (b *browser) nextPage() string {
	b.t.Helper()
	m := regexp.MustCompile(`href="[^"]*\?cursor=([^"&]+)">Next page</a>`).FindStringSubmatch(b.last)
	if m == nil {
		return ""
	}
	c, err := url.QueryUnescape(html.UnescapeString(m[1]))
	if err != nil {
		b.t.Fatal(err)
	}
	return c
}

// TestPortalNextPage: the connections and dead-letter pages page with the
// listing's cursor: "Next page" shows the rest, every item once; the
// cursor is refused on another kind's or another connection's page, and a
// made-up one is refused.
func TestPortalNextPage(t *testing.T) {
	n, b, _ := signedInOperator(t)
	p := n.NewPair(map[string]any{"attempt_limit": 1})
	base := "/portal/workspaces/" + p.WS
	other := n.Connection(p.WS, "consumer", nil)
	want := map[string]int{p.Consumer: 0, other: 0}
	for len(want) < 52 {
		want[n.Connection(p.WS, "consumer", nil)] = 0
	}
	ids := regexp.MustCompile(`<code class="small">(c[a-z2-7]{26})</code>`)
	b.wantStatus("consumers", b.do("GET", base+"/consumers", nil), 200)
	for page := 1; ; page++ {
		for _, m := range ids.FindAllStringSubmatch(b.last, -1) {
			want[m[1]]++
		}
		next := b.nextPage()
		if next == "" {
			if page != 2 {
				t.Errorf("%d consumer pages, want 2", page)
			}
			break
		}
		b.wantStatus("producers with a consumers cursor", b.do("GET", base+"/producers?cursor="+url.QueryEscape(next), nil), 400)
		b.wantStatus("next consumers", b.do("GET", base+"/consumers?cursor="+url.QueryEscape(next), nil), 200)
	}
	for id, seen := range want {
		if seen != 1 {
			t.Errorf("consumer %s shown %d times", id, seen)
		}
	}
	b.wantStatus("made-up cursor", b.do("GET", base+"/consumers?cursor=MC4w", nil), 400)

	// 52 dead letters, each its own story.
	var envs []any
	for i := range 52 {
		envs = append(envs, servertest.Envelope(fmt.Sprintf("m-%02d", i), fmt.Sprintf("s-%02d", i), nil))
	}
	n.PublishBatch(p, envs).Must(t, 200)
	for n.QueueCounts(p).DeadLetters < 52 {
		var hs []string
		for _, m := range n.Receive(p, "max=10&wait=0") {
			hs = append(hs, m.ReceiptHandle)
		}
		if len(hs) > 0 {
			n.Settle(p, "nack", hs, nil).Must(t, 200)
		}
	}
	dl := base + "/connections/" + p.Consumer + "/dead-letters"
	b.wantStatus("dead letters", b.do("GET", dl, nil), 200)
	seen := map[string]int{}
	msgs := regexp.MustCompile(`<code>(m-\d\d)</code>`)
	for page := 1; ; page++ {
		for _, m := range msgs.FindAllStringSubmatch(b.last, -1) {
			seen[m[1]]++
		}
		next := b.nextPage()
		if next == "" {
			if page != 2 {
				t.Errorf("%d dead-letter pages, want 2", page)
			}
			break
		}
		b.wantStatus("another connection's dead letters with this cursor",
			b.do("GET", base+"/connections/"+other+"/dead-letters?cursor="+url.QueryEscape(next), nil), 400)
		b.wantStatus("next dead letters", b.do("GET", dl+"?cursor="+url.QueryEscape(next), nil), 200)
		b.wantText("First page")
	}
	if len(seen) != 52 {
		t.Errorf("%d dead letters shown, want 52", len(seen))
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("dead letter %s shown %d times", id, k)
		}
	}
	b.wantStatus("made-up dead-letter cursor", b.do("GET", dl+"?cursor=1", nil), 400)
}
