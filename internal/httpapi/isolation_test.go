package httpapi_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sombus/sombus/internal/auth"
	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
)

// want is the expected answer of one cell: a status and, for a refusal,
// its first rule (on the token endpoint, its RFC 6749 error code).
type want struct {
	status int
	rule   string
}

// The answers the matrix expects.
var (
	okay         = want{200, ""}
	unauth       = want{401, bus.RuleUnauthenticated}
	notReg       = want{403, bus.RuleNotRegistered}
	tenantMis    = want{403, bus.RuleTenantMismatch}
	notOwner     = want{403, bus.RuleNotOwner}
	mNotFound    = want{404, bus.RuleManageNotFound}
	mForbidden   = want{403, bus.RuleManageForbidden}
	mUnauth      = want{401, bus.RuleManageUnauthenticated}
	invalidCli   = want{401, "invalid_client"}
	unsupGrant   = want{400, "unsupported_grant_type"}
	handleFailed = want{200, bus.CodeReceiptHandleIsInvalid} // the handle is in "failed"
)

// TestIsolationMatrix runs every route of the pull API, the token endpoint
// and the management API against every identity that must not get through:
// other workspaces' and other connections' tokens, producers on consumer
// routes and the reverse, expired and forged tokens, revoked connections'
// and rotated-away secrets' tokens, receipt handles from other queues,
// altered, cut or from an earlier delivery, and management keys of other
// workspaces and of too low a role. Each cell's answer is written in the
// tables; afterwards it checks that nothing crossed the line: every queue
// holds what it held, in flight as it was, nothing was published, no
// connection, member or skill changed and no audit log got an entry.
func TestIsolationMatrix(t *testing.T) {
	t.Parallel()
	n := mpStart(t)
	clock := n.ManualClock()
	ctx := context.Background()

	// The world: workspace W (the target) and X (another tenant), both
	// owned by the bootstrap operator.
	W, X := n.Workspace("target"), n.Workspace("other")
	sub := map[string]any{"subscriptions": []map[string]any{{"topic": "som.>"}}}
	type cred struct{ id, secret, tok string }
	mk := func(ws, kind string, extra map[string]any) cred {
		id := n.Connection(ws, kind, mpTier(extra))
		secret := n.Secret(ws, id)
		return cred{id, secret, n.Token(id, secret)}
	}
	// Tokens that will have expired by the time the matrix runs.
	P, C := mk(W, "producer", nil), mk(W, "consumer", sub)
	expiredP, expiredC := P.tok, C.tok
	clock.Advance(auth.TokenLifetime + auth.TokenLeeway + time.Second)
	P.tok, C.tok = n.Token(P.id, P.secret), n.Token(C.id, C.secret)
	C2 := mk(W, "consumer", sub) // another connection of the same workspace
	CRev, PRev := mk(W, "consumer", sub), mk(W, "producer", nil)
	CRot, PRot := mk(W, "consumer", sub), mk(W, "producer", nil)
	XP, XC := mk(X, "producer", nil), mk(X, "consumer", sub)

	// Messages: two stories in W (every W consumer gets both), one in X.
	pub := func(ws, tok, id, story string) {
		n.Do("POST", "/v1/tenants/"+ws+"/messages", tok, servertest.Envelope(id, story, nil)).Must(t, 202)
	}
	pub(W, P.tok, "w-1", "story-a")
	pub(W, P.tok, "w-2", "story-b")
	pub(X, XP.tok, "x-1", "story-x")
	recv := func(ws string, c cred, query string, want int) []string {
		t.Helper()
		var out struct{ Messages []servertest.Message }
		n.Do("GET", "/v1/tenants/"+ws+"/consumers/"+c.id+"/messages?wait=0&"+query, c.tok, nil).Must(t, 200).Decode(t, &out)
		if len(out.Messages) != want {
			t.Fatalf("received %d messages, want %d", len(out.Messages), want)
		}
		hs := make([]string, len(out.Messages))
		for i, m := range out.Messages {
			hs[i] = m.ReceiptHandle
		}
		return hs
	}
	// C: a first delivery that runs out at once, then the latest one, in
	// flight for an hour. C2 and XC: in flight.
	earlier := recv(W, C, "visibility=0", 2)
	current := recv(W, C, "visibility=3600", 2)
	c2Handles := recv(W, C2, "visibility=3600", 2)
	xHandles := recv(X, XC, "visibility=3600", 1)

	// Revoked connections and rotated-away secrets (the old one stopped).
	for _, c := range []cred{CRev, PRev} {
		n.Do("POST", "/v1/manage/workspaces/"+W+"/connections/"+c.id+"/revoke", opKey, nil).Must(t, 200)
	}
	for _, c := range []cred{CRot, PRot} {
		n.Do("POST", "/v1/manage/workspaces/"+W+"/connections/"+c.id+"/secret/rotate", opKey, map[string]any{"overlap": "1h"}).Must(t, 201)
		n.Do("POST", "/v1/manage/workspaces/"+W+"/connections/"+c.id+"/secret/stop-previous", opKey, nil).Must(t, 200)
	}
	n.Do("PUT", "/v1/manage/workspaces/"+W+"/connections/"+C.id+"/skills", opKey, map[string]any{"registrations": []map[string]any{
		{"instance_id": "i-1", "skill": "summarize", "name": "Summary", "values": map[string]any{"k": "v"}, "authority_scale": 50}}}).Must(t, 200)

	// Users: viewer, developer and admin of W and of X.
	type user struct{ id, key string }
	users := map[string]user{}
	for _, ws := range []struct{ id, name string }{{W, "W"}, {X, "X"}} {
		for _, role := range []bus.Role{bus.RoleViewer, bus.RoleDeveloper, bus.RoleAdmin} {
			name := string(role) + " of " + ws.name
			var u bus.User
			n.Do("POST", "/v1/manage/users", opKey, map[string]any{"name": name, "email": strings.ReplaceAll(name, " ", ".") + "@example.com"}).Must(t, 201).Decode(t, &u)
			var k struct {
				APIKey string `json:"api_key"`
			}
			n.Do("POST", "/v1/manage/users/"+u.ID+"/keys", opKey, nil).Must(t, 201).Decode(t, &k)
			n.Do("PUT", "/v1/manage/workspaces/"+ws.id+"/members/"+u.ID, opKey, map[string]any{"role": role}).Must(t, 200)
			users[name] = user{u.ID, k.APIKey}
		}
	}

	// Forged tokens, each against a route its original could reach or
	// meant to reach one: another key under the same kid, alg none, HS256
	// keyed with the public key, claims altered under the original
	// signature, tokens of another environment and of another issuer
	// (signed with the server's own key).
	store := n.Server.Store()
	iss := jwtClaims(t, C.tok)["iss"].(string)
	otherEnv, err := auth.NewSigner(ctx, store, iss, "production", clock, nil)
	if err != nil {
		t.Fatal(err)
	}
	otherIss, err := auth.NewSigner(ctx, store, "https://elsewhere.example", "sandbox", clock, nil)
	if err != nil {
		t.Fatal(err)
	}
	issueWith := func(s *auth.Signer, c cred, role bus.ConnectionKind) string {
		tok, _, err := s.Issue(auth.Claims{ClientID: c.id, Tenant: W, Role: role, CredentialVersion: 1})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	jwks := n.Do("GET", "/v1/oauth/jwks", "", nil).Must(t, 200).Body
	forge := map[string]func(orig string, as cred) string{
		"another key, same kid": func(orig string, _ cred) string { return signForeign(t, orig) },
		"alg none":              func(orig string, _ cred) string { return algNone(t, orig) },
		"HS256 keyed with the public key": func(orig string, _ cred) string {
			return hs256WithPublicKey(t, orig, jwks)
		},
		// A token of another connection (of another workspace) whose claims
		// now name the target, under its original signature.
		"altered claims": func(orig string, as cred) string {
			return alterClaims(t, orig, map[string]any{"sub": as.id, "client_id": as.id, "tenant": W})
		},
	}

	// The pull API and publishing: every identity on every route, with
	// the expected answer of each cell.
	type route struct{ name, method, path string }
	const recvQ = "/messages?wait=0&visibility=3600"
	cRoutes := func(c string) []route {
		base := "/v1/tenants/" + W + "/consumers/" + c
		return []route{{"receive", "GET", base + recvQ}, {"ack", "POST", base + "/ack"}, {"nack", "POST", base + "/nack"}, {"skills", "GET", base + "/skills"}}
	}
	pRoutes := []route{{"publish", "POST", "/v1/tenants/" + W + "/messages"}, {"batch publish", "POST", "/v1/tenants/" + W + "/messages/batch"}}
	body := func(r route) any {
		switch r.name {
		case "ack", "nack":
			return map[string]any{"receipt_handles": []string{current[0]}} // a live handle of C's queue
		case "publish":
			return servertest.Envelope("forged-1", "story-a", nil)
		case "batch publish":
			return map[string]any{"messages": []any{servertest.Envelope("forged-2", "story-a", nil)}}
		}
		return nil
	}
	type identity struct {
		name               string
		consumer, producer string // the bearer on consumer routes and on publish routes ("": not tried there)
		none               bool   // no Authorization header at all
		target             string // the consumer whose routes it calls ("" is C)
		onConsumer, onPub  want   // expected on each consumer route / each publish route
	}
	ids := []identity{
		{name: "another workspace's consumer", consumer: XC.tok, producer: XC.tok, onConsumer: tenantMis, onPub: notReg},
		{name: "another workspace's producer", consumer: XP.tok, producer: XP.tok, onConsumer: notReg, onPub: tenantMis},
		{name: "another connection's token", consumer: C2.tok, onConsumer: notOwner},
		{name: "a producer on consumer routes", consumer: P.tok, onConsumer: notReg},
		{name: "a consumer on publish routes", producer: C.tok, onPub: notReg},
		{name: "expired", consumer: expiredC, producer: expiredP, onConsumer: unauth, onPub: unauth},
		{name: "another environment", consumer: issueWith(otherEnv, C, bus.KindConsumer), producer: issueWith(otherEnv, P, bus.KindProducer), onConsumer: unauth, onPub: unauth},
		{name: "another issuer", consumer: issueWith(otherIss, C, bus.KindConsumer), producer: issueWith(otherIss, P, bus.KindProducer), onConsumer: unauth, onPub: unauth},
		{name: "revoked connection (its own routes)", consumer: CRev.tok, producer: PRev.tok, target: CRev.id, onConsumer: notReg, onPub: notReg},
		{name: "rotated-away secret (its own routes)", consumer: CRot.tok, producer: PRot.tok, target: CRot.id, onConsumer: unauth, onPub: unauth},
		{name: "no token", none: true, onConsumer: unauth, onPub: unauth},
		{name: "garbage", consumer: "not.a.token", producer: "not.a.token", onConsumer: unauth, onPub: unauth},
		{name: "a management API key", consumer: opKey, producer: opKey, onConsumer: unauth, onPub: unauth},
	}
	for name, f := range forge {
		ids = append(ids, identity{name: name, consumer: f(C2.tok, C), producer: f(XP.tok, P), onConsumer: unauth, onPub: unauth})
	}
	userKeys := []string{}
	for _, u := range users {
		userKeys = append(userKeys, u.key)
	}
	snap := snapshot(t, n, W, X, userKeys)
	cells := 0
	for _, id := range ids {
		target := C.id
		if id.target != "" {
			target = id.target
		}
		for _, r := range cRoutes(target) {
			if id.consumer == "" && !id.none {
				break
			}
			cells++
			checkCell(t, id.name+" / "+r.name, n.Do(r.method, r.path, id.consumer, body(r)), id.onConsumer)
		}
		for _, r := range pRoutes {
			if id.producer == "" && !id.none {
				break
			}
			cells++
			checkCell(t, id.name+" / "+r.name, n.Do(r.method, r.path, id.producer, body(r)), id.onPub)
		}
	}
	// The control: C's own token reaches C's skills, so the paths are right.
	cells++
	checkCell(t, "own token / skills", n.Do("GET", "/v1/tenants/"+W+"/consumers/"+C.id+"/skills", C.tok, nil), okay)

	// Receipt handles that are not the latest delivery's in this queue: each
	// fails on its own with ReceiptHandleIsInvalid, on ack and on nack.
	altered := []byte(current[0])
	if i := len(altered) / 2; altered[i] == 'A' {
		altered[i] = 'B'
	} else {
		altered[i] = 'A'
	}
	handleCells := []struct {
		name   string
		as     cred
		ws     string
		handle string
		want   want
	}{
		{"another workspace's queue", C, W, xHandles[0], handleFailed},
		{"another connection's queue", C, W, c2Handles[0], handleFailed},
		{"altered", C, W, string(altered), handleFailed},
		{"truncated", C, W, current[0][:len(current[0])-4], handleFailed},
		{"an earlier delivery (received again since)", C, W, earlier[0], handleFailed},
		{"this workspace's handle on another workspace's queue", XC, X, current[1], handleFailed},
		{"this connection's handle on another connection's queue", C2, W, current[1], handleFailed},
	}
	for _, h := range handleCells {
		for _, verb := range []string{"ack", "nack"} {
			cells++
			r := n.Do("POST", "/v1/tenants/"+h.ws+"/consumers/"+h.as.id+"/"+verb, h.as.tok, map[string]any{"receipt_handles": []string{h.handle}})
			checkCell(t, "handle from "+h.name+" / "+verb, r, h.want)
		}
	}

	// The token endpoint: every credential that must not get a token.
	unknownID := bus.NewID(bus.PrefixConnection)
	tokenCells := []struct {
		name, id, secret, grant string
		want                    want
	}{
		{"unknown client", unknownID, C.secret, "client_credentials", invalidCli},
		{"another connection's secret", C.id, C2.secret, "client_credentials", invalidCli},
		{"another workspace's secret", C.id, XC.secret, "client_credentials", invalidCli},
		{"a wrong secret", C.id, C.secret + "x", "client_credentials", invalidCli},
		{"a revoked connection", CRev.id, CRev.secret, "client_credentials", invalidCli},
		{"a rotated-away secret after it stopped", CRot.id, CRot.secret, "client_credentials", invalidCli},
		{"a management API key as secret", C.id, opKey, "client_credentials", invalidCli},
		{"another grant", C.id, C.secret, "password", unsupGrant},
	}
	for _, c := range tokenCells {
		cells++
		req, err := http.NewRequestWithContext(ctx, "POST", n.URL+"/v1/oauth/token", strings.NewReader(url.Values{"grant_type": {c.grant}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(c.id, c.secret)
		r := n.Send(req)
		var b struct {
			Error       string `json:"error"`
			AccessToken string `json:"access_token"`
		}
		_ = json.Unmarshal(r.Body, &b)
		if r.Status != c.want.status || b.Error != c.want.rule || b.AccessToken != "" {
			t.Errorf("token endpoint, %s: got %d %s, want %d %s", c.name, r.Status, r.Body, c.want.status, c.want.rule)
		}
	}

	// The management API: each route of W as viewer, developer and admin of
	// X (a non-member: 404, never revealing W), as an admin of X through X's
	// own path with W's ids (404), and as viewer, developer or admin of W
	// below the route's role (403); without a key and with a consumer's
	// access token as key (401). Operator routes are 403 for everyone here.
	vX, dX, aX := users["viewer of X"], users["developer of X"], users["admin of X"]
	vW, dW, aW := users["viewer of W"], users["developer of W"], users["admin of W"]
	const (
		kvX = "viewer of X"
		kdX = "developer of X"
		kaX = "admin of X"
		kXp = "admin of X, X's path"
		kvW = "viewer of W"
		kdW = "developer of W"
		kaW = "admin of W"
		kNo = "no key"
		kTk = "access token as key"
	)
	keyOf := map[string]string{kvX: vX.key, kdX: dX.key, kaX: aX.key, kXp: aX.key, kvW: vW.key, kdW: dW.key, kaW: aW.key, kNo: "", kTk: C.tok}
	ws, conn := "/v1/manage/workspaces/"+W, "/v1/manage/workspaces/"+W+"/connections/"+C.id
	xws, xconn := "/v1/manage/workspaces/"+X, "/v1/manage/workspaces/"+X+"/connections/"+C.id
	type mcells map[string]want
	manage := []struct {
		method, path, xpath string // xpath: the route through X's path with W's ids ("" when none)
		body                any
		cells               mcells
	}{
		{"GET", ws, "", nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kNo: mUnauth, kTk: mUnauth}},
		{"PUT", ws + "/members/" + vW.id, "", map[string]any{"role": "owner"}, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kvW: mForbidden, kdW: mForbidden, kaW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"DELETE", ws + "/members/" + aW.id, "", nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kvW: mForbidden, kdW: mForbidden, kaW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"POST", ws + "/connections", "", map[string]any{"kind": "consumer", "name": "intruder"}, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kvW: mForbidden, kdW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"GET", ws + "/connections", "", nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kNo: mUnauth, kTk: mUnauth}},
		{"GET", conn, xconn, nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kXp: mNotFound, kNo: mUnauth, kTk: mUnauth}},
		{"PATCH", conn, xconn, map[string]any{"name": "renamed"}, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kXp: mNotFound, kvW: mForbidden, kdW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"DELETE", conn, xconn, nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kXp: mNotFound, kvW: mForbidden, kdW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"POST", conn + "/secret", xconn + "/secret", nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kXp: mNotFound, kvW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"POST", conn + "/secret/rotate", xconn + "/secret/rotate", map[string]any{"overlap": "none"}, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kXp: mNotFound, kvW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"POST", conn + "/secret/stop-previous", xconn + "/secret/stop-previous", nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kXp: mNotFound, kvW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"POST", conn + "/secret/revoke", xconn + "/secret/revoke", nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kXp: mNotFound, kvW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"POST", conn + "/revoke", xconn + "/revoke", nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kXp: mNotFound, kvW: mForbidden, kdW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"POST", "/v1/manage/workspaces/" + W + "/connections/" + CRev.id + "/restore", xws + "/connections/" + CRev.id + "/restore", nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kXp: mNotFound, kvW: mForbidden, kdW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"GET", conn + "/dead-letters", xconn + "/dead-letters", nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kXp: mNotFound, kNo: mUnauth, kTk: mUnauth}},
		{"POST", conn + "/dead-letters/redrive", xconn + "/dead-letters/redrive", nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kXp: mNotFound, kvW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"POST", conn + "/purge", xconn + "/purge", nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kXp: mNotFound, kvW: mForbidden, kdW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"PUT", conn + "/skills", xconn + "/skills", map[string]any{"registrations": []any{}}, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kXp: mNotFound, kvW: mForbidden, kdW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"GET", conn + "/skills", xconn + "/skills", nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kXp: mNotFound, kNo: mUnauth, kTk: mUnauth}},
		{"GET", conn + "/usage", xconn + "/usage", nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kXp: mNotFound, kNo: mUnauth, kTk: mUnauth}},
		{"GET", ws + "/audit", "", nil, mcells{kvX: mNotFound, kdX: mNotFound, kaX: mNotFound, kvW: mForbidden, kdW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		// Operator routes.
		{"POST", "/v1/manage/users", "", map[string]any{"name": "intruder", "email": "intruder@example.com", "operator": true}, mcells{kvX: mForbidden, kdX: mForbidden, kaX: mForbidden, kvW: mForbidden, kdW: mForbidden, kaW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"POST", "/v1/manage/users/" + vW.id + "/keys", "", nil, mcells{kvX: mForbidden, kdX: mForbidden, kaX: mForbidden, kvW: mForbidden, kdW: mForbidden, kaW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"POST", "/v1/manage/workspaces", "", map[string]any{"name": "intruder"}, mcells{kvX: mForbidden, kdX: mForbidden, kaX: mForbidden, kvW: mForbidden, kdW: mForbidden, kaW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
		{"GET", "/v1/manage/audit", "", nil, mcells{kvX: mForbidden, kdX: mForbidden, kaX: mForbidden, kvW: mForbidden, kdW: mForbidden, kaW: mForbidden, kNo: mUnauth, kTk: mUnauth}},
	}
	for _, m := range manage {
		for who, w := range m.cells {
			path := m.path
			if who == kXp {
				path = m.xpath
			}
			cells++
			checkCell(t, who+" / "+m.method+" "+path, n.Do(m.method, path, keyOf[who], m.body), w)
		}
	}
	// The workspace lists of X's members do not show W.
	for _, who := range []string{kvX, kdX, kaX} {
		cells++
		if r := n.Do("GET", "/v1/manage/workspaces", keyOf[who], nil).Must(t, 200); strings.Contains(string(r.Body), W) {
			t.Errorf("%s lists workspace W: %s", who, r.Body)
		}
	}

	// Nothing crossed the line: the same connections (statuses, secrets,
	// credential versions, subscriptions, queue counts), members, skills,
	// dead letters, workspaces and audit logs as before the first cell.
	if after := snapshot(t, n, W, X, userKeys); !reflect.DeepEqual(after, snap) {
		for k, v := range after {
			if !reflect.DeepEqual(v, snap[k]) {
				t.Errorf("%s changed:\nbefore %s\nafter  %s", k, snap[k], v)
			}
		}
	}
	for _, q := range []struct {
		ws           string
		c            cred
		ready, fly   int64
		expectHandle []string
	}{
		{W, C, 0, 2, current}, {W, C2, 0, 2, c2Handles}, {X, XC, 0, 1, xHandles}, {W, CRev, 2, 0, nil}, {W, CRot, 2, 0, nil},
	} {
		var st bus.QueueStats
		n.Do("GET", "/v1/manage/workspaces/"+q.ws+"/connections/"+q.c.id, opKey, nil).Must(t, 200).Decode(t, &st)
		if st.Ready != q.ready || st.InFlight != q.fly || st.Delayed != 0 || st.DeadLetters != 0 {
			t.Errorf("queue %s: %+v, want %d ready and %d in flight", q.c.id, st, q.ready, q.fly)
		}
	}
	// The latest deliveries' handles still work on their own queues: what
	// the refused calls aimed at was neither acknowledged nor released.
	for _, q := range []struct {
		ws      string
		c       cred
		handles []string
	}{{W, C, current}, {W, C2, c2Handles}, {X, XC, xHandles}} {
		var a struct {
			Acked  []string          `json:"acked"`
			Failed []json.RawMessage `json:"failed"`
		}
		n.Do("POST", "/v1/tenants/"+q.ws+"/consumers/"+q.c.id+"/ack", q.c.tok, map[string]any{"receipt_handles": q.handles}).Must(t, 200).Decode(t, &a)
		if len(a.Acked) != len(q.handles) || len(a.Failed) != 0 {
			t.Errorf("acking %s's own latest handles: %+v", q.c.id, a)
		}
	}
	t.Logf("%d cells", cells)
}

// checkCell fails unless r is the expected answer: a refusal with its
// status and first rule; a 200 of ack or nack whose one handle failed with
// the expected code; or a plain 200.
func checkCell(t *testing.T, name string, r *servertest.Response, w want) {
	t.Helper()
	switch {
	case w == handleFailed:
		var b struct {
			Acked  []string `json:"acked"`
			Nacked []string `json:"nacked"`
			Failed []struct {
				Code string `json:"code"`
			} `json:"failed"`
		}
		_ = json.Unmarshal(r.Body, &b)
		if r.Status != 200 || len(b.Acked)+len(b.Nacked) != 0 || len(b.Failed) != 1 || b.Failed[0].Code != w.rule {
			t.Errorf("%s: got %d %s, want 200 with the handle failed (%s)", name, r.Status, r.Body, w.rule)
		}
	case w.rule == "":
		if r.Status != w.status {
			t.Errorf("%s: got %d %s, want %d", name, r.Status, r.Body, w.status)
		}
	default:
		var b struct {
			Accepted   *bool           `json:"accepted"`
			Violations []bus.Violation `json:"violations"`
		}
		_ = json.Unmarshal(r.Body, &b)
		if r.Status != w.status || len(b.Violations) == 0 || b.Violations[0].Rule != w.rule || b.Accepted == nil || *b.Accepted {
			t.Errorf("%s: got %d %s, want %d %s", name, r.Status, r.Body, w.status, w.rule)
		}
	}
}

// snapshot reads, as the operator, everything the refused calls could have
// changed: each workspace, its connections (with queue counts), its
// skills, its audit log, the global audit log, and each user's roles.
func snapshot(t *testing.T, n *servertest.Node, w, x string, userKeys []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	get := func(name, path, key string) {
		out[name] = string(n.Do("GET", path, key, nil).Must(t, 200).Body)
	}
	get("workspaces", "/v1/manage/workspaces", opKey)
	get("global audit", "/v1/manage/audit?limit=100", opKey)
	for _, ws := range []string{w, x} {
		base := "/v1/manage/workspaces/" + ws
		get(ws, base, opKey)
		get(ws+" audit", base+"/audit?limit=100", opKey)
		var page struct {
			Connections []struct {
				ID   string `json:"id"`
				Kind string `json:"kind"`
			} `json:"connections"`
		}
		n.Do("GET", base+"/connections?limit=100", opKey, nil).Must(t, 200).Decode(t, &page)
		for _, c := range page.Connections {
			get(c.ID, base+"/connections/"+c.ID, opKey)
			if c.Kind == "consumer" {
				get(c.ID+" skills", base+"/connections/"+c.ID+"/skills", opKey)
				get(c.ID+" dead letters", base+"/connections/"+c.ID+"/dead-letters", opKey)
			}
		}
	}
	for i, key := range userKeys {
		get(fmt.Sprintf("user %d whoami", i), "/v1/manage/whoami", key)
	}
	return out
}

// jwtClaims decodes a token's claims without checking them.
func jwtClaims(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// jwtKid is the kid of a token's header.
func jwtKid(t *testing.T, tok string) string {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(b, &h); err != nil || h.Kid == "" {
		t.Fatalf("token header %s: %v", b, err)
	}
	return h.Kid
}

// signForeign re-signs tok's claims with a fresh ES256 key under tok's kid.
func signForeign(t *testing.T, tok string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: jwtKid(t, tok)}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := jwt.Signed(sig).Claims(jwtClaims(t, tok)).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// algNone is tok's claims under {"alg":"none"} with no signature.
func algNone(t *testing.T, tok string) string {
	t.Helper()
	h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT","kid":"` + jwtKid(t, tok) + `"}`))
	return h + "." + strings.Split(tok, ".")[1] + "."
}

// hs256WithPublicKey signs tok's claims with HMAC-SHA256 keyed with the
// server's public key in PEM (the classic algorithm confusion), under its kid.
func hs256WithPublicKey(t *testing.T, tok string, jwks []byte) string {
	t.Helper()
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(jwks, &set); err != nil || len(set.Keys) == 0 {
		t.Fatalf("jwks %s: %v", jwks, err)
	}
	der, err := x509.MarshalPKIXPublicKey(set.Keys[0].Key)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: jose.JSONWebKey{Key: pemKey, KeyID: jwtKid(t, tok)}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := jwt.Signed(sig).Claims(jwtClaims(t, tok)).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// alterClaims changes tok's claims and keeps its header and signature.
func alterClaims(t *testing.T, tok string, change map[string]any) string {
	t.Helper()
	m := jwtClaims(t, tok)
	for k, v := range change {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	return parts[0] + "." + base64.RawURLEncoding.EncodeToString(b) + "." + parts[2]
}
