package httpapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/openapi/openapitest"
	"github.com/sombus/sombus/internal/server/servertest"
)

// opKey is the bootstrap operator's API key.
const opKey = servertest.BootstrapKey

// syncBuffer is a bytes.Buffer safe for concurrent writers (the node's log).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// node is a test node with the helpers these tests use. Every answer it
// reads is checked against the OpenAPI document.
type node struct {
	*servertest.Node
	dir  string      // holds the SQLite file
	logs *syncBuffer // every log line, debug and up
}

// start starts a node on a fresh SQLite file whose logs are captured.
func start(t *testing.T) *node {
	t.Helper()
	return startWith(t, servertest.Options{})
}

func startWith(t *testing.T, o servertest.Options) *node {
	t.Helper()
	dir := servertest.TempDir(t)
	logs := &syncBuffer{}
	if o.Store == "" {
		o.Store = "sqlite:" + filepath.Join(dir, "sombus.db")
	}
	if o.Logs == nil {
		o.Logs = logs
	}
	n := &node{Node: servertest.Start(t, o), dir: dir, logs: logs}
	return n
}

// advance moves the node's clock.
func (n *node) advance(d time.Duration) { n.ManualClock().Advance(d) }

// send sends req, reads the answer whole and checks it against the document.
func (n *node) send(t testing.TB, req *http.Request) *servertest.Response {
	t.Helper()
	resp, err := n.HTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	openapitest.Validate(t, req, resp, b)
	return &servertest.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// do sends a JSON request (a string or []byte body is sent as is) with an
// optional bearer credential.
func (n *node) do(t testing.TB, method, path, bearer string, body any) *servertest.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		switch b := body.(type) {
		case string:
			rd = strings.NewReader(b)
		case []byte:
			rd = bytes.NewReader(b)
		default:
			j, err := json.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			rd = bytes.NewReader(j)
		}
	}
	req, err := http.NewRequest(method, n.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return n.send(t, req)
}

// raw sends a request with a body and explicit headers.
func (n *node) raw(t testing.TB, method, path string, body []byte, headers map[string]string) *servertest.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, n.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return n.send(t, req)
}

// wantRefusal checks a refusal: status, the usual body and its first rule;
// it returns the first violation's message.
func wantRefusal(t testing.TB, r *servertest.Response, status int, rule string) string {
	t.Helper()
	var b struct {
		Accepted   *bool           `json:"accepted"`
		Violations []bus.Violation `json:"violations"`
	}
	if err := json.Unmarshal(r.Body, &b); err != nil {
		t.Fatalf("refusal body is not JSON (status %d): %q", r.Status, r.Body)
	}
	if r.Status != status || len(b.Violations) == 0 || b.Violations[0].Rule != rule {
		t.Fatalf("got %d %s, want %d %s", r.Status, r.Body, status, rule)
	}
	if b.Accepted == nil || *b.Accepted {
		t.Fatalf("refusal without \"accepted\": false: %s", r.Body)
	}
	if b.Violations[0].Message == "" {
		t.Fatalf("refusal without a message: %s", r.Body)
	}
	return b.Violations[0].Message
}

// wantMessage checks that a refusal's message names each of words.
func wantMessage(t testing.TB, msg string, words ...string) {
	t.Helper()
	for _, w := range words {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q does not name %q", msg, w)
		}
	}
}

// workspace creates a workspace with key (its creator becomes owner).
func (n *node) workspace(t testing.TB, key, name string) string {
	t.Helper()
	var w bus.Workspace
	n.do(t, "POST", "/v1/manage/workspaces", key, map[string]any{"name": name}).Must(t, 201).Decode(t, &w)
	return w.ID
}

// user creates a user as the operator and returns its id and a fresh key.
func (n *node) user(t testing.TB, name string, operator bool) (id, key string) {
	t.Helper()
	var u bus.User
	email := strings.ToLower(strings.ReplaceAll(name, " ", ".")) + "." + bus.NewID("x") + "@example.com"
	n.do(t, "POST", "/v1/manage/users", opKey, map[string]any{"name": name, "email": email, "operator": operator}).Must(t, 201).Decode(t, &u)
	var k struct {
		APIKey string `json:"api_key"`
	}
	n.do(t, "POST", "/v1/manage/users/"+u.ID+"/keys", opKey, nil).Must(t, 201).Decode(t, &k)
	return u.ID, k.APIKey
}

// member gives a user a role in a workspace (as the operator, its owner).
func (n *node) member(t testing.TB, ws, userID string, role bus.Role) {
	t.Helper()
	n.do(t, "PUT", "/v1/manage/workspaces/"+ws+"/members/"+userID, opKey, map[string]any{"role": role}).Must(t, 200)
}

// conn is a connection as the management API shows it.
type conn struct {
	ID                string             `json:"id"`
	WorkspaceID       string             `json:"workspace_id"`
	Kind              string             `json:"kind"`
	Name              string             `json:"name"`
	Status            string             `json:"status"`
	AttemptLimit      int                `json:"attempt_limit"`
	QuotaTier         string             `json:"quota_tier"`
	CredentialVersion int64              `json:"credential_version"`
	Subscriptions     []bus.Subscription `json:"subscriptions"`
	Secret            struct {
		State             string  `json:"state"`
		IssuedAt          *string `json:"issued_at"`
		PreviousExpiresAt *string `json:"previous_expires_at"`
	} `json:"secret"`
	CreatedAt string `json:"created_at"`
	Ready     *int64 `json:"ready"`
}

// connection creates a connection as the operator; extra is merged into the body.
func (n *node) connection(t testing.TB, ws, kind string, extra map[string]any) conn {
	t.Helper()
	body := map[string]any{"kind": kind, "name": kind + " app"}
	for k, v := range extra {
		body[k] = v
	}
	var c conn
	n.do(t, "POST", connsPath(ws), opKey, body).Must(t, 201).Decode(t, &c)
	return c
}

// getConn reads a connection as the operator.
func (n *node) getConn(t testing.TB, ws, id string) conn {
	t.Helper()
	var c conn
	n.do(t, "GET", connPath(ws, id), opKey, nil).Must(t, 200).Decode(t, &c)
	return c
}

func connsPath(ws string) string    { return "/v1/manage/workspaces/" + ws + "/connections" }
func connPath(ws, id string) string { return connsPath(ws) + "/" + id }
func auditPath(ws string) string    { return "/v1/manage/workspaces/" + ws + "/audit" }
func pullPath(ws, c string) string {
	return "/v1/tenants/" + ws + "/consumers/" + c + "/messages?wait=0"
}
func skillsPath(ws, c string) string { return "/v1/tenants/" + ws + "/consumers/" + c + "/skills" }
func publishPath(ws string) string   { return "/v1/tenants/" + ws + "/messages" }

// issue is "Get client secret" as the operator.
func (n *node) issue(t testing.TB, ws, id string) bus.SecretIssued {
	t.Helper()
	var s bus.SecretIssued
	n.do(t, "POST", connPath(ws, id)+"/secret", opKey, nil).Must(t, 201).Decode(t, &s)
	return s
}

// rotate rotates a secret as the operator ("" leaves overlap out).
func (n *node) rotate(t testing.TB, ws, id, overlap string) bus.SecretIssued {
	t.Helper()
	var body any
	if overlap != "" {
		body = map[string]any{"overlap": overlap}
	}
	var s bus.SecretIssued
	n.do(t, "POST", connPath(ws, id)+"/secret/rotate", opKey, body).Must(t, 201).Decode(t, &s)
	return s
}

// tokenForm posts a form to the token endpoint, with HTTP Basic when
// basicID is not "".
func (n *node) tokenForm(t testing.TB, form url.Values, basicID, basicSecret string) *servertest.Response {
	t.Helper()
	req, err := http.NewRequest("POST", n.URL+"/v1/oauth/token", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if basicID != "" {
		req.SetBasicAuth(basicID, basicSecret)
	}
	return n.send(t, req)
}

// tokenResp asks for a token with HTTP Basic.
func (n *node) tokenResp(t testing.TB, id, secret string) *servertest.Response {
	t.Helper()
	return n.tokenForm(t, url.Values{"grant_type": {"client_credentials"}}, id, secret)
}

// token asks for a token with HTTP Basic and fails unless it gets one.
func (n *node) token(t testing.TB, id, secret string) string {
	t.Helper()
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	n.tokenResp(t, id, secret).Must(t, 200).Decode(t, &tr)
	if tr.AccessToken == "" {
		t.Fatal("no access_token")
	}
	return tr.AccessToken
}

// wantOAuthError checks an RFC 6749 error answer.
func wantOAuthError(t testing.TB, r *servertest.Response, status int, code string) {
	t.Helper()
	var b struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &b)
	if r.Status != status || b.Error != code {
		t.Fatalf("token endpoint: got %d %s, want %d {\"error\":%q}", r.Status, r.Body, status, code)
	}
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("token error without Cache-Control: no-store: %v", r.Header)
	}
	if status == 401 && r.Header.Get("WWW-Authenticate") != `Basic realm="sombus"` {
		t.Errorf("401 WWW-Authenticate = %q", r.Header.Get("WWW-Authenticate"))
	}
}

// claims decodes a token's payload without verifying it.
func claims(t testing.TB, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token is not a JWS compact serialization: %d dot-separated parts, %d bytes", len(parts), len(token))
	}
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

// pull is a receive that answers at once; a consumer route behind the
// token checks.
func (n *node) pull(t testing.TB, ws, c, token string) *servertest.Response {
	t.Helper()
	return n.do(t, "GET", pullPath(ws, c), token, nil)
}

// publish publishes one valid envelope.
func (n *node) publish(t testing.TB, ws, token, messageID string) *servertest.Response {
	t.Helper()
	return n.do(t, "POST", publishPath(ws), token, servertest.Envelope(messageID, "story-1", nil))
}

// auditEntry is one entry of the audit log.
type auditEntry struct {
	ID      string         `json:"id"`
	At      string         `json:"at"`
	Actor   string         `json:"actor"`
	Action  string         `json:"action"`
	Target  string         `json:"target"`
	Details map[string]any `json:"details"`
}

// auditLog reads a workspace's whole audit log, newest first, page by page.
func (n *node) auditLog(t testing.TB, ws string) []auditEntry {
	t.Helper()
	return n.auditLogAs(t, ws, opKey)
}

// auditLogAs reads the audit log with key.
func (n *node) auditLogAs(t testing.TB, ws, key string) []auditEntry {
	t.Helper()
	var all []auditEntry
	cursor := ""
	for range 1000 {
		path := auditPath(ws) + "?limit=100"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		var page struct {
			Entries    []auditEntry `json:"entries"`
			NextCursor *string      `json:"next_cursor"`
		}
		n.do(t, "GET", path, key, nil).Must(t, 200).Decode(t, &page)
		all = append(all, page.Entries...)
		if page.NextCursor == nil {
			return all
		}
		cursor = *page.NextCursor
	}
	t.Fatal("audit paging does not end")
	return nil
}

// actions lists the actions of entries in order.
func actions(es []auditEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Action
	}
	return out
}

// storeBytes reads the SQLite database and its WAL and journal files whole.
func (n *node) storeBytes(t testing.TB) []byte {
	t.Helper()
	var all []byte
	files, _ := filepath.Glob(filepath.Join(n.dir, "sombus.db*"))
	if len(files) == 0 {
		t.Fatal("no SQLite file")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

// ctx is a context for direct store reads.
func ctx(t testing.TB) context.Context {
	t.Helper()
	return t.Context()
}
