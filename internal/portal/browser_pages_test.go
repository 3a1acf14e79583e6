package portal_test

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sombus/sombus/internal/portal/portaltest"
	"github.com/sombus/sombus/internal/server/servertest"
)

// axeSource is axe-core, vendored for these tests (see testdata).
//
//go:embed testdata/axe.min.js
var axeSource string

// axeViolation is one failed accessibility rule, as axe reports it.
type axeViolation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  []struct {
		Target []any `json:"target"`
	} `json:"nodes"`
}

type axeResult struct {
	Violations []axeViolation `json:"violations"`
	Passes     int            `json:"passes"`
}

// checkAccessible runs axe-core over the current page and fails the test
// on a serious or critical violation. The script goes in through the
// browser's tools, so the page's Content-Security-Policy stays as it is.
func checkAccessible(e *portaltest.Env, page string) {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(e.Tab, 60*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](axeSource+"\n;true")); err != nil {
		e.T.Fatalf("load axe-core on %s: %v", page, err)
	}
	res, err := chromedp.Run(ctx, chromedp.Evaluate[axeResult](
		`axe.run(document, {resultTypes: ["violations"]}).then(r => ({violations: r.violations, passes: r.passes.length}))`, chromedp.EvalAwaitPromise))
	if err != nil {
		e.T.Fatalf("run axe-core on %s: %v", page, err)
	}
	if res.Passes == 0 {
		e.T.Fatalf("axe-core checked nothing on %s", page)
	}
	for _, v := range res.Violations {
		if v.Impact == "serious" || v.Impact == "critical" {
			var where []string
			for _, n := range v.Nodes {
				where = append(where, fmt.Sprint(n.Target...))
			}
			e.T.Errorf("%s: %s accessibility violation %s (%s) at %s", page, v.Impact, v.ID, v.Help, strings.Join(where, ", "))
		}
	}
}

// TestBrowserConsumerConnection: in a real browser, create a consumer, get
// its secret and use it for a token through the API, rotate, stop the old
// secret, revoke and restore the connection; each main page passes axe.
func TestBrowserConsumerConnection(t *testing.T) {
	t.Parallel()
	e := portaltest.Start(t)
	ws := e.Workspace("Shop")
	e.SignIn(portaltest.OperatorEmail, portaltest.OperatorPassword)

	e.Go("/portal/")
	checkAccessible(e, "workspaces")
	e.Go("/portal/workspaces/" + ws)
	checkAccessible(e, "members")
	e.Go("/portal/workspaces/" + ws + "/consumers")
	e.WantText("No consumer connections yet")
	checkAccessible(e, "consumers (empty)")
	e.Fill("#conn-name", "order worker")
	e.Fill("#conn-subs", "som.orders.>")
	e.Fill("#conn-attempts", "3")
	e.ClickAndWait("#create-connection button[type=submit]")
	e.WantText("Connection created", "order worker", "som.orders.>", "Queue over the last hour")
	id := strings.TrimPrefix(e.Path(), "/portal/workspaces/"+ws+"/connections/")
	checkAccessible(e, "connection")
	e.Screenshot("connection")

	e.ClickAndWait("#get-secret")
	e.WantText("Your new client secret", "Try it with curl", "/consumers/"+id+"/messages")
	secret := e.Text("#client-secret")
	if secret == "" || !strings.Contains(e.Text("#cmd-token"), secret) {
		t.Fatalf("the secret shown is not in the token command (%d characters)", len(e.Text("#cmd-token")))
	}
	e.Node.Token(id, secret)
	checkAccessible(e, "connection with a new secret")
	e.Screenshot("connection-secret")

	e.Go("/portal/workspaces/" + ws + "/connections/" + id)
	if strings.Contains(e.Body(), secret) {
		t.Fatal("the secret shows again after leaving the page")
	}
	e.Select("#overlap", "3d")
	e.ClickAndWait("#rotate")
	e.WantText("Secret rotated")
	rotated := e.Text("#client-secret")
	e.Node.Token(id, rotated)
	e.Node.Token(id, secret) // the old one still works for 3 days

	e.Go("/portal/workspaces/" + ws + "/connections/" + id)
	e.ClickAndWait("#stop-previous")
	e.WantText("The old secret stopped working")
	e.Node.TokenResponse(id, secret).Must(t, 401)
	e.Node.Token(id, rotated)

	e.ClickAndWait("#revoke-connection")
	e.WantText("Connection revoked", "Restore connection")
	e.ClickAndWait("#restore-connection")
	e.WantText("Connection restored")
	e.Node.Token(id, rotated)

	e.Go("/portal/workspaces/" + ws + "/consumers")
	e.WantText("order worker", "active")
	checkAccessible(e, "consumers")
	e.Screenshot("consumers")
	e.Go("/portal/workspaces/" + ws + "/producers")
	checkAccessible(e, "producers (empty)")

	// Remove asks for the name.
	e.Go("/portal/workspaces/" + ws + "/connections/" + id)
	e.Fill("#confirm-name", "order")
	e.ClickAndWait("#remove-connection")
	e.WantText("Type the connection's name")
	e.Fill("#confirm-name", "order worker")
	e.ClickAndWait("#remove-connection")
	e.WantText("Connection removed", "No consumer connections yet")
}

// TestBrowserDeadLetters: a message that exhausts its attempts is
// redriven from the dead-letter page; the queue is purged; the audit log
// is filtered; another workspace's connection in the URL is not found.
func TestBrowserDeadLetters(t *testing.T) {
	t.Parallel()
	e := portaltest.Start(t)
	n := e.Node
	p := n.NewPair(map[string]any{"attempt_limit": 1})
	other := n.NewPair(nil)
	e.SignIn(portaltest.OperatorEmail, portaltest.OperatorPassword)
	n.Publish(p, servertest.Envelope("order-17", "story-17", map[string]any{"sku": "A-1"})).Must(t, 202)
	msgs := n.Receive(p, "max=10&wait=0")
	if len(msgs) != 1 {
		t.Fatalf("received %d messages", len(msgs))
	}
	n.Settle(p, "nack", []string{msgs[0].ReceiptHandle}, nil).Must(t, 200)
	n.Receive(p, "max=10&wait=0") // its one attempt is spent: a dead letter

	conn := "/portal/workspaces/" + p.WS + "/connections/" + p.Consumer
	e.Go(conn)
	e.WantText("Dead letters")
	e.ClickAndWait(`a[href$="/dead-letters"].btn`)
	e.WantText("Dead letters of", "order-17", "Deliveries")
	e.Do(chromedp.Click(chromedp.CSS("li.deadletter summary"))) // open the envelope
	if env := e.Text("li.deadletter pre"); !strings.Contains(env, `"sku": "A-1"`) {
		t.Fatalf("envelope not pretty-printed: %q", env)
	}
	checkAccessible(e, "dead letters")
	e.Screenshot("dead-letters")
	e.ClickAndWait(`button[name="message_id"][value="order-17"]`)
	e.WantText("Redriven", "No dead letters")
	got := n.Receive(p, "max=10&wait=0")
	if len(got) != 1 || got[0].MessageID() != "order-17" || got[0].ReceiveCount != 1 {
		t.Fatalf("after redrive received %+v", got)
	}
	checkAccessible(e, "dead letters (empty)")

	e.ClickAndWait("#purge")
	e.WantText("Queue purged")
	if st := n.QueueCounts(p); st.Ready+st.InFlight != 0 {
		t.Fatalf("after purge: %+v", st)
	}

	// The audit log, filtered by action.
	e.Go("/portal/workspaces/" + p.WS + "/audit")
	e.WantText("dead_letters.redrive", "queue.purge", "secret.issue")
	checkAccessible(e, "audit log")
	e.Screenshot("audit")
	e.Select("#f-action", "queue.purge")
	e.ClickAndWait("#apply-filter")
	if rows := e.Count("table.audit tbody tr"); rows != 1 || !strings.Contains(e.Text("table.audit"), "queue.purge") {
		t.Fatalf("filtered audit log has %d rows: %s", rows, e.Text("table.audit"))
	}
	e.Select("#f-conn", p.Producer)
	e.ClickAndWait("#apply-filter")
	e.WantText("No entries")

	// A viewer forcing an admin's button into the page is refused.
	vid, _ := e.User("Vic Viewer", "vic@example.com", false, "viewer-password-123")
	e.Member(p.WS, vid, "viewer")
	e.SignOut()
	e.SignIn("vic@example.com", "viewer-password-123")
	e.Go(conn + "/dead-letters")
	if e.Has("#purge") || e.Has("#redrive-all") {
		t.Fatal("a viewer sees the purge or redrive buttons")
	}
	n.Publish(p, servertest.Envelope("order-18", "story-18", nil)).Must(t, 202)
	e.ForceForm(conn+"/purge", map[string]string{"csrf": e.CSRF()})
	e.WantText("Not allowed")
	if st := n.QueueCounts(p); st.Ready != 1 {
		t.Fatalf("a viewer's forced purge changed the queue: %+v", st)
	}
	e.SignOut()
	e.SignIn(portaltest.OperatorEmail, portaltest.OperatorPassword)

	// Another workspace's connection under this workspace's address.
	e.Go("/portal/workspaces/" + p.WS + "/connections/" + other.Consumer)
	e.WantText("Not found")
	e.Go("/portal/workspaces/" + p.WS + "/connections/" + other.Consumer + "/dead-letters")
	e.WantText("Not found")
}
