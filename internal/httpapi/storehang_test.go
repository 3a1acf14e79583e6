package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
)

// hangStore is a store that, while hung, answers no call until its
// context ends (as a database that accepts connections and never answers
// does), and then fails with the context's error, as the embedded store's
// writer does for an operation it never started.
type hangStore struct {
	bus.Store
	hung atomic.Bool
	// hungReceive hangs MessageReceive alone.
	hungReceive atomic.Bool
}

func (h *hangStore) wait(ctx context.Context) error {
	if !h.hung.Load() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func (h *hangStore) View(ctx context.Context, fn func(tx bus.Tx) error) error {
	if err := h.wait(ctx); err != nil {
		return err
	}
	return h.Store.View(ctx, fn)
}

func (h *hangStore) Update(ctx context.Context, fn func(tx bus.Tx) error) error {
	if err := h.wait(ctx); err != nil {
		return err
	}
	return h.Store.Update(ctx, fn)
}

func (h *hangStore) MessagePublish(ctx context.Context, p *bus.PublishParams) ([]bus.PublishOutcome, error) {
	if err := h.wait(ctx); err != nil {
		return nil, err
	}
	return h.Store.MessagePublish(ctx, p)
}

func (h *hangStore) MessageReceive(ctx context.Context, p *bus.ReceiveParams) (*bus.ReceiveResult, error) {
	if h.hungReceive.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err := h.wait(ctx); err != nil {
		return nil, err
	}
	return h.Store.MessageReceive(ctx, p)
}

func (h *hangStore) MessageAck(ctx context.Context, p *bus.SettleParams) ([]bus.SettleResult, error) {
	if err := h.wait(ctx); err != nil {
		return nil, err
	}
	return h.Store.MessageAck(ctx, p)
}

// TestHungStoreAnswers503AtTheDeadline: with a store that never answers,
// the token, publish and pull routes give up at --store-timeout (a
// receive's wait added) and answer 503 with Retry-After and their route's
// rule, instead of holding the request for as long as the client waits.
// Once the store answers again, so do they.
func TestHungStoreAnswers503AtTheDeadline(t *testing.T) {
	t.Parallel()
	hs := &hangStore{}
	const timeout = time.Second
	n := startWith(t, servertest.Options{StoreTimeout: timeout, WrapStore: func(s bus.Store) bus.Store { hs.Store = s; return hs }})
	ws := n.workspace(t, opKey, "hung store")
	p := n.warmPair(t, ws)
	cons, ptok, ctok := p.cons, p.ptok, p.ctok
	settle := map[string]any{"receipt_handles": []string{p.handle}}

	hs.hung.Store(true)
	for _, rt := range []struct {
		name, method, path, key string
		body                    any
		rule                    string
		within                  time.Duration
	}{
		{"publish", "POST", publishPath(ws), ptok, servertest.Envelope("m2", "story-2", nil), bus.RuleStoreUnavailable, timeout},
		{"receive", "GET", "/v1/tenants/" + ws + "/consumers/" + cons.ID + "/messages?wait=1", ctok, nil, bus.RuleQueueUnavailable, timeout + time.Second},
		{"ack", "POST", "/v1/tenants/" + ws + "/consumers/" + cons.ID + "/ack", ctok, settle, bus.RuleQueueUnavailable, timeout},
	} {
		start := time.Now()
		r := n.do(t, rt.method, rt.path, rt.key, rt.body)
		took := time.Since(start)
		if r.Status != 503 || r.Rule() != rt.rule || r.Header.Get("Retry-After") == "" {
			t.Errorf("%s: %d %s (Retry-After %q), want 503 %s with Retry-After", rt.name, r.Status, r.Body, r.Header.Get("Retry-After"), rt.rule)
		}
		if took < rt.within || took > rt.within+5*time.Second {
			t.Errorf("%s: answered after %v, want at its deadline, %v", rt.name, took, rt.within)
		}
	}
	start := time.Now()
	wantOAuthError(t, n.tokenResp(t, cons.ID, p.consSecret), 503, "temporarily_unavailable")
	if took := time.Since(start); took < timeout || took > timeout+5*time.Second {
		t.Errorf("token: answered after %v, want at its deadline, %v", took, timeout)
	}

	hs.hung.Store(false)
	n.publish(t, ws, ptok, "m3").Must(t, 202)
	n.do(t, "POST", "/v1/tenants/"+ws+"/consumers/"+cons.ID+"/ack", ctok, settle).Must(t, 200)
}

// TestStoreTimeoutLeavesOutTheBody: the time a request body takes to
// arrive does not count against --store-timeout (the edge bounds it), so a
// slow client of a healthy store is not answered 503.
func TestStoreTimeoutLeavesOutTheBody(t *testing.T) {
	t.Parallel()
	n := startWith(t, servertest.Options{StoreTimeout: time.Second})
	ws := n.workspace(t, opKey, "slow body")
	p := n.warmPair(t, ws)
	b, err := json.Marshal(servertest.Envelope("m2", "story-2", nil))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("POST", n.URL+publishPath(ws), &lateBody{b: b, delay: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+p.ptok)
	n.send(t, req).Must(t, 202)
}

// lateBody is a request body that arrives after delay.
type lateBody struct {
	b     []byte
	delay time.Duration
	sent  bool
}

func (l *lateBody) Read(p []byte) (int, error) {
	if l.sent {
		return 0, io.EOF
	}
	time.Sleep(l.delay)
	l.sent = true
	return copy(p, l.b), nil
}

// TestHungStoreAnswersAWokenLongPoll: a long poll waiting off its
// goroutine (HTTP/1.1, kept alive) that is woken and finds the store not
// answering is answered 503 at --store-timeout after the wake-up, not
// empty after the node's own bound of a look.
func TestHungStoreAnswersAWokenLongPoll(t *testing.T) {
	t.Parallel()
	hs := &hangStore{}
	n := startWith(t, servertest.Options{StoreTimeout: time.Second, WrapStore: func(s bus.Store) bus.Store { hs.Store = s; return hs }})
	ws := n.workspace(t, opKey, "hung look")
	p := n.warmPair(t, ws)
	n.do(t, "POST", "/v1/tenants/"+ws+"/consumers/"+p.cons.ID+"/ack", p.ctok, map[string]any{"receipt_handles": []string{p.handle}}).Must(t, 200)
	answer := make(chan *servertest.Response, 1)
	start := time.Now()
	go func() {
		answer <- n.do(t, "GET", "/v1/tenants/"+ws+"/consumers/"+p.cons.ID+"/messages?wait=10", p.ctok, nil)
	}()
	time.Sleep(500 * time.Millisecond) // the poll looked, found nothing, and waits
	hs.hungReceive.Store(true)
	n.publish(t, ws, p.ptok, "m2").Must(t, 202) // wakes it: its look hangs
	r := <-answer
	if r.Status != 503 || r.Rule() != bus.RuleQueueUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("woken poll: %d %s, want 503 %s with Retry-After", r.Status, r.Body, bus.RuleQueueUnavailable)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("answered after %v, want about a second after the wake-up", took)
	}
}
