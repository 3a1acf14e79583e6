// Package storetest is the behaviour every bus.Store must show: the rules of
// internal/store/SPEC.md, written as tests. Each store runs it from its own
// conformance test:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) bus.Store { return openFreshStore(t) })
//	}
//
// Every subtest opens its own empty store, so the subtests run in parallel.
// Time comes only from the Now fields of the params (a base time plus
// durations); nothing sleeps.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// T0 is the base time of every test: far from the wall clock, so a store
// that reads its own clock instead of Now fails.
var T0 = time.Date(2030, 3, 4, 5, 6, 7, 0, time.UTC)

// at is T0 plus d.
func at(d time.Duration) time.Time { return T0.Add(d) }

// test is one rule (or a few close ones) checked against a fresh store.
type test struct {
	name string
	fn   func(e *env)
}

// group is a named set of tests.
type group struct {
	name  string
	tests []test
}

// Run runs the whole conformance suite. open must return a fresh, empty
// store for the test it is given, and arrange for it to be closed (t.Cleanup).
func Run(t *testing.T, open func(t *testing.T) bus.Store) {
	groups := []group{
		{"Management", managementTests},
		{"Sessions", sessionTests},
		{"Publish", publishTests},
		{"Routing", routingTests},
		{"Receive", receiveTests},
		{"Ack", ackTests},
		{"Nack", nackTests},
		{"DeadLetters", deadLetterTests},
		{"AttemptID", attemptTests},
		{"Stats", statsTests},
		{"Metrics", metricsTests},
		{"QueueSamples", sampleTests},
		{"AuditSearch", auditSearchTests},
		{"ConnectionPages", connectionPageTests},
		{"Purge", purgeTests},
		{"Maintain", maintainTests},
		{"Concurrency", concurrencyTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					s := open(t)
					if s == nil {
						t.Fatal("open returned a nil store")
					}
					tc.fn(&env{t: t, s: s, ctx: t.Context()})
				})
			}
		})
	}
}

// Logger returns a logger that writes to t.Log until the test ends. Both
// stores' tests use it.
func Logger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	// Registered first, so it runs after every later cleanup (a store
	// closing may still log); from then on lines are dropped, since t.Log
	// after the test ended panics.
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testWriter sends log lines to t.Log.
type testWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// env is one test's store and helpers that fail the test on error.
type env struct {
	t   *testing.T
	s   bus.Store
	ctx context.Context
}

func (e *env) update(fn func(tx bus.Tx) error) {
	e.t.Helper()
	if err := e.s.Update(e.ctx, fn); err != nil {
		e.t.Fatalf("Update: %v", err)
	}
}

func (e *env) view(fn func(tx bus.Tx) error) {
	e.t.Helper()
	if err := e.s.View(e.ctx, fn); err != nil {
		e.t.Fatalf("View: %v", err)
	}
}

// workspace creates a workspace and returns its id.
func (e *env) workspace() string {
	e.t.Helper()
	id := bus.NewID(bus.PrefixWorkspace)
	e.update(func(tx bus.Tx) error {
		return tx.WorkspaceCreate(bus.Workspace{ID: id, Name: "ws " + id, CreatedAt: T0})
	})
	return id
}

// connection returns a connection value with every required field set.
func connection(ws string, kind bus.ConnectionKind, attemptLimit int, subs ...bus.Subscription) bus.Connection {
	return bus.Connection{
		ID:                bus.NewID(bus.PrefixConnection),
		WorkspaceID:       ws,
		Kind:              kind,
		Name:              string(kind),
		Status:            bus.StatusActive,
		AttemptLimit:      attemptLimit,
		QuotaTier:         "standard",
		CredentialVersion: 1,
		Subscriptions:     subs,
		CreatedAt:         T0,
		UpdatedAt:         T0,
		SecretState:       bus.SecretNone,
	}
}

// consumer creates a consumer connection (its queue) and returns its id.
func (e *env) consumer(ws string, attemptLimit int, topics ...string) string {
	e.t.Helper()
	var subs []bus.Subscription
	for _, tp := range topics {
		subs = append(subs, bus.Subscription{Topic: tp})
	}
	return e.consumerSubs(ws, attemptLimit, subs...)
}

func (e *env) consumerSubs(ws string, attemptLimit int, subs ...bus.Subscription) string {
	e.t.Helper()
	c := connection(ws, bus.KindConsumer, attemptLimit, subs...)
	e.update(func(tx bus.Tx) error { return tx.ConnectionCreate(c) })
	return c.ID
}

// producer creates a producer connection and returns its id.
func (e *env) producer(ws string) string {
	e.t.Helper()
	c := connection(ws, bus.KindProducer, 5)
	e.update(func(tx bus.Tx) error { return tx.ConnectionCreate(c) })
	return c.ID
}

// setAttemptLimit changes a connection's attempt limit.
func (e *env) setAttemptLimit(id string, limit int) {
	e.t.Helper()
	e.update(func(tx bus.Tx) error {
		c, err := tx.ConnectionGet(id)
		if err != nil {
			return err
		}
		c.AttemptLimit = limit
		return tx.ConnectionUpdate(c)
	})
}

// fixture is a workspace with one producer and one consumer queue that
// subscribes to everything.
type fixture struct {
	WS, P, Q string
}

func (e *env) fixture(attemptLimit int) fixture {
	e.t.Helper()
	ws := e.workspace()
	return fixture{WS: ws, P: e.producer(ws), Q: e.consumer(ws, attemptLimit, "som.>")}
}

// envelope is the bytes of a plain envelope for a message.
func envelope(id, typ, corr string) []byte {
	return fmt.Appendf(nil, `{"som_version":"1.0.0","message_id":%q,"message_type":%q,"correlation_id":%q,"payload":{"n":%q}}`, id, typ, corr, id)
}

// msg is a message of story corr with type "story.context".
func msg(id, corr string) bus.PublishMessage { return msgT(id, "story.context", corr) }

func msgT(id, typ, corr string) bus.PublishMessage {
	return bus.PublishMessage{MessageID: id, MessageType: typ, Topic: bus.TopicOf(typ), CorrelationID: corr, Envelope: envelope(id, typ, corr)}
}

const dedupWindow = 5 * time.Minute

func (e *env) publish(ws, producer string, now time.Time, msgs ...bus.PublishMessage) []bus.PublishOutcome {
	e.t.Helper()
	out, err := e.s.MessagePublish(e.ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: producer, Messages: msgs, Now: now, DedupWindow: dedupWindow})
	if err != nil {
		e.t.Fatalf("MessagePublish: %v", err)
	}
	if len(out) != len(msgs) {
		e.t.Fatalf("MessagePublish: %d outcomes for %d messages", len(out), len(msgs))
	}
	return out
}

// pub publishes messages with the given ids, in order, into story corr of
// the fixture, in one call.
func (e *env) pub(f fixture, now time.Time, corr string, ids ...string) {
	e.t.Helper()
	var msgs []bus.PublishMessage
	for _, id := range ids {
		msgs = append(msgs, msg(id, corr))
	}
	e.publish(f.WS, f.P, now, msgs...)
}

func (e *env) receiveP(p bus.ReceiveParams) *bus.ReceiveResult {
	e.t.Helper()
	r, err := e.s.MessageReceive(e.ctx, &p)
	if err != nil {
		e.t.Fatalf("MessageReceive: %v", err)
	}
	if r == nil {
		e.t.Fatal("MessageReceive: nil result")
	}
	return r
}

func (e *env) receive(q string, max int, vis time.Duration, now time.Time) []bus.Delivery {
	e.t.Helper()
	return e.receiveP(bus.ReceiveParams{QueueID: q, Max: max, Visibility: vis, Now: now}).Deliveries
}

const attemptWindow = 5 * time.Minute

func (e *env) receiveAttempt(q string, max int, vis time.Duration, attempt string, now time.Time) []bus.Delivery {
	e.t.Helper()
	return e.receiveP(bus.ReceiveParams{QueueID: q, Max: max, Visibility: vis, AttemptID: attempt, AttemptWindow: attemptWindow, Now: now}).Deliveries
}

// receiveOne receives with max 1 and wants exactly the message with id want.
func (e *env) receiveOne(q string, vis time.Duration, now time.Time, want string) bus.Delivery {
	e.t.Helper()
	ds := e.receive(q, 1, vis, now)
	wantIDs(e.t, ds, want)
	return ds[0]
}

func (e *env) ack(q string, now time.Time, hs ...bus.Handle) []bus.SettleResult {
	e.t.Helper()
	r, err := e.s.MessageAck(e.ctx, &bus.SettleParams{QueueID: q, Handles: hs, Now: now})
	if err != nil {
		e.t.Fatalf("MessageAck: %v", err)
	}
	if len(r) != len(hs) {
		e.t.Fatalf("MessageAck: %d results for %d handles", len(r), len(hs))
	}
	return r
}

func (e *env) nack(q string, delay time.Duration, now time.Time, hs ...bus.Handle) []bus.SettleResult {
	e.t.Helper()
	r, err := e.s.MessageNack(e.ctx, &bus.SettleParams{QueueID: q, Handles: hs, Delay: delay, Now: now})
	if err != nil {
		e.t.Fatalf("MessageNack: %v", err)
	}
	if len(r) != len(hs) {
		e.t.Fatalf("MessageNack: %d results for %d handles", len(r), len(hs))
	}
	return r
}

// ackOK acks handles and wants every one to succeed.
func (e *env) ackOK(q string, now time.Time, hs ...bus.Handle) {
	e.t.Helper()
	wantSettle(e.t, "ack", e.ack(q, now, hs...), repeat(true, len(hs))...)
}

func (e *env) nackOK(q string, delay time.Duration, now time.Time, hs ...bus.Handle) {
	e.t.Helper()
	wantSettle(e.t, "nack", e.nack(q, delay, now, hs...), repeat(true, len(hs))...)
}

func (e *env) stats(q string, now time.Time) bus.QueueStats {
	e.t.Helper()
	st, err := e.s.QueueStats(e.ctx, q, now)
	if err != nil {
		e.t.Fatalf("QueueStats: %v", err)
	}
	return st
}

func (e *env) wantStats(q string, now time.Time, want bus.QueueStats) {
	e.t.Helper()
	got := e.stats(q, now)
	if !statsEqual(got, want) {
		e.t.Errorf("QueueStats(%s):\n got  %+v\n want %+v", now.Sub(T0), got, want)
	}
	// The counts of a page of connections come from QueueStatsMany: it
	// must count alike.
	many, err := e.s.QueueStatsMany(e.ctx, []string{q}, now)
	if err != nil {
		e.t.Fatalf("QueueStatsMany: %v", err)
	}
	if !statsEqual(many[q], want) {
		e.t.Errorf("QueueStatsMany(%s):\n got  %+v\n want %+v", now.Sub(T0), many[q], want)
	}
	// The metrics scrape reads QueueGauges: it must count alike too.
	if g, ok := e.gauges(now)[q]; !ok || !statsEqual(g, want) {
		e.t.Errorf("QueueGauges(%s)[%s]:\n got  %+v (found %v)\n want %+v", now.Sub(T0), q, g, ok, want)
	}
}

func approx(a, b float64) bool { d := a - b; return d < 1e-6 && d > -1e-6 }

func (e *env) deadLetters(q string, limit int, after int64) []bus.DeadLetter {
	e.t.Helper()
	dl, err := e.s.DeadLetterList(e.ctx, q, limit, after)
	if err != nil {
		e.t.Fatalf("DeadLetterList: %v", err)
	}
	return dl
}

func (e *env) allDeadLetters(q string) []bus.DeadLetter {
	e.t.Helper()
	return e.deadLetters(q, 1000, 0)
}

func (e *env) maintain(p bus.MaintainParams) *bus.MaintainResult {
	e.t.Helper()
	r, err := e.s.Maintain(e.ctx, &p)
	if err != nil {
		e.t.Fatalf("Maintain: %v", err)
	}
	if r == nil {
		e.t.Fatal("Maintain: nil result")
	}
	return r
}

// longWindows are Maintain params that expire nothing.
func longWindows(now time.Time) bus.MaintainParams {
	const long = 1000 * time.Hour
	return bus.MaintainParams{Now: now, Retention: long, DeadLetterRetention: long, AttemptWindow: long, DedupWindow: long, AckRecordWindow: long}
}

func (e *env) auditIDs(ws string) []string {
	e.t.Helper()
	var ids []string
	e.view(func(tx bus.Tx) error {
		es, err := tx.AuditList(ws, 1000, "")
		for _, a := range es {
			ids = append(ids, a.ID)
		}
		return err
	})
	return ids
}

func auditEntry(ws, action string, now time.Time) bus.AuditEntry {
	return bus.AuditEntry{ID: bus.NewID(bus.PrefixAudit), WorkspaceID: ws, At: now, Actor: "u-test", Action: action, Target: "target", Details: map[string]any{"k": "v"}}
}

// --- assertions -------------------------------------------------------------

func repeat[T any](v T, n int) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = v
	}
	return s
}

func ids(ds []bus.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.MessageID
	}
	return out
}

func dlIDs(ds []bus.DeadLetter) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.MessageID
	}
	return out
}

// wantIDs wants exactly these message ids, in this order.
func wantIDs(t *testing.T, ds []bus.Delivery, want ...string) {
	t.Helper()
	if got := ids(ds); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
}

// wantIDSet wants exactly these message ids, in any order.
func wantIDSet(t *testing.T, ds []bus.Delivery, want ...string) {
	t.Helper()
	got := ids(ds)
	sort.Strings(got)
	w := slices.Clone(want)
	sort.Strings(w)
	if !slices.Equal(got, w) && !(len(got) == 0 && len(w) == 0) {
		t.Fatalf("delivered %q, want (any order) %q", got, w)
	}
}

func wantSettle(t *testing.T, what string, rs []bus.SettleResult, want ...bool) {
	t.Helper()
	if len(rs) != len(want) {
		t.Fatalf("%s: %d results, want %d", what, len(rs), len(want))
	}
	for i, r := range rs {
		if r.OK != want[i] {
			t.Errorf("%s: result %d = %+v, want OK=%v", what, i, r, want[i])
			continue
		}
		if r.OK && r.Code != "" {
			t.Errorf("%s: result %d is OK with code %q", what, i, r.Code)
		}
		if !r.OK {
			if r.Code != bus.CodeReceiptHandleIsInvalid {
				t.Errorf("%s: result %d code %q, want %q", what, i, r.Code, bus.CodeReceiptHandleIsInvalid)
			}
			switch r.Message {
			case bus.MsgHandleOtherQueue, bus.MsgHandleReceivedAgain, bus.MsgHandleNotInFlight:
			default: // each store's own wording would answer the same case two ways
				t.Errorf("%s: result %d fails with the message %q, not one of the bus's", what, i, r.Message)
			}
		}
	}
}

// wantFailure: one result, a failure with the message msg (both stores
// word each case alike).
func wantFailure(t *testing.T, what string, rs []bus.SettleResult, msg string) {
	t.Helper()
	wantSettle(t, what, rs, false)
	if len(rs) == 1 && rs[0].Message != msg {
		t.Errorf("%s: the message %q, want %q", what, rs[0].Message, msg)
	}
}

func sameTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func sameBytes(a, b []byte) bool { return bytes.Equal(a, b) }

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

func contains(s []string, v string) bool { return slices.Contains(s, v) }
