// Package servertest starts real sombus nodes for tests (port 0, a temp
// SQLite file or a PostgreSQL schema, an injected clock) and speaks the HTTP
// API to them with small helpers. No part of the bus is mocked.
package servertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/openapi/openapitest"
	"github.com/sombus/sombus/internal/server"
)

// BootstrapKey is the first operator's API key on test nodes.
const BootstrapKey = "sbk_test-bootstrap-key-0123456789abcdef"

// Options tune a test node.
type Options struct {
	// Store is a --store value; "" is a fresh SQLite file in TempDir(t).
	Store string
	// Clock drives every rule; nil is a ManualClock at a fixed instant.
	Clock bus.Clock
	// TiersFile is passed to --tiers.
	TiersFile string
	// CheckTTL overrides the token checks' cache time.
	CheckTTL time.Duration
	// Logs, when set, receives every log line of the node, debug level and
	// up, instead of t.Log (tests that look for what must never be logged).
	// It must be safe for concurrent use.
	Logs io.Writer
	// PublicURL is passed to --public-url (nodes sharing a store share it,
	// so that each accepts the others' tokens); "" is the node's own URL.
	PublicURL string
	// ValidateOpenAPI checks every answer Send reads against the OpenAPI
	// document (openapitest.Validate), failing the node's test on a mismatch.
	ValidateOpenAPI bool
	// MetricsListen is passed to --metrics-listen.
	MetricsListen string
	// WrapStore is passed to the node's Config.WrapStore (a store that
	// fails on demand, say).
	WrapStore func(bus.Store) bus.Store
	// StoreTimeout is passed to --store-timeout (0: its default).
	StoreTimeout time.Duration
	// BodyTimeout is passed to --body-timeout (0: its default).
	BodyTimeout time.Duration
}

// TempDir is a temporary directory in memory (/dev/shm) when the machine
// has one, else t.TempDir(): the SQLite store syncs every commit
// (synchronous=FULL), and on a slow disk tests would wait far more than they
// work. Tests of durability across restarts still pass on it (the process
// stops, the memory does not); pick t.TempDir() to test the disk itself.
func TempDir(t testing.TB) string {
	t.Helper()
	if dir, err := os.MkdirTemp("/dev/shm", "sombus-test-"); err == nil {
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		return dir
	}
	return t.TempDir()
}

// Node is a running test node.
type Node struct {
	T      testing.TB
	Server *server.Server
	URL    string
	Clock  bus.Clock
	HTTP   *http.Client
	closed bool
	// validate is Options.ValidateOpenAPI.
	validate bool
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Start starts a node and stops it when the test ends.
func Start(t testing.TB, o Options) *Node {
	t.Helper()
	if o.Store == "" {
		o.Store = "sqlite:" + filepath.Join(TempDir(t), "sombus.db")
	}
	if o.Clock == nil {
		o.Clock = bus.NewManualClock(time.Date(2026, 9, 25, 10, 15, 2, 114e6, time.UTC))
	}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if o.Logs != nil {
		logger = slog.New(slog.NewTextHandler(o.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	srv, err := server.New(context.Background(), server.Config{
		Listen: "127.0.0.1:0", Store: o.Store, Environment: "sandbox", BootstrapKey: BootstrapKey,
		TiersFile: o.TiersFile, Clock: o.Clock, Logger: logger, CheckTTL: o.CheckTTL, PublicURL: o.PublicURL,
		ShutdownGrace: 5 * time.Second, MetricsListen: o.MetricsListen, WrapStore: o.WrapStore,
		StoreTimeout: o.StoreTimeout, BodyTimeout: o.BodyTimeout,
	})
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	n := &Node{T: t, Server: srv, URL: srv.URL, Clock: o.Clock, HTTP: &http.Client{Timeout: 60 * time.Second}, validate: o.ValidateOpenAPI}
	t.Cleanup(n.Close)
	return n
}

// Close stops the node (once).
func (n *Node) Close() {
	if n.closed {
		return
	}
	n.closed = true
	n.HTTP.CloseIdleConnections()
	if err := n.Server.Close(); err != nil {
		n.T.Errorf("close node: %v", err)
	}
}

// ManualClock returns the node's clock as a ManualClock (fails otherwise).
func (n *Node) ManualClock() *bus.ManualClock {
	c, ok := n.Clock.(*bus.ManualClock)
	if !ok {
		n.T.Fatalf("node clock is not a ManualClock")
	}
	return c
}

// Response is an answer read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a map.
func (r *Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("answer is not a JSON object (status %d): %q", r.Status, r.Body)
	}
	return m
}

// Decode decodes the body into v.
func (r *Response) Decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode answer (status %d): %v: %q", r.Status, err, r.Body)
	}
}

// String is the status and the body, for failure messages.
func (r *Response) String() string {
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body))
}

// Rule returns the first violation's rule of a refusal body ("" if none).
func (r *Response) Rule() string {
	var b struct {
		Violations []bus.Violation `json:"violations"`
	}
	_ = json.Unmarshal(r.Body, &b)
	if len(b.Violations) == 0 {
		return ""
	}
	return b.Violations[0].Rule
}

// Do sends a request with an optional bearer credential and JSON body
// (a string or []byte is sent as is, anything else is marshalled), failing
// the test if it cannot be sent.
func (n *Node) Do(method, path, bearer string, body any) *Response {
	n.T.Helper()
	r, err := Call(context.Background(), n.HTTP, n.URL, method, path, bearer, body)
	if err != nil {
		n.T.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// Call sends a request to any node at baseURL with an optional bearer
// credential and JSON body (a string or []byte is sent as is, anything else
// is marshalled) and reads the answer whole. It returns errors instead of
// failing a test, so it is safe from any goroutine.
func Call(ctx context.Context, c *http.Client, baseURL, method, path, bearer string, body any) (*Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("marshal body: %w", err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, baseURL+path, rd)
	if err != nil {
		return nil, err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read answer: %w", err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// Send sends a prepared request and reads the answer whole.
func (n *Node) Send(req *http.Request) *Response {
	n.T.Helper()
	resp, err := n.HTTP.Do(req)
	if err != nil {
		n.T.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		n.T.Fatalf("read answer: %v", err)
	}
	if n.validate {
		openapitest.Validate(n.T, req, resp, b)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Must fails the test unless the answer has status want; it returns r.
func (r *Response) Must(t testing.TB, want int) *Response {
	t.Helper()
	if r.Status != want {
		t.Fatalf("status %d, want %d: %s", r.Status, want, r.Body)
	}
	return r
}

// Workspace creates a workspace as the bootstrap operator and returns its id.
func (n *Node) Workspace(name string) string {
	n.T.Helper()
	var w bus.Workspace
	n.Do("POST", "/v1/manage/workspaces", BootstrapKey, map[string]any{"name": name}).Must(n.T, 201).Decode(n.T, &w)
	return w.ID
}

// Connection creates a connection; extra fields (subscriptions,
// attempt_limit, quota_tier) are merged into the body.
func (n *Node) Connection(ws, kind string, extra map[string]any) string {
	n.T.Helper()
	body := map[string]any{"kind": kind, "name": kind + " connection"}
	for k, v := range extra {
		body[k] = v
	}
	var c struct {
		ID string `json:"id"`
	}
	n.Do("POST", "/v1/manage/workspaces/"+ws+"/connections", BootstrapKey, body).Must(n.T, 201).Decode(n.T, &c)
	return c.ID
}

// Secret issues ("Get client secret") and returns the client secret.
func (n *Node) Secret(ws, conn string) string {
	n.T.Helper()
	var s bus.SecretIssued
	n.Do("POST", "/v1/manage/workspaces/"+ws+"/connections/"+conn+"/secret", BootstrapKey, nil).Must(n.T, 201).Decode(n.T, &s)
	return s.ClientSecret
}

// TokenResponse posts to the token endpoint with HTTP Basic.
func (n *Node) TokenResponse(clientID, secret string) *Response {
	n.T.Helper()
	req, err := http.NewRequestWithContext(context.Background(), "POST", n.URL+"/v1/oauth/token", strings.NewReader(url.Values{"grant_type": {"client_credentials"}}.Encode()))
	if err != nil {
		n.T.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(clientID, secret)
	return n.Send(req)
}

// FetchToken swaps a connection's credentials for an access token at the
// token endpoint of the node at baseURL, through c; an answer other than
// 200 is an error naming its status and body. For callers that are not a
// test's Node (a process started apart, a load run).
func FetchToken(ctx context.Context, c *http.Client, baseURL, clientID, secret string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", baseURL+"/v1/oauth/token",
		strings.NewReader(url.Values{"grant_type": {"client_credentials"}}.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(clientID, secret)
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &tr) != nil {
		return "", fmt.Errorf("token: %d %.300s", resp.StatusCode, b)
	}
	return tr.AccessToken, nil
}

// Token swaps credentials for an access token (fails the test otherwise).
func (n *Node) Token(clientID, secret string) string {
	n.T.Helper()
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	n.TokenResponse(clientID, secret).Must(n.T, 200).Decode(n.T, &tr)
	return tr.AccessToken
}

// Pair is a workspace with one producer and one consumer connection whose
// subscription takes every topic, each with a token.
type Pair struct {
	WS                     string
	Producer, Consumer     string
	ProducerSecret         string
	ConsumerSecret         string
	ProducerTok, ConsumTok string
}

// NewPair makes a Pair; consumerExtra is merged into the consumer's create body.
func (n *Node) NewPair(consumerExtra map[string]any) *Pair {
	n.T.Helper()
	p := &Pair{WS: n.Workspace("test")}
	p.Producer = n.Connection(p.WS, "producer", nil)
	extra := map[string]any{"subscriptions": []map[string]any{{"topic": "som.>"}}}
	for k, v := range consumerExtra {
		extra[k] = v
	}
	p.Consumer = n.Connection(p.WS, "consumer", extra)
	p.ProducerSecret = n.Secret(p.WS, p.Producer)
	p.ConsumerSecret = n.Secret(p.WS, p.Consumer)
	p.ProducerTok = n.Token(p.Producer, p.ProducerSecret)
	p.ConsumTok = n.Token(p.Consumer, p.ConsumerSecret)
	return p
}

// Envelope returns a valid envelope.
func Envelope(messageID, correlationID string, payload map[string]any) map[string]any {
	if payload == nil {
		payload = map[string]any{}
	}
	return map[string]any{"som_version": "1.0.0", "message_id": messageID, "message_type": "story.context",
		"correlation_id": correlationID, "payload": payload}
}

// Publish publishes one envelope as the pair's producer.
func (n *Node) Publish(p *Pair, env any) *Response {
	n.T.Helper()
	return n.Do("POST", "/v1/tenants/"+p.WS+"/messages", p.ProducerTok, env)
}

// Message is a received message.
type Message struct {
	ReceiptHandle string          `json:"receipt_handle"`
	MessageType   string          `json:"message_type"`
	CorrelationID string          `json:"correlation_id"`
	Topic         string          `json:"topic"`
	ProducerID    string          `json:"producer_id"`
	ReceiveCount  int             `json:"receive_count"`
	EnqueuedAt    string          `json:"enqueued_at"`
	Envelope      json.RawMessage `json:"envelope"`
}

// MessageID reads the envelope's message_id.
func (m Message) MessageID() string {
	var e struct {
		MessageID string `json:"message_id"`
	}
	_ = json.Unmarshal(m.Envelope, &e)
	return e.MessageID
}

// Receive receives with a raw query string ("max=10&wait=0").
func (n *Node) Receive(p *Pair, query string) []Message {
	n.T.Helper()
	var out struct {
		Messages []Message `json:"messages"`
	}
	n.Do("GET", "/v1/tenants/"+p.WS+"/consumers/"+p.Consumer+"/messages?"+query, p.ConsumTok, nil).Must(n.T, 200).Decode(n.T, &out)
	return out.Messages
}

// Settle acks (or nacks) handles and returns the answer.
func (n *Node) Settle(p *Pair, verb string, handles []string, delay *int) *Response {
	n.T.Helper()
	body := map[string]any{"receipt_handles": handles}
	if delay != nil {
		body["delay_seconds"] = *delay
	}
	return n.Do("POST", "/v1/tenants/"+p.WS+"/consumers/"+p.Consumer+"/"+verb, p.ConsumTok, body)
}

// NewPairWith makes a Pair whose producer create body gets producerExtra
// (quota_tier, for example) and whose consumer's gets consumerExtra.
func (n *Node) NewPairWith(producerExtra, consumerExtra map[string]any) *Pair {
	n.T.Helper()
	p := &Pair{WS: n.Workspace("test")}
	p.Producer = n.Connection(p.WS, "producer", producerExtra)
	p.ProducerSecret = n.Secret(p.WS, p.Producer)
	p.ProducerTok = n.Token(p.Producer, p.ProducerSecret)
	return n.AddConsumer(p, consumerExtra)
}

// AddConsumer creates another consumer connection (subscribed to "som.>"
// unless consumerExtra says otherwise) in p's workspace and returns a Pair
// with p's producer and the new consumer.
func (n *Node) AddConsumer(p *Pair, consumerExtra map[string]any) *Pair {
	n.T.Helper()
	q := *p
	extra := map[string]any{"subscriptions": []map[string]any{{"topic": "som.>"}}}
	for k, v := range consumerExtra {
		extra[k] = v
	}
	q.Consumer = n.Connection(p.WS, "consumer", extra)
	q.ConsumerSecret = n.Secret(p.WS, q.Consumer)
	q.ConsumTok = n.Token(q.Consumer, q.ConsumerSecret)
	return &q
}

// PublishBatch publishes envelopes in one batch as the pair's producer.
func (n *Node) PublishBatch(p *Pair, envs []any) *Response {
	n.T.Helper()
	return n.Do("POST", "/v1/tenants/"+p.WS+"/messages/batch", p.ProducerTok, map[string]any{"messages": envs})
}

// QueueCounts reads the consumer's queue counts from GET …/connections/{c}.
func (n *Node) QueueCounts(p *Pair) bus.QueueStats {
	n.T.Helper()
	var st bus.QueueStats
	n.Do("GET", "/v1/manage/workspaces/"+p.WS+"/connections/"+p.Consumer, BootstrapKey, nil).Must(n.T, 200).Decode(n.T, &st)
	return st
}

// Maintain runs one round of the node's background work now.
func (n *Node) Maintain() {
	n.T.Helper()
	if _, err := n.Server.Service().Maintain(context.Background()); err != nil {
		n.T.Fatalf("maintain: %v", err)
	}
}

// Try is Do for other goroutines than the test's: it never fails the test,
// it returns the error (a refused connection after the node stopped, ctx
// ending). body is sent as JSON when not nil (see Do).
func (n *Node) Try(ctx context.Context, method, path, bearer string, body any) (*Response, error) {
	return Call(ctx, n.HTTP, n.URL, method, path, bearer, body)
}

// MessagesPath is the receive route of p's consumer.
func (p *Pair) MessagesPath() string {
	return "/v1/tenants/" + p.WS + "/consumers/" + p.Consumer + "/messages"
}

// SettlePath is the ack or nack route (verb "ack" or "nack") of p's consumer.
func (p *Pair) SettlePath(verb string) string {
	return "/v1/tenants/" + p.WS + "/consumers/" + p.Consumer + "/" + verb
}

// PublishPath is the single publish route of p's workspace.
func (p *Pair) PublishPath() string { return "/v1/tenants/" + p.WS + "/messages" }
