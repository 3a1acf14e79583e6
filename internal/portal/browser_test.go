package portal_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/portal/portaltest"
	"github.com/sombus/sombus/internal/server/servertest"
)

func TestMain(m *testing.M) { portaltest.Main(m) }

// TestBrowserSignInAndOut: a visitor is sent to the sign-in page, a wrong
// password is refused in place, the right one opens the portal, and
// signing out ends the session.
func TestBrowserSignInAndOut(t *testing.T) {
	t.Parallel()
	e := portaltest.Start(t)
	e.Go("/portal/")
	if e.Path() != "/portal/signin" {
		t.Fatalf("signed out, /portal/ shows %s, want the sign-in page", e.Path())
	}
	e.Screenshot("signin")
	e.SignIn(portaltest.OperatorEmail, "not the password at all")
	e.WantText("Wrong email or password.")
	if got := portaltest.Eval[string](e, `document.querySelector("#email").value`); got != portaltest.OperatorEmail {
		t.Errorf("after a refusal the email field holds %q, want it kept", got)
	}
	e.SignIn(portaltest.OperatorEmail, portaltest.OperatorPassword)
	if e.Path() != "/portal/" {
		t.Fatalf("after signing in: %s", e.URL())
	}
	e.WantText("Workspaces", "No workspaces yet", "Create a workspace", "operator")
	e.Screenshot("workspaces-empty")

	e.SignOut()
	e.WantText("You are signed out.")
	e.Go("/portal/")
	if e.Path() != "/portal/signin" {
		t.Fatalf("after signing out, /portal/ shows %s", e.Path())
	}
}

// TestBrowserWorkspacesAndMembers: an operator creates a workspace, and its
// owner adds, changes and removes a member; a refusal is shown in place.
func TestBrowserWorkspacesAndMembers(t *testing.T) {
	t.Parallel()
	e := portaltest.Start(t)
	adaID, _ := e.User("Ada Lovelace", "ada@example.com", false, "")
	e.SignIn(portaltest.OperatorEmail, portaltest.OperatorPassword)

	e.Fill("#ws-name", "   ")
	e.ClickAndWait("#create-workspace")
	e.WantText("name is required.")
	e.Fill("#ws-name", "Payments")
	e.ClickAndWait("#create-workspace")
	e.WantText("Workspace created", "Payments", "Members", "operator@localhost")
	ws := strings.TrimPrefix(e.Path(), "/portal/workspaces/")

	e.Fill("#member-email", "nobody@example.com")
	e.ClickAndWait("#add-member button")
	e.WantText("No user has the email nobody@example.com")
	e.Fill("#member-email", "ADA@example.com")
	e.Select("#member-role", "developer")
	e.ClickAndWait("#add-member button")
	e.WantText("Role saved.", "Ada Lovelace", "ada@example.com")
	if got := portaltest.Eval[string](e, `document.querySelector("#role-`+adaID+`").value`); got != "developer" {
		t.Fatalf("Ada's role shows %q, want developer", got)
	}
	e.Screenshot("workspace-members")

	e.Select("#role-"+adaID, "admin")
	e.ClickAndWait("#m-" + adaID + ` button[data-action="change-role"]`)
	e.WantText("Role saved.")
	// The operator may not leave the workspace without an owner: refused
	// in place, next to their row.
	e.Select("#role-"+e.OperatorID, "viewer")
	e.ClickAndWait("#m-" + e.OperatorID + ` button[data-action="change-role"]`)
	e.WantText("last owner")
	e.ClickAndWait("#m-" + adaID + ` button[data-action="remove-member"]`)
	e.WantText("Member removed.")
	if e.Has("#m-" + adaID) {
		t.Fatal("Ada is still listed after her removal")
	}

	// The audit log has the changes, by the signed-in operator.
	var page struct {
		Entries []struct{ Actor, Action string } `json:"entries"`
	}
	e.Node.Do("GET", "/v1/manage/workspaces/"+ws+"/audit", servertest.BootstrapKey, nil).Must(t, 200).Decode(t, &page)
	var actions []string
	for _, en := range page.Entries {
		if en.Actor != e.OperatorID {
			t.Errorf("audit entry %s by %s, want the signed-in operator %s", en.Action, en.Actor, e.OperatorID)
		}
		actions = append(actions, en.Action)
	}
	if got := strings.Join(actions, " "); got != "member.remove member.set member.set workspace.create" {
		t.Errorf("audit actions %q", got)
	}

	e.Go("/portal/")
	e.WantText("Payments", "owner")
}

// TestBrowserCSRF: a form posted without its CSRF token, or with a wrong
// one, is refused with a page that says so, and changes nothing.
func TestBrowserCSRF(t *testing.T) {
	t.Parallel()
	e := portaltest.Start(t)
	e.SignIn(portaltest.OperatorEmail, portaltest.OperatorPassword)
	good := e.CSRF()
	for name, fields := range map[string]map[string]string{
		"without": {"name": "forged"},
		"wrong":   {"name": "forged", "csrf": changeLast(good)},
		"other":   {"name": "forged", "csrf": bus.NewToken()},
	} {
		e.Go("/portal/")
		e.ForceForm("/portal/workspaces", fields)
		e.WantText("Form refused", "nothing was changed", "Status 403")
		if name == "without" {
			e.Screenshot("csrf-refused")
		}
	}
	// Also when the page's own form has its token changed.
	e.Go("/portal/")
	portaltest.Eval[bool](e, `document.querySelector('form[action="/portal/workspaces"] input[name="csrf"]').value = "tampered", true`)
	e.Fill("#ws-name", "forged")
	e.ClickAndWait("#create-workspace")
	e.WantText("Form refused")
	e.Go("/portal/")
	e.WantText("No workspaces yet")
	// The sign-out form is a form too.
	e.ForceForm("/portal/signout", map[string]string{})
	e.WantText("Form refused")
	e.Go("/portal/")
	if e.Path() != "/portal/" {
		t.Fatal("a sign-out without its token signed out")
	}
}

// TestBrowserExpiredSession: an hour without use ends the session; the
// next page sends the user to sign in, and back to that page after.
func TestBrowserExpiredSession(t *testing.T) {
	t.Parallel()
	e := portaltest.Start(t)
	e.SignIn(portaltest.OperatorEmail, portaltest.OperatorPassword)
	e.Advance(59 * time.Minute)
	e.Go("/portal/password")
	if e.Path() != "/portal/password" {
		t.Fatalf("within the idle hour: %s", e.URL())
	}
	e.Advance(time.Hour)
	e.Go("/portal/password")
	if e.Path() != "/portal/signin" {
		t.Fatalf("after an idle hour: %s, want the sign-in page", e.URL())
	}
	e.WantText("Your session ended")
	e.SignIn(portaltest.OperatorEmail, portaltest.OperatorPassword)
	if e.Path() != "/portal/password" {
		t.Fatalf("after signing in again: %s, want back on /portal/password", e.URL())
	}
	// A form posted after the session ended changes nothing either.
	e.Advance(2 * time.Hour)
	e.Fill("#current-password", portaltest.OperatorPassword)
	e.Fill("#new-password", "a brand new password")
	e.Fill("#confirm-password", "a brand new password")
	e.ClickAndWait("#save-password")
	if e.Path() != "/portal/signin" {
		t.Fatalf("a form after the session ended: %s", e.URL())
	}
	e.SignIn(portaltest.OperatorEmail, portaltest.OperatorPassword)
	if e.Path() != "/portal/" {
		t.Fatalf("the old password no longer signs in: %s", e.URL())
	}
}

// TestBrowserViewerForcesOwnerButton: a viewer sees no owner's buttons, and
// the server refuses the owner's actions when the viewer forces them into
// the page.
func TestBrowserViewerForcesOwnerButton(t *testing.T) {
	t.Parallel()
	e := portaltest.Start(t)
	ws := e.Workspace("Shared")
	vicID, _ := e.User("Vic Viewer", "vic@example.com", false, "vic's portal password")
	e.Member(ws, vicID, bus.RoleViewer)

	e.SignIn("vic@example.com", "vic's portal password")
	e.WantText("Shared", "viewer")
	if e.Has("#create-workspace") {
		t.Error("a non-operator is offered to create a workspace")
	}
	e.Go("/portal/workspaces/" + ws)
	e.WantText("Members", "Vic Viewer", "operator@localhost", "Only the workspace's owners can add members")
	for _, sel := range []string{"#add-member", `button[data-action="remove-member"]`, `button[data-action="change-role"]`, "select"} {
		if e.Has(sel) {
			t.Errorf("a viewer is shown %s", sel)
		}
	}
	e.Screenshot("workspace-viewer")
	csrf := e.CSRF()
	for _, f := range []struct {
		path   string
		fields map[string]string
	}{
		{"/portal/workspaces/" + ws + "/members/" + e.OperatorID + "/remove", map[string]string{"csrf": csrf}},
		{"/portal/workspaces/" + ws + "/members/" + vicID, map[string]string{"csrf": csrf, "role": "owner"}},
		{"/portal/workspaces/" + ws + "/members", map[string]string{"csrf": csrf, "email": "vic@example.com", "role": "owner"}},
		{"/portal/workspaces", map[string]string{"csrf": csrf, "name": "Vic's own"}},
	} {
		e.Go("/portal/workspaces/" + ws)
		e.ForceForm(f.path, f.fields)
		e.WantText("Not allowed", "Status 403")
	}
	// Nothing changed.
	var m []struct{ UserID, Role string }
	svc := e.Node.Server.Service()
	a, err := svc.AuthenticateAPIKey(t.Context(), servertest.BootstrapKey)
	if err != nil {
		t.Fatal(err)
	}
	members, err := svc.ListMembers(t.Context(), a, ws)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range members {
		m = append(m, struct{ UserID, Role string }{x.UserID, string(x.Role)})
	}
	if len(m) != 2 || m[0].UserID != e.OperatorID || m[0].Role != "owner" || m[1].UserID != vicID || m[1].Role != "viewer" {
		t.Fatalf("members after the forced forms: %+v", m)
	}
	// Another workspace in the URL is not found, as for the API.
	other := e.Workspace("Not Vic's")
	e.Go("/portal/workspaces/" + other)
	e.WantText("Not found", "Workspace "+other+" not found.")
}

// TestBrowserPassword: a password set through the management route (as the
// CLI does) signs in; the user changes it on the password page, which ends
// their other sessions, and only the new one signs in after.
func TestBrowserPassword(t *testing.T) {
	t.Parallel()
	e := portaltest.Start(t)
	adaID, adaKey := e.User("Ada", "ada@example.com", false, "")
	e.SignIn("ada@example.com", "no password was set yet")
	e.WantText("Wrong email or password.")
	e.SetPassword(adaKey, adaID, "ada sets this with her key")
	e.SignIn("ada@example.com", "ada sets this with her key")
	e.WantText("You are not in any workspace yet", "ada@example.com")
	e.Screenshot("workspaces-none")

	// A second session of Ada's (through the HTTP client) ends when she
	// changes her password in the browser.
	other, _, err := e.Node.Server.Service().SignIn(t.Context(), "ada@example.com", "ada sets this with her key",
		bus.SessionPolicy{Idle: time.Hour, Absolute: 12 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}

	e.Go("/portal/password")
	e.Screenshot("password")
	e.Fill("#current-password", "not my password at all")
	e.Fill("#new-password", "ada's new long password")
	e.Fill("#confirm-password", "ada's new long password")
	e.ClickAndWait("#save-password")
	e.WantText("Your current password is wrong.")
	e.Fill("#current-password", "ada sets this with her key")
	e.Fill("#new-password", "too short")
	e.Fill("#confirm-password", "too short")
	e.ClickAndWait("#save-password")
	e.WantText("at least 12 characters")
	e.Fill("#current-password", "ada sets this with her key")
	e.Fill("#new-password", "ada's new long password")
	e.Fill("#confirm-password", "ada's new long passwore")
	e.ClickAndWait("#save-password")
	e.WantText("The two passwords differ")
	e.Fill("#current-password", "ada sets this with her key")
	e.Fill("#new-password", "ada's new long password")
	e.Fill("#confirm-password", "ada's new long password")
	e.ClickAndWait("#save-password")
	e.WantText("Password saved.")
	if _, _, err := e.Node.Server.Service().AuthenticateSession(t.Context(), other,
		bus.SessionPolicy{Idle: time.Hour, Absolute: 12 * time.Hour}); err == nil {
		t.Error("Ada's other session survived the password change")
	}
	// This session goes on.
	e.Go("/portal/")
	if e.Path() != "/portal/" {
		t.Fatalf("the session that changed the password ended: %s", e.URL())
	}
	e.SignOut()
	e.SignIn("ada@example.com", "ada sets this with her key")
	e.WantText("Wrong email or password.")
	e.SignIn("ada@example.com", "ada's new long password")
	if e.Path() != "/portal/" {
		t.Fatalf("the new password does not sign in: %s", e.URL())
	}
}

// TestBrowserFormsAreSentOnce: a second submit of a form already sent (a
// double click while the answer is on its way) is dropped, shown with a
// pair of submit events; and with the script in place a real double click
// on Create still sends the first (one connection is made, not two). Here
// the answer comes back within milliseconds and Chrome drops a click on
// the page it left, so the double click alone would pass without the
// script; against a slow server it would not.
func TestBrowserFormsAreSentOnce(t *testing.T) {
	t.Parallel()
	e := portaltest.Start(t)
	ws := e.Workspace("Once")
	e.SignIn(portaltest.OperatorEmail, portaltest.OperatorPassword)
	e.Go("/portal/workspaces/" + ws + "/producers")
	got := portaltest.Eval[string](e, `(() => {
		const f = document.querySelector("#create-connection");
		const a = new Event("submit", {bubbles: true, cancelable: true});
		const b = new Event("submit", {bubbles: true, cancelable: true});
		f.dispatchEvent(a);
		f.dispatchEvent(b);
		delete f.dataset.sent;
		return a.defaultPrevented + "," + b.defaultPrevented;
	})()`)
	if got != "false,true" {
		t.Fatalf("two submits of one form: prevented %s, want false,true", got)
	}
	e.Fill("#conn-name", "twice clicked")
	portaltest.Eval[string](e, `(() => { const b = document.querySelector("#create-connection button[type=submit]"); b.click(); setTimeout(() => b.click(), 60); return "clicked"; })()`)
	count := func() int {
		var list struct {
			Connections []json.RawMessage `json:"connections"`
		}
		r := e.Node.Do("GET", "/v1/manage/workspaces/"+ws+"/connections", servertest.BootstrapKey, nil)
		if err := json.Unmarshal(r.Body, &list); err != nil {
			t.Fatal(err)
		}
		return len(list.Connections)
	}
	for deadline := time.Now().Add(10 * time.Second); count() == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the double click made no connection")
		}
	}
	time.Sleep(time.Second) // a second request, if sent, has long been answered
	if n := count(); n != 1 {
		t.Fatalf("a double click made %d connections, want 1", n)
	}
}
