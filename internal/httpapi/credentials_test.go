package httpapi_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// t0 is the test nodes' starting time.
var t0 = time.Date(2026, 9, 25, 10, 15, 2, 114e6, time.UTC)

// checkWindow is the longest a change may take to reach token checks.
const checkWindow = 30 * time.Second

// TestGetClientSecret: shown once with the URLs filled in, 409 while active,
// only a hash kept.
func TestGetClientSecret(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "secrets")
	c := n.connection(t, ws, "consumer", nil)
	p := n.connection(t, ws, "producer", nil)

	r := n.do(t, "POST", connPath(ws, c.ID)+"/secret", opKey, nil).Must(t, 201)
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("secret answer Cache-Control = %q", r.Header.Get("Cache-Control"))
	}
	var s bus.SecretIssued
	r.Decode(t, &s)
	base := n.URL + "/v1"
	q := base + "/tenants/" + ws + "/consumers/" + c.ID
	want := bus.SecretIssued{ClientID: c.ID, ClientSecret: s.ClientSecret, CredentialVersion: 1, TokenURL: base + "/oauth/token",
		MessagesURL: q + "/messages", AckURL: q + "/ack", NackURL: q + "/nack", SkillsURL: q + "/skills"}
	if s != want || len(s.ClientSecret) < 20 {
		t.Fatalf("secret answer %+v, want %+v", s, want)
	}
	// The URLs work as given.
	tok := n.token(t, s.ClientID, s.ClientSecret)
	n.do(t, "GET", strings.TrimPrefix(s.MessagesURL, n.URL)+"?wait=0", tok, nil).Must(t, 200)

	var ps map[string]any
	n.do(t, "POST", connPath(ws, p.ID)+"/secret", opKey, nil).Must(t, 201).Decode(t, &ps)
	if ps["messages_url"] != base+"/tenants/"+ws+"/messages" || ps["ack_url"] != nil || ps["nack_url"] != nil || ps["skills_url"] != nil {
		t.Fatalf("producer secret answer %v", ps)
	}

	msg := wantRefusal(t, n.do(t, "POST", connPath(ws, c.ID)+"/secret", opKey, nil), 409, "manage.conflict")
	wantMessage(t, msg, "rotate")
	got := n.getConn(t, ws, c.ID)
	if got.Secret.State != "active" || got.CredentialVersion != 1 || got.Secret.IssuedAt == nil || *got.Secret.IssuedAt != "2026-09-25T10:15:02.114Z" {
		t.Fatalf("connection after issue: %+v", got)
	}
	// The secret is shown once: no later answer, store file, audit entry or
	// log line holds it.
	for _, path := range []string{connPath(ws, c.ID), connsPath(ws), auditPath(ws)} {
		if b := n.do(t, "GET", path, opKey, nil).Body; strings.Contains(string(b), s.ClientSecret) {
			t.Errorf("GET %s shows the secret", path)
		}
	}
	if strings.Contains(string(n.storeBytes(t)), s.ClientSecret) {
		t.Error("the client secret is in the SQLite files")
	}
	if strings.Contains(n.logs.String(), s.ClientSecret) {
		t.Error("the client secret is in the log")
	}
	es := n.auditLog(t, ws)
	if es[0].Action != "secret.issue" || es[0].Target != p.ID || es[1].Action != "secret.issue" || es[1].Target != c.ID {
		t.Fatalf("audit %v", actions(es))
	}
}

// TestRotate runs each overlap: what the old secret gets at the token
// endpoint before and after the overlap ends, and what an old token gets.
func TestRotate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		overlap string // "" sends no body: the default, 24h
		d       time.Duration
	}{{"24h", 24 * time.Hour}, {"3d", 72 * time.Hour}, {"1h", time.Hour}, {"none", 0}, {"", 24 * time.Hour}} {
		name := tc.overlap
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n := start(t)
			ws := n.workspace(t, opKey, "rotate")
			c := n.connection(t, ws, "consumer", nil)
			s1 := n.issue(t, ws, c.ID)
			t1 := n.token(t, c.ID, s1.ClientSecret)
			n.pull(t, ws, c.ID, t1).Must(t, 200)

			s2 := n.rotate(t, ws, c.ID, tc.overlap)
			if s2.CredentialVersion != 2 || s2.ClientSecret == s1.ClientSecret || s2.ClientID != c.ID || s2.MessagesURL != s1.MessagesURL {
				t.Fatalf("rotate answer %+v", s2)
			}
			got := n.getConn(t, ws, c.ID)
			wantExp := (*string)(nil)
			if tc.d > 0 {
				e := bus.FormatTime(t0.Add(tc.d))
				wantExp = &e
			}
			if got.CredentialVersion != 2 || got.Secret.State != "active" || (got.Secret.PreviousExpiresAt == nil) != (wantExp == nil) ||
				wantExp != nil && *got.Secret.PreviousExpiresAt != *wantExp {
				t.Fatalf("connection after rotate: %+v (want previous_expires_at %v)", got, wantExp)
			}

			// The old token stops at once on this node, and stays refused.
			msg := wantRefusal(t, n.pull(t, ws, c.ID, t1), 401, "producer.unauthenticated")
			wantMessage(t, msg, "rotated")
			n.advance(checkWindow)
			wantRefusal(t, n.pull(t, ws, c.ID, t1), 401, "producer.unauthenticated")

			// The new secret works; the old one only during the overlap.
			t2 := n.token(t, c.ID, s2.ClientSecret)
			n.pull(t, ws, c.ID, t2).Must(t, 200)
			if tc.d == 0 {
				wantOAuthError(t, n.tokenResp(t, c.ID, s1.ClientSecret), 401, "invalid_client")
			} else {
				old := n.token(t, c.ID, s1.ClientSecret)
				if v := claims(t, old)["credential_version"]; v != 2.0 {
					t.Errorf("token from the previous secret carries credential_version %v, want 2", v)
				}
				n.pull(t, ws, c.ID, old).Must(t, 200)
				n.advance(tc.d - checkWindow - time.Second) // 1 s before the overlap ends
				n.token(t, c.ID, s1.ClientSecret)
				n.advance(time.Second) // the overlap ends
				wantOAuthError(t, n.tokenResp(t, c.ID, s1.ClientSecret), 401, "invalid_client")
				if got := n.getConn(t, ws, c.ID); got.Secret.PreviousExpiresAt != nil {
					t.Errorf("previous_expires_at still shown after the overlap: %v", *got.Secret.PreviousExpiresAt)
				}
			}
			n.pull(t, ws, c.ID, n.token(t, c.ID, s2.ClientSecret)).Must(t, 200)

			es := n.auditLog(t, ws)
			i := slices.IndexFunc(es, func(e auditEntry) bool { return e.Action == "secret.rotate" })
			want := tc.overlap
			if want == "" {
				want = "24h"
			}
			if i < 0 || es[i].Details["overlap"] != want || es[i].Details["credential_version"] != 2.0 || es[i].Target != c.ID {
				t.Fatalf("audit %+v", es)
			}
		})
	}
}

// TestRotateRefusals: bad overlaps and rotating without a secret.
func TestRotateRefusals(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "rotate")
	c := n.connection(t, ws, "consumer", nil)
	wantRefusal(t, n.do(t, "POST", connPath(ws, c.ID)+"/secret/rotate", opKey, nil), 409, "manage.conflict")
	wantRefusal(t, n.do(t, "POST", connPath(ws, c.ID)+"/secret/revoke", opKey, nil), 409, "manage.conflict")
	n.issue(t, ws, c.ID)
	for _, body := range []any{map[string]any{"overlap": "2h"}, map[string]any{"overlap": 24}, map[string]any{"overlap": "24H"}, map[string]any{"overlap": "24h", "now": true}} {
		msg := wantRefusal(t, n.do(t, "POST", connPath(ws, c.ID)+"/secret/rotate", opKey, body), 400, "manage.bad_request")
		b, _ := json.Marshal(body)
		if !strings.Contains(msg, "overlap") && !strings.Contains(msg, "now") {
			t.Errorf("%s: message %q names no field", b, msg)
		}
	}
	if got := n.getConn(t, ws, c.ID); got.CredentialVersion != 1 {
		t.Fatalf("refused rotations changed credential_version to %d", got.CredentialVersion)
	}
}

// TestStopPrevious ends the overlap now.
func TestStopPrevious(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "stop")
	c := n.connection(t, ws, "producer", nil)
	s1 := n.issue(t, ws, c.ID)
	s2 := n.rotate(t, ws, c.ID, "3d")
	n.token(t, c.ID, s1.ClientSecret)
	var v conn
	n.do(t, "POST", connPath(ws, c.ID)+"/secret/stop-previous", opKey, nil).Must(t, 200).Decode(t, &v)
	if v.Secret.PreviousExpiresAt != nil || v.CredentialVersion != 2 || v.Secret.State != "active" {
		t.Fatalf("after stop-previous: %+v", v)
	}
	wantOAuthError(t, n.tokenResp(t, c.ID, s1.ClientSecret), 401, "invalid_client")
	tok := n.token(t, c.ID, s2.ClientSecret)
	n.publish(t, ws, tok, "m1").Must(t, 202)
	// Idempotent: again is 200 and writes nothing.
	n.do(t, "POST", connPath(ws, c.ID)+"/secret/stop-previous", opKey, "{}").Must(t, 200)
	got := actions(n.auditLog(t, ws))
	want := []string{"secret.stop_previous", "secret.rotate", "secret.issue", "connection.create", "workspace.create"}
	if !slices.Equal(got, want) {
		t.Fatalf("audit %v, want %v", got, want)
	}
}

// TestRevokeSecret: the secret stops at once, its tokens within 30 s; the
// connection and its queue stay; a new secret can be issued.
func TestRevokeSecret(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "revoke")
	p := n.connection(t, ws, "producer", nil)
	c := n.connection(t, ws, "consumer", map[string]any{"subscriptions": []any{map[string]any{"topic": "som.>"}}})
	ptok := n.token(t, p.ID, n.issue(t, ws, p.ID).ClientSecret)
	s1 := n.issue(t, ws, c.ID)
	t1 := n.token(t, c.ID, s1.ClientSecret)
	n.publish(t, ws, ptok, "kept").Must(t, 202)

	var v conn
	n.do(t, "POST", connPath(ws, c.ID)+"/secret/revoke", opKey, nil).Must(t, 200).Decode(t, &v)
	if v.Status != "active" || v.Secret.State != "revoked" || v.CredentialVersion != 2 || v.Ready == nil || *v.Ready != 1 {
		t.Fatalf("after secret revoke: %+v", v)
	}
	wantOAuthError(t, n.tokenResp(t, c.ID, s1.ClientSecret), 401, "invalid_client")
	wantRefusal(t, n.pull(t, ws, c.ID, t1), 401, "producer.unauthenticated")
	n.advance(checkWindow)
	wantRefusal(t, n.pull(t, ws, c.ID, t1), 401, "producer.unauthenticated")
	wantRefusal(t, n.do(t, "POST", connPath(ws, c.ID)+"/secret/rotate", opKey, nil), 409, "manage.conflict")
	wantRefusal(t, n.do(t, "POST", connPath(ws, c.ID)+"/secret/revoke", opKey, nil), 409, "manage.conflict")

	s3 := n.issue(t, ws, c.ID)
	if s3.CredentialVersion != 3 {
		t.Fatalf("credential_version after revoke and issue: %d, want 3", s3.CredentialVersion)
	}
	t3 := n.token(t, c.ID, s3.ClientSecret)
	var got struct {
		Messages []servertest.Message `json:"messages"`
	}
	n.pull(t, ws, c.ID, t3).Must(t, 200).Decode(t, &got)
	if len(got.Messages) != 1 || got.Messages[0].MessageID() != "kept" {
		t.Fatalf("the queue did not stay: %+v", got.Messages)
	}
	wantOAuthError(t, n.tokenResp(t, c.ID, s1.ClientSecret), 401, "invalid_client")
	wantRefusal(t, n.pull(t, ws, c.ID, t1), 401, "producer.unauthenticated")
	es := n.auditLog(t, ws)
	if es[0].Action != "secret.issue" || es[1].Action != "secret.revoke" || es[1].Details["credential_version"] != 2.0 {
		t.Fatalf("audit %v", actions(es))
	}
}

// TestRevokeRestoreConnection: no new tokens at once, old tokens 403 within
// 30 s (at once on this node), the queue keeps receiving; restore brings the
// same secret and the old token back.
func TestRevokeRestoreConnection(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "revoke")
	p := n.connection(t, ws, "producer", nil)
	c := n.connection(t, ws, "consumer", map[string]any{"subscriptions": []any{map[string]any{"topic": "som.>"}}})
	ps := n.issue(t, ws, p.ID)
	ptok := n.token(t, p.ID, ps.ClientSecret)
	s := n.issue(t, ws, c.ID)
	tok := n.token(t, c.ID, s.ClientSecret)

	var v conn
	n.do(t, "POST", connPath(ws, c.ID)+"/revoke", opKey, nil).Must(t, 200).Decode(t, &v)
	if v.Status != "revoked" || v.CredentialVersion != 1 || v.Secret.State != "active" {
		t.Fatalf("after revoke: %+v", v)
	}
	wantOAuthError(t, n.tokenResp(t, c.ID, s.ClientSecret), 401, "invalid_client")
	msg := wantRefusal(t, n.pull(t, ws, c.ID, tok), 403, "producer.not_registered")
	wantMessage(t, msg, "revoked", "restore")
	wantRefusal(t, n.do(t, "GET", skillsPath(ws, c.ID), tok, nil), 403, "producer.not_registered")
	// The queue still receives messages.
	var pub map[string]any
	n.publish(t, ws, ptok, "while-revoked").Must(t, 202).Decode(t, &pub)
	if pub["deliveries"] != 1.0 {
		t.Fatalf("publish to a revoked consumer: %v", pub)
	}
	n.advance(checkWindow)
	wantRefusal(t, n.pull(t, ws, c.ID, tok), 403, "producer.not_registered")
	// Revoke is idempotent; secret routes still work while revoked.
	n.do(t, "POST", connPath(ws, c.ID)+"/revoke", opKey, nil).Must(t, 200)

	// A revoked producer cannot publish.
	n.do(t, "POST", connPath(ws, p.ID)+"/revoke", opKey, nil).Must(t, 200)
	wantRefusal(t, n.publish(t, ws, ptok, "refused"), 403, "producer.not_registered")
	n.do(t, "POST", connPath(ws, p.ID)+"/restore", opKey, nil).Must(t, 200)
	n.publish(t, ws, ptok, "after-restore").Must(t, 202)

	n.do(t, "POST", connPath(ws, c.ID)+"/restore", opKey, nil).Must(t, 200).Decode(t, &v)
	if v.Status != "active" || v.CredentialVersion != 1 {
		t.Fatalf("after restore: %+v", v)
	}
	// The old token works again, and so does the same secret.
	var got struct {
		Messages []servertest.Message `json:"messages"`
	}
	n.pull(t, ws, c.ID, tok).Must(t, 200).Decode(t, &got)
	if len(got.Messages) != 1 || got.Messages[0].MessageID() != "while-revoked" {
		t.Fatalf("after restore: %+v", got.Messages)
	}
	n.pull(t, ws, c.ID, n.token(t, c.ID, s.ClientSecret)).Must(t, 200)
	n.do(t, "POST", connPath(ws, c.ID)+"/restore", opKey, nil).Must(t, 200)

	gotA := actions(n.auditLog(t, ws))
	want := []string{"connection.restore", "connection.restore", "connection.revoke", "connection.revoke", "secret.issue", "secret.issue",
		"connection.create", "connection.create", "workspace.create"}
	if !slices.Equal(gotA, want) {
		t.Fatalf("audit %v, want %v", gotA, want)
	}
}

// TestRevokeReachesOtherNodes: a node that shares the store sees a change
// made on another one within the 30 seconds (its cache window, 10 s).
func TestRevokeReachesOtherNodes(t *testing.T) {
	t.Parallel()
	const public = "https://bus.example"
	// Two nodes share a store only on PostgreSQL: the embedded store
	// refuses a second process (or store) on its file.
	storeURL := pgtest.URL(t)
	a := startWith(t, servertest.Options{Store: storeURL, PublicURL: public})
	b := startWith(t, servertest.Options{Store: storeURL, Clock: a.Clock, PublicURL: public})
	ws := a.workspace(t, opKey, "two nodes")
	c := a.connection(t, ws, "consumer", nil)
	s := a.issue(t, ws, c.ID)
	tok := a.token(t, c.ID, s.ClientSecret)
	b.pull(t, ws, c.ID, tok).Must(t, 200) // b caches the connection

	a.do(t, "POST", connPath(ws, c.ID)+"/revoke", opKey, nil).Must(t, 200)
	wantRefusal(t, a.pull(t, ws, c.ID, tok), 403, "producer.not_registered")
	wantOAuthError(t, b.tokenResp(t, c.ID, s.ClientSecret), 401, "invalid_client")
	a.advance(checkWindow)
	wantRefusal(t, b.pull(t, ws, c.ID, tok), 403, "producer.not_registered")

	a.do(t, "POST", connPath(ws, c.ID)+"/restore", opKey, nil).Must(t, 200)
	a.advance(checkWindow)
	b.pull(t, ws, c.ID, tok).Must(t, 200)

	s2 := a.rotate(t, ws, c.ID, "none")
	a.advance(checkWindow)
	wantRefusal(t, b.pull(t, ws, c.ID, tok), 401, "producer.unauthenticated")
	b.pull(t, ws, c.ID, b.token(t, c.ID, s2.ClientSecret)).Must(t, 200)
}

// TestRemoveConnection: tokens 403, the secret is gone, the queue is gone.
func TestRemoveConnection(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "remove")
	p := n.connection(t, ws, "producer", nil)
	c := n.connection(t, ws, "consumer", map[string]any{"subscriptions": []any{map[string]any{"topic": "som.>"}}})
	ptok := n.token(t, p.ID, n.issue(t, ws, p.ID).ClientSecret)
	s := n.issue(t, ws, c.ID)
	tok := n.token(t, c.ID, s.ClientSecret)
	n.publish(t, ws, ptok, "m1").Must(t, 202)

	n.do(t, "DELETE", connPath(ws, c.ID), opKey, nil).Must(t, 204)
	msg := wantRefusal(t, n.pull(t, ws, c.ID, tok), 403, "producer.not_registered")
	wantMessage(t, msg, "removed")
	wantOAuthError(t, n.tokenResp(t, c.ID, s.ClientSecret), 401, "invalid_client")
	n.advance(checkWindow)
	wantRefusal(t, n.pull(t, ws, c.ID, tok), 403, "producer.not_registered")
	wantRefusal(t, n.do(t, "GET", connPath(ws, c.ID), opKey, nil), 404, "manage.not_found")
	var pub map[string]any
	n.publish(t, ws, ptok, "m2").Must(t, 202).Decode(t, &pub)
	if pub["deliveries"] != 0.0 {
		t.Fatalf("published into a removed queue: %v", pub)
	}
	n.do(t, "DELETE", connPath(ws, p.ID), opKey, nil).Must(t, 204)
	wantRefusal(t, n.publish(t, ws, ptok, "m3"), 403, "producer.not_registered")
	es := n.auditLog(t, ws)
	if es[0].Action != "connection.remove" || es[0].Target != p.ID || es[1].Action != "connection.remove" || es[1].Target != c.ID {
		t.Fatalf("audit %v", actions(es))
	}
}

// TestTokenExpiry: a token works for its hour and is refused after it.
func TestTokenExpiry(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "expiry")
	c := n.connection(t, ws, "consumer", nil)
	s := n.issue(t, ws, c.ID)
	tok := n.token(t, c.ID, s.ClientSecret)
	cl := claims(t, tok)
	if cl["exp"].(float64)-cl["iat"].(float64) != 3600 {
		t.Fatalf("token lifetime %v", cl)
	}
	n.advance(59*time.Minute + 59*time.Second)
	n.pull(t, ws, c.ID, tok).Must(t, 200)
	n.advance(time.Second + 6*time.Second) // past exp and the verifier's 5 s leeway
	msg := wantRefusal(t, n.pull(t, ws, c.ID, tok), 401, "producer.unauthenticated")
	wantMessage(t, msg, "expired")
	n.pull(t, ws, c.ID, n.token(t, c.ID, s.ClientSecret)).Must(t, 200)
}
