package httpapi_test

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

var roles = []bus.Role{bus.RoleViewer, bus.RoleDeveloper, bus.RoleAdmin, bus.RoleOwner}

// below is the role just below r ("" for viewer: a non-member).
func below(r bus.Role) bus.Role {
	i := slices.Index(roles, r)
	if i <= 0 {
		return ""
	}
	return roles[i-1]
}

// TestManageRoles runs every workspace route of the HTTP contract with the role it
// needs (success), the role just below (403 manage.forbidden, or 404 for a
// non-member), no key, a bad key, a non-member, and another workspace's ids;
// no refused call writes anything.
func TestManageRoles(t *testing.T) {
	t.Parallel()
	n := start(t)
	other := n.workspace(t, opKey, "other")
	otherConn := n.connection(t, other, "consumer", nil)
	keys := map[bus.Role]string{}
	userIDs := map[bus.Role]string{}
	for _, r := range roles {
		userIDs[r], keys[r] = n.user(t, "user "+string(r), false)
	}
	_, outsider := n.user(t, "outsider", false)
	keys[""] = outsider
	_, readerOp := n.user(t, "reading operator", true) // an operator with no role in ws

	type route struct {
		method, path string // path under /v1/manage/workspaces/{t}; {c} and {u} are filled in
		min          bus.Role
		body         any
		want         int
		action       string // the audit action of a change ("" writes nothing here)
		secret       bool   // the connection needs an active secret
		producer     bool
	}
	routes := []route{
		{method: "GET", path: "", min: bus.RoleViewer, want: 200},
		{method: "PUT", path: "/members/{u}", min: bus.RoleOwner, body: map[string]any{"role": "developer"}, action: "member.set", want: 200},
		{method: "DELETE", path: "/members/{u}", min: bus.RoleOwner, action: "member.remove", want: 204},
		{method: "POST", path: "/connections", min: bus.RoleAdmin, body: map[string]any{"kind": "consumer", "name": "new"}, action: "connection.create", want: 201},
		{method: "GET", path: "/connections", min: bus.RoleViewer, want: 200},
		{method: "GET", path: "/connections?kind=consumer", min: bus.RoleViewer, want: 200},
		{method: "GET", path: "/connections/{c}", min: bus.RoleViewer, want: 200},
		{method: "PATCH", path: "/connections/{c}", min: bus.RoleAdmin, body: map[string]any{"name": "renamed"}, action: "connection.update", want: 200},
		{method: "DELETE", path: "/connections/{c}", min: bus.RoleAdmin, action: "connection.remove", want: 204},
		{method: "POST", path: "/connections/{c}/secret", min: bus.RoleDeveloper, action: "secret.issue", want: 201},
		{method: "POST", path: "/connections/{c}/secret/rotate", min: bus.RoleDeveloper, body: map[string]any{"overlap": "1h"}, action: "secret.rotate", want: 201, secret: true},
		{method: "POST", path: "/connections/{c}/secret/stop-previous", min: bus.RoleDeveloper, want: 200, secret: true},
		{method: "POST", path: "/connections/{c}/secret/revoke", min: bus.RoleDeveloper, action: "secret.revoke", want: 200, secret: true},
		{method: "POST", path: "/connections/{c}/revoke", min: bus.RoleAdmin, action: "connection.revoke", want: 200},
		{method: "POST", path: "/connections/{c}/restore", min: bus.RoleAdmin, want: 200},
		{method: "GET", path: "/connections/{c}/dead-letters", min: bus.RoleViewer, want: 200},
		{method: "POST", path: "/connections/{c}/dead-letters/redrive", min: bus.RoleDeveloper, action: "dead_letters.redrive", want: 200},
		{method: "POST", path: "/connections/{c}/purge", min: bus.RoleAdmin, action: "queue.purge", want: 200},
		{method: "PUT", path: "/connections/{c}/skills", min: bus.RoleAdmin, body: map[string]any{"registrations": []any{}}, action: "skills.update", want: 200},
		{method: "GET", path: "/connections/{c}/skills", min: bus.RoleViewer, want: 200},
		{method: "GET", path: "/connections/{c}/usage", min: bus.RoleViewer, want: 200},
		{method: "GET", path: "/audit", min: bus.RoleAdmin, want: 200},
		{method: "POST", path: "/connections/{c}/secret", min: bus.RoleDeveloper, action: "secret.issue", want: 201, producer: true},
		{method: "PATCH", path: "/connections/{c}", min: bus.RoleAdmin, body: map[string]any{"name": "renamed"}, action: "connection.update", want: 200, producer: true},
	}
	for _, rt := range routes {
		name := rt.method + " " + rt.path
		if rt.producer {
			name += " (producer)"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// A workspace of its own, so that its audit log is the subtest's.
			ws := n.workspace(t, opKey, "roles")
			for _, r := range roles {
				n.member(t, ws, userIDs[r], r)
			}
			kind := "consumer"
			if rt.producer {
				kind = "producer"
			}
			c := n.connection(t, ws, kind, nil)
			if rt.secret {
				n.issue(t, ws, c.ID)
			}
			target, _ := n.user(t, "target", false)
			n.member(t, ws, target, bus.RoleViewer)
			fill := func(ws, c string) string {
				p := strings.ReplaceAll(rt.path, "{c}", c)
				p = strings.ReplaceAll(p, "{u}", target)
				return "/v1/manage/workspaces/" + ws + p
			}
			path := fill(ws, c.ID)
			before := len(n.auditLog(t, ws))

			wantRefusal(t, n.do(t, rt.method, path, "", rt.body), 401, "manage.unauthenticated")
			wantRefusal(t, n.do(t, rt.method, path, "sbk_not-a-key", rt.body), 401, "manage.unauthenticated")
			r := n.raw(t, rt.method, path, nil, map[string]string{"Authorization": "Basic " + opKey})
			wantRefusal(t, r, 401, "manage.unauthenticated")
			wantRefusal(t, n.do(t, rt.method, path, outsider, rt.body), 404, "manage.not_found")
			if b := below(rt.min); b != "" {
				msg := wantRefusal(t, n.do(t, rt.method, path, keys[b], rt.body), 403, "manage.forbidden")
				wantMessage(t, msg, string(rt.min))
			}
			// Another workspace's ids are not found, even for its owner.
			if strings.Contains(rt.path, "{c}") {
				wantRefusal(t, n.do(t, rt.method, fill(ws, otherConn.ID), keys[bus.RoleOwner], rt.body), 404, "manage.not_found")
			}
			wantRefusal(t, n.do(t, rt.method, fill(other, c.ID), keys[bus.RoleOwner], rt.body), 404, "manage.not_found")
			// An operator with no role may read, nothing more.
			r = n.do(t, rt.method, path, readerOp, rt.body)
			if rt.min == bus.RoleViewer {
				r.Must(t, rt.want)
			} else {
				wantRefusal(t, r, 403, "manage.forbidden")
			}
			// Unknown query parameters are refused (decision 23).
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			msg := wantRefusal(t, n.do(t, rt.method, path+sep+"bogus=1", keys[rt.min], rt.body), 400, "manage.bad_request")
			wantMessage(t, msg, "bogus")
			if after := len(n.auditLog(t, ws)); after != before {
				t.Fatalf("refused calls wrote %d audit entries", after-before)
			}
			n.do(t, rt.method, path, keys[rt.min], rt.body).Must(t, rt.want)
			es := n.auditLog(t, ws)
			if rt.action != "" && (len(es) != before+1 || es[0].Action != rt.action || es[0].Actor != userIDs[rt.min]) {
				t.Errorf("audit after the change: %+v, want one %s by %s", es[:len(es)-before], rt.action, userIDs[rt.min])
			}
			if rt.action == "" && len(es) != before {
				t.Errorf("%s wrote %v", name, actions(es[:len(es)-before]))
			}
			// Roles above the minimum pass too (reads only: changes are not repeatable).
			if rt.method == "GET" {
				for _, r := range roles[slices.Index(roles, rt.min):] {
					n.do(t, rt.method, path, keys[r], nil).Must(t, rt.want)
				}
			}
		})
	}
	t.Cleanup(func() {
		if got := len(n.auditLog(t, other)); got != 2 { // workspace.create, connection.create
			t.Errorf("the other workspace's audit log has %d entries, want 2: %v", got, actions(n.auditLog(t, other)))
		}
	})
}

// TestOperatorRoutes: users, keys and workspaces are for operators.
func TestOperatorRoutes(t *testing.T) {
	t.Parallel()
	n := start(t)
	ownerID, owner := n.user(t, "owner", false)
	ws := n.workspace(t, opKey, "ws")
	n.member(t, ws, ownerID, bus.RoleOwner)

	for _, c := range []struct {
		path string
		body any
	}{
		{"/v1/manage/users", map[string]any{"name": "x", "email": "x@example.com"}},
		{"/v1/manage/users/" + ownerID + "/keys", nil},
		{"/v1/manage/workspaces", map[string]any{"name": "x"}},
	} {
		wantRefusal(t, n.do(t, "POST", c.path, owner, c.body), 403, "manage.forbidden")
		wantRefusal(t, n.do(t, "POST", c.path, "", c.body), 401, "manage.unauthenticated")
	}
	wantRefusal(t, n.do(t, "POST", "/v1/manage/users/u"+strings.Repeat("a", 26)+"/keys", opKey, nil), 404, "manage.not_found")

	// An operator made by an operator can do operator things.
	_, op2 := n.user(t, "second operator", true)
	ws2 := n.workspace(t, op2, "by op2")
	var who struct {
		User  bus.User       `json:"user"`
		Roles []bus.RoleView `json:"roles"`
	}
	n.do(t, "GET", "/v1/manage/whoami", op2, nil).Must(t, 200).Decode(t, &who)
	if !who.User.Operator || len(who.Roles) != 1 || who.Roles[0].WorkspaceID != ws2 || who.Roles[0].Role != bus.RoleOwner {
		t.Fatalf("whoami of the creator: %+v", who)
	}
	n.do(t, "GET", "/v1/manage/whoami", owner, nil).Must(t, 200).Decode(t, &who)
	if who.User.Operator || who.User.ID != ownerID || len(who.Roles) != 1 || who.Roles[0].Role != bus.RoleOwner {
		t.Fatalf("whoami of an owner: %+v", who)
	}
	wantRefusal(t, n.do(t, "GET", "/v1/manage/whoami", "", nil), 401, "manage.unauthenticated")

	// Listing: members see theirs, operators every workspace.
	list := func(key string) []string {
		var l struct {
			Workspaces []bus.Workspace `json:"workspaces"`
		}
		n.do(t, "GET", "/v1/manage/workspaces", key, nil).Must(t, 200).Decode(t, &l)
		var ids []string
		for _, w := range l.Workspaces {
			ids = append(ids, w.ID)
		}
		return ids
	}
	if got := list(owner); !slices.Equal(got, []string{ws}) {
		t.Errorf("owner lists %v, want [%s]", got, ws)
	}
	if got := list(opKey); !slices.Contains(got, ws) || !slices.Contains(got, ws2) {
		t.Errorf("operator lists %v, want both", got)
	}
	_, nobody := n.user(t, "nobody", false)
	if got := list(nobody); len(got) != 0 {
		t.Errorf("a user without roles lists %v", got)
	}
	var w bus.Workspace
	n.do(t, "GET", "/v1/manage/workspaces/"+ws, owner, nil).Must(t, 200).Decode(t, &w)
	if w.ID != ws || w.Name != "ws" {
		t.Errorf("workspace: %+v", w)
	}
	wantRefusal(t, n.do(t, "GET", "/v1/manage/workspaces/"+ws2, owner, nil), 404, "manage.not_found")
	wantRefusal(t, n.do(t, "GET", "/v1/manage/workspaces/wnosuchworkspace", opKey, nil), 404, "manage.not_found")
}

// TestUsersAndKeys: an API key is shown once, works, and only its hash is kept.
func TestUsersAndKeys(t *testing.T) {
	t.Parallel()
	n := start(t)
	var u bus.User
	r := n.do(t, "POST", "/v1/manage/users", opKey, map[string]any{"name": "Ada", "email": "Ada@Example.com"}).Must(t, 201)
	r.Decode(t, &u)
	if !strings.HasPrefix(u.ID, "u") || u.Name != "Ada" || u.Email != "Ada@Example.com" || u.Operator {
		t.Fatalf("user: %s", r.Body)
	}
	// Emails are unique, case-insensitively.
	wantRefusal(t, n.do(t, "POST", "/v1/manage/users", opKey, map[string]any{"name": "Ada 2", "email": "ada@example.com"}), 409, "manage.conflict")
	for _, body := range []map[string]any{
		{"name": "", "email": "a@example.com"},
		{"name": "x", "email": "not an email"},
		{"name": "x"},
		{"name": strings.Repeat("n", 129), "email": "b@example.com"},
	} {
		wantRefusal(t, n.do(t, "POST", "/v1/manage/users", opKey, body), 400, "manage.bad_request")
	}

	var k struct {
		ID        string `json:"id"`
		APIKey    string `json:"api_key"`
		CreatedAt string `json:"created_at"`
	}
	r = n.do(t, "POST", "/v1/manage/users/"+u.ID+"/keys", opKey, nil).Must(t, 201)
	r.Decode(t, &k)
	if k.APIKey == "" || k.ID == "" {
		t.Fatalf("key: %s", r.Body)
	}
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("key answer Cache-Control = %q", r.Header.Get("Cache-Control"))
	}
	var who struct {
		User bus.User `json:"user"`
	}
	n.do(t, "GET", "/v1/manage/whoami", k.APIKey, nil).Must(t, 200).Decode(t, &who)
	if who.User.ID != u.ID {
		t.Fatalf("the new key is %s's, want %s", who.User.ID, u.ID)
	}
	// A second key works too, and the first still does.
	var k2 struct {
		APIKey string `json:"api_key"`
	}
	n.do(t, "POST", "/v1/manage/users/"+u.ID+"/keys", opKey, "{}").Must(t, 201).Decode(t, &k2)
	n.do(t, "GET", "/v1/manage/whoami", k2.APIKey, nil).Must(t, 200)
	n.do(t, "GET", "/v1/manage/whoami", k.APIKey, nil).Must(t, 200)
	// "Bearer" is case-insensitive; other schemes are refused.
	n.raw(t, "GET", "/v1/manage/whoami", nil, map[string]string{"Authorization": "bearer " + k.APIKey}).Must(t, 200)
	wantRefusal(t, n.raw(t, "GET", "/v1/manage/whoami", nil, map[string]string{"Authorization": "Token " + k.APIKey}), 401, "manage.unauthenticated")

	// Only hashes are kept: no key appears in the database files.
	db := n.storeBytes(t)
	for i, key := range []string{k.APIKey, k2.APIKey, opKey} {
		if strings.Contains(string(db), key) {
			t.Errorf("API key %d of 3 appears in the SQLite files", i+1)
		}
	}
	// No key in the audit log (user.create and key.create are not in a workspace's
	// log; the log lines hold nothing either).
	if strings.Contains(n.logs.String(), k.APIKey) {
		t.Errorf("API key in the log")
	}
	// Changes outside any workspace are audited too (in the store: no
	// workspace's log shows them), without the keys.
	var es []bus.AuditEntry
	if err := n.Server.Store().View(ctx(t), func(tx bus.Tx) error {
		var err error
		es, err = tx.AuditList("", 100, "")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Action+" "+e.Target)
		b, _ := json.Marshal(e)
		if strings.Contains(string(b), k.APIKey) || strings.Contains(string(b), k2.APIKey) || strings.Contains(string(b), opKey) {
			t.Errorf("audit entry holds a key: %s", b)
		}
	}
	want := []string{"key.create " + u.ID, "key.create " + u.ID, "user.create " + u.ID, "user.create " + n.whoami(t, opKey)}
	if !slices.Equal(got, want) {
		t.Errorf("installation audit %v, want %v", got, want)
	}
}

// TestWorkspacesAndMembers: create (creator owner), members, the last owner.
func TestWorkspacesAndMembers(t *testing.T) {
	t.Parallel()
	n := start(t)
	var w struct {
		ID        string `json:"id"`
		Name      string `json:"name"`
		CreatedAt string `json:"created_at"`
	}
	n.do(t, "POST", "/v1/manage/workspaces", opKey, map[string]any{"name": "House"}).Must(t, 201).Decode(t, &w)
	if !strings.HasPrefix(w.ID, "w") || len(w.ID) < 21 || w.Name != "House" || w.CreatedAt != "2026-09-25T10:15:02.114Z" {
		t.Fatalf("workspace: %+v", w)
	}
	for _, body := range []any{map[string]any{"name": ""}, map[string]any{"name": "   "}, map[string]any{}, map[string]any{"name": strings.Repeat("é", 129)}} {
		wantRefusal(t, n.do(t, "POST", "/v1/manage/workspaces", opKey, body), 400, "manage.bad_request")
	}
	n.do(t, "POST", "/v1/manage/workspaces", opKey, map[string]any{"name": strings.Repeat("é", 128)}).Must(t, 201)

	aliceID, alice := n.user(t, "alice", false)
	bobID, bob := n.user(t, "bob", false)
	var m bus.Member
	n.do(t, "PUT", "/v1/manage/workspaces/"+w.ID+"/members/"+aliceID, opKey, map[string]any{"role": "owner"}).Must(t, 200).Decode(t, &m)
	if m != (bus.Member{WorkspaceID: w.ID, UserID: aliceID, Role: bus.RoleOwner}) {
		t.Fatalf("member: %+v", m)
	}
	wantRefusal(t, n.do(t, "PUT", "/v1/manage/workspaces/"+w.ID+"/members/"+bobID, alice, map[string]any{"role": "boss"}), 400, "manage.bad_request")
	wantRefusal(t, n.do(t, "PUT", "/v1/manage/workspaces/"+w.ID+"/members/"+bobID, alice, map[string]any{}), 400, "manage.bad_request")
	wantRefusal(t, n.do(t, "PUT", "/v1/manage/workspaces/"+w.ID+"/members/unosuchuser", alice, map[string]any{"role": "viewer"}), 404, "manage.not_found")
	n.do(t, "PUT", "/v1/manage/workspaces/"+w.ID+"/members/"+bobID, alice, map[string]any{"role": "viewer"}).Must(t, 200)
	n.do(t, "GET", "/v1/manage/workspaces/"+w.ID, bob, nil).Must(t, 200)
	n.do(t, "PUT", "/v1/manage/workspaces/"+w.ID+"/members/"+bobID, alice, map[string]any{"role": "admin"}).Must(t, 200)

	// The operator (the creator) leaves; alice is then the last owner.
	opID := n.whoami(t, opKey)
	n.do(t, "DELETE", "/v1/manage/workspaces/"+w.ID+"/members/"+opID, alice, nil).Must(t, 204)
	wantRefusal(t, n.do(t, "DELETE", "/v1/manage/workspaces/"+w.ID+"/members/"+aliceID, alice, nil), 409, "manage.conflict")
	wantRefusal(t, n.do(t, "PUT", "/v1/manage/workspaces/"+w.ID+"/members/"+aliceID, alice, map[string]any{"role": "admin"}), 409, "manage.conflict")
	wantRefusal(t, n.do(t, "DELETE", "/v1/manage/workspaces/"+w.ID+"/members/"+opID, alice, nil), 404, "manage.not_found")
	// With a second owner, the first may step down.
	n.do(t, "PUT", "/v1/manage/workspaces/"+w.ID+"/members/"+bobID, alice, map[string]any{"role": "owner"}).Must(t, 200)
	n.do(t, "PUT", "/v1/manage/workspaces/"+w.ID+"/members/"+aliceID, alice, map[string]any{"role": "viewer"}).Must(t, 200)
	wantRefusal(t, n.do(t, "PUT", "/v1/manage/workspaces/"+w.ID+"/members/"+bobID, alice, map[string]any{"role": "viewer"}), 403, "manage.forbidden")
	n.do(t, "DELETE", "/v1/manage/workspaces/"+w.ID+"/members/"+aliceID, bob, nil).Must(t, 204)
	wantRefusal(t, n.do(t, "GET", "/v1/manage/workspaces/"+w.ID, alice, nil), 404, "manage.not_found")

	got := actions(n.auditLogAs(t, w.ID, bob))
	want := []string{"member.remove", "member.set", "member.set", "member.remove", "member.set", "member.set", "member.set", "workspace.create"}
	if !slices.Equal(got, want) {
		t.Fatalf("audit actions %v, want %v", got, want)
	}
	es := n.auditLogAs(t, w.ID, bob)
	if es[0].Actor != bobID || es[0].Target != aliceID || es[len(es)-1].Actor != opID || es[len(es)-1].Target != w.ID {
		t.Errorf("audit actors/targets: %+v", es)
	}
}

func (n *node) whoami(t testing.TB, key string) string {
	t.Helper()
	var who struct {
		User bus.User `json:"user"`
	}
	n.do(t, "GET", "/v1/manage/whoami", key, nil).Must(t, 200).Decode(t, &who)
	return who.User.ID
}

// TestConnectionsCRUD: create with defaults and validation, list, read,
// update, remove.
func TestConnectionsCRUD(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "crud")
	adminID, admin := n.user(t, "admin", false)
	n.member(t, ws, adminID, bus.RoleAdmin)

	r := n.do(t, "POST", connsPath(ws), admin, map[string]any{"kind": "consumer", "name": "reader"}).Must(t, 201)
	var c conn
	r.Decode(t, &c)
	if !strings.HasPrefix(c.ID, "c") || len(c.ID) < 21 || c.WorkspaceID != ws || c.Kind != "consumer" || c.Status != "active" ||
		c.AttemptLimit != 5 || c.QuotaTier != "standard" || c.CredentialVersion != 0 || c.Secret.State != "none" ||
		c.Secret.IssuedAt != nil || c.Subscriptions == nil || len(c.Subscriptions) != 0 || c.Ready == nil || *c.Ready != 0 {
		t.Fatalf("consumer: %s", r.Body)
	}
	var raw map[string]any
	r.Decode(t, &raw)
	for _, f := range []string{"ready", "in_flight", "delayed", "dead_letters", "oldest_ready_age_seconds"} {
		if _, ok := raw[f]; !ok {
			t.Errorf("consumer without %s", f)
		}
	}
	p := n.do(t, "POST", connsPath(ws), admin, map[string]any{"kind": "producer", "name": "writer"}).Must(t, 201)
	raw = nil
	p.Decode(t, &raw)
	if _, ok := raw["ready"]; ok {
		t.Errorf("producer with queue counts: %s", p.Body)
	}
	var pc conn
	p.Decode(t, &pc)

	// Validation, each refused with the field named.
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"kind": "consumer", "name": "x", "attempt_limit": 0}, "attempt_limit"},
		{map[string]any{"kind": "consumer", "name": "x", "attempt_limit": 1001}, "attempt_limit"},
		{map[string]any{"kind": "consumer", "name": "x", "attempt_limit": -1}, "attempt_limit"},
		{map[string]any{"kind": "consumer", "name": "x", "attempt_limit": 1.5}, "attempt_limit"},
		{map[string]any{"kind": "producer", "name": "x", "attempt_limit": 3}, "attempt_limit"},
		{map[string]any{"kind": "consumer", "name": "x", "quota_tier": "gold"}, "quota_tier"},
		{map[string]any{"kind": "robot", "name": "x"}, "kind"},
		{map[string]any{"name": "x"}, "kind"},
		{map[string]any{"kind": "consumer"}, "name"},
		{map[string]any{"kind": "consumer", "name": ""}, "name"},
		{map[string]any{"kind": "consumer", "name": "x", "subscriptions": []any{map[string]any{"topic": "som..x"}}}, "subscriptions[0].topic"},
		{map[string]any{"kind": "consumer", "name": "x", "subscriptions": []any{map[string]any{"topic": "som.>.x"}}}, "subscriptions[0].topic"},
		{map[string]any{"kind": "consumer", "name": "x", "subscriptions": []any{map[string]any{"topic": "som.*"}, map[string]any{"topic": "Som.X"}}}, "subscriptions[1].topic"},
		{map[string]any{"kind": "consumer", "name": "x", "subscriptions": []any{map[string]any{"topic": ""}}}, "subscriptions[0].topic"},
		{map[string]any{"kind": "consumer", "name": "x", "subscriptions": []any{map[string]any{"topic": "som.x."}}}, "subscriptions[0].topic"},
		{map[string]any{"kind": "consumer", "name": "x", "subscriptions": []any{map[string]any{"topic": "som.a*"}}}, "subscriptions[0].topic"},
		{map[string]any{"kind": "consumer", "name": "x", "subscriptions": []any{map[string]any{"topic": "som.>", "producers": []string{"nope"}}}}, "producers"},
		{map[string]any{"kind": "consumer", "name": "x", "subscriptions": []any{map[string]any{"producers": []string{pc.ID}}}}, "topic"},
		{map[string]any{"kind": "consumer", "name": "x", "subscriptions": []any{map[string]any{"topic": "som.>", "producers": []string{pc.ID, pc.ID}}}}, "producers[1]"},
		{map[string]any{"kind": "consumer", "name": "x", "subscriptions": []any{map[string]any{"topic": "som.>", "producers": []string{}}}}, "producers"},
		{map[string]any{"kind": "producer", "name": "x", "subscriptions": []any{map[string]any{"topic": "som.>"}}}, "subscriptions"},
	} {
		b, _ := json.Marshal(c.body)
		msg := wantRefusal(t, n.do(t, "POST", connsPath(ws), admin, c.body), 400, "manage.bad_request")
		if !strings.Contains(msg, c.field) {
			t.Errorf("%s: message %q does not name %s", b, msg, c.field)
		}
	}
	// unlimited is for operators only.
	msg := wantRefusal(t, n.do(t, "POST", connsPath(ws), admin, map[string]any{"kind": "consumer", "name": "x", "quota_tier": "unlimited"}), 403, "manage.forbidden")
	wantMessage(t, msg, "quota_tier")
	wantRefusal(t, n.do(t, "PATCH", connPath(ws, c.ID), admin, map[string]any{"quota_tier": "unlimited"}), 403, "manage.forbidden")
	u := n.connection(t, ws, "consumer", map[string]any{"quota_tier": "unlimited"})
	if u.QuotaTier != "unlimited" {
		t.Errorf("operator's unlimited connection: %+v", u)
	}

	// Good edges: attempt_limit 1 and 1000, patterns with * and >.
	subs := []map[string]any{{"topic": "som.*"}, {"topic": "som.>"}, {"topic": "som.story.*"}, {"topic": "som.*.context"},
		{"topic": "*.*"}, {"topic": ">"}, {"topic": "som.story-1.x_y"}, {"topic": "som.>", "producers": []string{pc.ID}}}
	var full conn
	n.do(t, "POST", connsPath(ws), admin, map[string]any{"kind": "consumer", "name": "edge", "attempt_limit": 1000, "subscriptions": subs}).Must(t, 201).Decode(t, &full)
	if full.AttemptLimit != 1000 || len(full.Subscriptions) != len(subs) || full.Subscriptions[7].Producers[0] != pc.ID {
		t.Fatalf("edge connection: %+v", full)
	}
	n.do(t, "POST", connsPath(ws), admin, map[string]any{"kind": "consumer", "name": "one", "attempt_limit": 1}).Must(t, 201)

	// List, by kind, read.
	var l struct {
		Connections []conn `json:"connections"`
	}
	n.do(t, "GET", connsPath(ws), admin, nil).Must(t, 200).Decode(t, &l)
	if len(l.Connections) != 5 || l.Connections[0].ID != c.ID {
		t.Fatalf("list: %+v", l.Connections)
	}
	n.do(t, "GET", connsPath(ws)+"?kind=producer", admin, nil).Must(t, 200).Decode(t, &l)
	if len(l.Connections) != 1 || l.Connections[0].ID != pc.ID {
		t.Fatalf("producers: %+v", l.Connections)
	}
	wantRefusal(t, n.do(t, "GET", connsPath(ws)+"?kind=robot", admin, nil), 400, "manage.bad_request")
	wantRefusal(t, n.do(t, "GET", connsPath(ws)+"?sort=name", admin, nil), 400, "manage.bad_request")
	if got := n.getConn(t, ws, c.ID); got.Name != "reader" {
		t.Fatalf("read: %+v", got)
	}
	wantRefusal(t, n.do(t, "GET", connPath(ws, "cnosuchconnection"), admin, nil), 404, "manage.not_found")

	// Update.
	var up conn
	n.do(t, "PATCH", connPath(ws, c.ID), admin, map[string]any{"name": "renamed", "attempt_limit": 7, "subscriptions": []any{map[string]any{"topic": "som.story.>"}}}).Must(t, 200).Decode(t, &up)
	if up.Name != "renamed" || up.AttemptLimit != 7 || len(up.Subscriptions) != 1 || up.Subscriptions[0].Topic != "som.story.>" {
		t.Fatalf("update: %+v", up)
	}
	n.do(t, "PATCH", connPath(ws, c.ID), admin, map[string]any{}).Must(t, 200).Decode(t, &up)
	if up.Name != "renamed" || up.AttemptLimit != 7 {
		t.Fatalf("empty update changed something: %+v", up)
	}
	for _, body := range []map[string]any{{"kind": "producer"}, {"attempt_limit": 0}, {"attempt_limit": 1001}, {"quota_tier": "gold"},
		{"subscriptions": []any{map[string]any{"topic": "som.>.a"}}}, {"name": ""}} {
		wantRefusal(t, n.do(t, "PATCH", connPath(ws, c.ID), admin, body), 400, "manage.bad_request")
	}
	wantRefusal(t, n.do(t, "PATCH", connPath(ws, pc.ID), admin, map[string]any{"subscriptions": []any{map[string]any{"topic": "som.>"}}}), 400, "manage.bad_request")
	if got := n.getConn(t, ws, c.ID); got.Name != "renamed" || got.AttemptLimit != 7 || got.Subscriptions[0].Topic != "som.story.>" {
		t.Fatalf("a refused update changed the connection: %+v", got)
	}

	// Remove.
	n.do(t, "DELETE", connPath(ws, pc.ID), admin, nil).Must(t, 204)
	wantRefusal(t, n.do(t, "GET", connPath(ws, pc.ID), admin, nil), 404, "manage.not_found")
	wantRefusal(t, n.do(t, "DELETE", connPath(ws, pc.ID), admin, nil), 404, "manage.not_found")

	got := actions(n.auditLog(t, ws))
	want := []string{"connection.remove", "connection.update", "connection.update", "connection.create", "connection.create",
		"connection.create", "connection.create", "connection.create", "member.set", "workspace.create"}
	if !slices.Equal(got, want) {
		t.Fatalf("audit %v, want %v", got, want)
	}
}

// TestAuditPaging: newest first, cursor paging, entry fields.
func TestAuditPaging(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "audit")
	opID := n.whoami(t, opKey)
	var ids []string
	for range 7 {
		c := n.connection(t, ws, "producer", nil)
		ids = append(ids, c.ID)
	}
	var seen []auditEntry
	cursor := ""
	pages := 0
	for {
		path := auditPath(ws) + "?limit=3"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		var page struct {
			Entries    []auditEntry `json:"entries"`
			NextCursor *string      `json:"next_cursor"`
		}
		n.do(t, "GET", path, opKey, nil).Must(t, 200).Decode(t, &page)
		pages++
		if len(page.Entries) > 3 {
			t.Fatalf("page of %d", len(page.Entries))
		}
		seen = append(seen, page.Entries...)
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if pages != 3 || len(seen) != 8 {
		t.Fatalf("%d pages, %d entries", pages, len(seen))
	}
	for i, id := range ids {
		e := seen[len(ids)-1-i]
		if e.Action != "connection.create" || e.Target != id || e.Actor != opID || e.At != "2026-09-25T10:15:02.114Z" || !bus.ValidID(e.ID, bus.PrefixAudit) {
			t.Errorf("entry %d: %+v", i, e)
		}
	}
	if seen[7].Action != "workspace.create" {
		t.Errorf("oldest entry %+v", seen[7])
	}
	// The order holds when entries share a time or the clock moves.
	// Times are UTC with milliseconds, even when they are zero.
	n.advance(1886 * time.Millisecond)
	n.connection(t, ws, "consumer", nil)
	if es := n.auditLog(t, ws); len(es) != 9 || es[0].Action != "connection.create" || es[0].At != "2026-09-25T10:15:04.000Z" {
		t.Errorf("newest: %+v", es[0])
	}
	for _, q := range []string{"?limit=0", "?limit=101", "?limit=x", "?cursor=bogus", "?page=2", "?limit=1&limit=2"} {
		wantRefusal(t, n.do(t, "GET", auditPath(ws)+q, opKey, nil), 400, "manage.bad_request")
	}
	var page struct {
		Entries []auditEntry `json:"entries"`
	}
	n.do(t, "GET", auditPath(ws)+"?limit=100", opKey, nil).Must(t, 200).Decode(t, &page)
	if len(page.Entries) != 9 {
		t.Errorf("limit=100 gave %d", len(page.Entries))
	}
}

// TestHealthAndDocument: /healthz, /readyz, /v1/openapi.json, /metrics.
func TestHealthAndDocument(t *testing.T) {
	t.Parallel()
	n := start(t)
	for _, p := range []string{"/healthz", "/readyz"} {
		r := n.do(t, "GET", p, "", nil).Must(t, 200)
		if m := r.JSON(t); m["status"] != "ok" {
			t.Errorf("%s: %s", p, r.Body)
		}
	}
	r := n.do(t, "GET", "/v1/openapi.json", "", nil).Must(t, 200)
	var doc map[string]any
	r.Decode(t, &doc)
	if !strings.HasPrefix(doc["openapi"].(string), "3.1") || doc["paths"] == nil {
		t.Fatalf("document: %.200s", r.Body)
	}
	n.do(t, "GET", "/metrics", "", nil).Must(t, 200)
	wantRefusal(t, n.do(t, "POST", "/healthz", "", nil), 405, "route.method_not_allowed")
}
