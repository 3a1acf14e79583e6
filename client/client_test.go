package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/client"
	"github.com/sombus/sombus/internal/server/servertest"
)

// proxy sits in front of a real node; intercept may answer a request itself
// (returning true) before it is passed on.
type proxy struct {
	*httptest.Server
	mu        sync.Mutex
	intercept func(w http.ResponseWriter, r *http.Request, pass func() *http.Response) bool
	seen      []*http.Request
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0) // cancelled long polls at shutdown
	p := &proxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.seen = append(p.seen, r.Clone(context.Background()))
		f := p.intercept
		p.mu.Unlock()
		pass := func() *http.Response {
			out, _ := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), r.Body)
			out.Header = r.Header.Clone()
			resp, err := http.DefaultClient.Do(out)
			if err != nil {
				t.Errorf("proxy: %v", err)
				panic(http.ErrAbortHandler)
			}
			return resp
		}
		if f != nil && f(w, r, pass) {
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *proxy) set(f func(w http.ResponseWriter, r *http.Request, pass func() *http.Response) bool) {
	p.mu.Lock()
	p.intercept = f
	p.mu.Unlock()
}

// count counts the requests seen whose "METHOD path" contains s.
func (p *proxy) count(s string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.seen {
		if strings.Contains(r.Method+" "+r.URL.Path, s) {
			n++
		}
	}
	return n
}

func refuse(w http.ResponseWriter, status int, rule string) {
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, `{"accepted":false,"violations":[{"rule":"`+rule+`","message":"injected"}]}`)
}

// onceFor intercepts the first request whose "METHOD path" contains s.
func onceFor(s string, f func(w http.ResponseWriter, r *http.Request, pass func() *http.Response)) func(http.ResponseWriter, *http.Request, func() *http.Response) bool {
	var once sync.Once
	return func(w http.ResponseWriter, r *http.Request, pass func() *http.Response) bool {
		hit := false
		if strings.Contains(r.Method+" "+r.URL.Path, s) {
			once.Do(func() { hit = true; f(w, r, pass) })
		}
		return hit
	}
}

// 429 and 503 answers are retried after Retry-After; with retries off the
// caller gets the *Error with the wait.
func TestRetryAfter429And503(t *testing.T) {
	t.Parallel()
	n := servertest.Start(t, servertest.Options{})
	px := newProxy(t, n.URL)
	e := setupOn(t, n, px.URL, client.ConnectionParams{})
	ctx := context.Background()

	px.set(onceFor("POST /v1/tenants/", func(w http.ResponseWriter, r *http.Request, _ func() *http.Response) {
		refuse(w, http.StatusServiceUnavailable, client.RuleQueueUnavailable)
	}))
	start := time.Now()
	res, err := e.producer.Publish(ctx, envelope("m1", "s", nil))
	if err != nil || !res.Accepted || res.Deliveries != 1 {
		t.Fatalf("publish after a 503: %+v, %v", res, err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("retried after %s, before Retry-After", d)
	}
	if got := px.count("POST /v1/tenants/"); got != 2 {
		t.Errorf("%d publish requests, want 2", got)
	}

	px.set(onceFor("GET /v1/tenants/", func(w http.ResponseWriter, r *http.Request, _ func() *http.Response) {
		refuse(w, http.StatusTooManyRequests, client.RuleRateLimited)
	}))
	start = time.Now()
	msgs, err := e.consumer.Receive(ctx, client.ReceiveOptions{Wait: client.NoWait})
	if err != nil || len(msgs) != 1 || msgs[0].MessageID != "m1" {
		t.Fatalf("receive after a 429: %v, %v", msgs, err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("retried after %s, before Retry-After", d)
	}

	// Without retries the refusal reaches the caller, typed.
	noRetry, err := client.NewConsumer(client.Config{BaseURL: px.URL, ClientID: e.consID, ClientSecret: e.consSec, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	px.set(onceFor("GET /v1/tenants/", func(w http.ResponseWriter, r *http.Request, _ func() *http.Response) {
		refuse(w, http.StatusTooManyRequests, client.RuleRateLimited)
	}))
	_, err = noRetry.Receive(ctx, client.ReceiveOptions{Wait: client.NoWait})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 429 || ce.RetryAfter != time.Second || ce.Rule() != client.RuleRateLimited || !errors.Is(err, client.ErrRateLimited) || !ce.Temporary() {
		t.Fatalf("got %v, want a 429 rate.limited *Error with RetryAfter 1s", err)
	}
}

// TestRetriesOnlyWhatIsSafe: a 503 after a management POST is not sent
// again (the change may have been made: a rotation sent twice would end
// the overlap of the secret in use); a Retry-After over MaxRetryAfter (a
// used-up daily quota) is returned at once instead of waited out; a
// context that ends during a wait returns its error, with the refusal.
func TestRetriesOnlyWhatIsSafe(t *testing.T) {
	t.Parallel()
	n := servertest.Start(t, servertest.Options{})
	px := newProxy(t, n.URL)
	e := setupOn(t, n, px.URL, client.ConnectionParams{})
	ctx := context.Background()
	mgr := &client.Manager{BaseURL: px.URL, APIKey: servertest.BootstrapKey}
	before, err := mgr.GetConnection(ctx, e.ws, e.consID)
	if err != nil {
		t.Fatal(err)
	}
	// The rotation is made, and its answer replaced by a 503.
	px.set(onceFor("/secret/rotate", func(w http.ResponseWriter, r *http.Request, pass func() *http.Response) {
		resp := pass()
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		refuse(w, http.StatusServiceUnavailable, "store.unavailable")
	}))
	_, err = mgr.RotateSecret(ctx, e.ws, e.consID, "24h")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 503 {
		t.Fatalf("rotate answered 503: got %v, want the 503", err)
	}
	if got := px.count("/secret/rotate"); got != 1 {
		t.Fatalf("the rotation was sent %d times after a 503, want once", got)
	}
	after, err := mgr.GetConnection(ctx, e.ws, e.consID)
	if err != nil || after.CredentialVersion != before.CredentialVersion+1 {
		t.Fatalf("credential version %d after one rotation from %d (%v)", after.CredentialVersion, before.CredentialVersion, err)
	}

	// A quota used up until midnight: the caller gets the refusal at once.
	px.set(onceFor("POST /v1/tenants/", func(w http.ResponseWriter, r *http.Request, _ func() *http.Response) {
		w.Header().Set("Retry-After", "36000")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"accepted":false,"violations":[{"rule":"quota.exceeded","message":"injected"}]}`)
	}))
	start := time.Now()
	_, err = e.producer.Publish(ctx, envelope("m-quota", "s", nil))
	if !errors.As(err, &ce) || ce.Status != 429 || ce.RetryAfter != 10*time.Hour || time.Since(start) > 5*time.Second {
		t.Fatalf("publish refused for 10 hours: %v after %s, want the 429 at once", err, time.Since(start))
	}

	// A wait cut short by the context: its error, and the refusal.
	px.set(onceFor("POST /v1/tenants/", func(w http.ResponseWriter, r *http.Request, _ func() *http.Response) {
		refuse(w, http.StatusTooManyRequests, client.RuleRateLimited)
	}))
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = e.producer.Publish(short, envelope("m-short", "s", nil))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ce) || ce.Status != 429 {
		t.Fatalf("publish whose wait the context ended: %v, want its deadline and the 429", err)
	}
}

// A receive whose answer is lost is retried with the same attempt id and
// gets the same messages, with the same receipt handles.
func TestLostReceiveRetriedWithSameAttempt(t *testing.T) {
	t.Parallel()
	n := servertest.Start(t, servertest.Options{})
	px := newProxy(t, n.URL)
	e := setupOn(t, n, px.URL, client.ConnectionParams{})
	ctx := context.Background()
	e.publish(t, []client.Envelope{envelope("a", "s1", nil), envelope("b", "s2", nil), envelope("c", "s3", nil)})

	var lost struct {
		Messages []struct {
			ReceiptHandle string `json:"receipt_handle"`
		} `json:"messages"`
	}
	var attempts []string
	var mu sync.Mutex
	drop := onceFor("GET /v1/tenants/", func(w http.ResponseWriter, r *http.Request, pass func() *http.Response) {
		resp := pass()
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &lost)
		// The node answered; the answer never reaches the client.
		panic(http.ErrAbortHandler)
	})
	px.set(func(w http.ResponseWriter, r *http.Request, pass func() *http.Response) bool {
		if strings.HasSuffix(r.URL.Path, "/messages") && r.Method == http.MethodGet {
			mu.Lock()
			attempts = append(attempts, r.URL.Query().Get("attempt"))
			mu.Unlock()
		}
		return drop(w, r, pass)
	})
	msgs, err := e.consumer.Receive(ctx, client.ReceiveOptions{Max: 2, Wait: client.NoWait})
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	if len(lost.Messages) != 2 || len(msgs) != 2 {
		t.Fatalf("lost answer had %d messages, the retry %d; want 2 and 2", len(lost.Messages), len(msgs))
	}
	for i := range msgs {
		if msgs[i].ReceiptHandle != lost.Messages[i].ReceiptHandle || msgs[i].ReceiveCount != 1 {
			t.Errorf("message %d: handle or receive count changed on the retry", i)
		}
	}
	mu.Lock()
	if len(attempts) != 2 || attempts[0] == "" || attempts[0] != attempts[1] {
		t.Errorf("attempt ids %q, want the same one twice", attempts)
	}
	mu.Unlock()
	// Nothing else was taken: the third message is still ready.
	if q := e.queue(t); q.InFlight != 2 || q.Ready != 1 {
		t.Errorf("queue %+v, want 2 in flight and 1 ready", q)
	}
}

// A token the bus refuses (401 after a rotation) is dropped; the SDK gets a
// new one once and retries.
func TestUnauthorizedRefreshesTokenOnce(t *testing.T) {
	t.Parallel()
	n := servertest.Start(t, servertest.Options{CheckTTL: time.Millisecond})
	px := newProxy(t, n.URL)
	e := setupOn(t, n, px.URL, client.ConnectionParams{})
	ctx := context.Background()
	if _, err := e.producer.Publish(ctx, envelope("m1", "s", nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.producer.Publish(ctx, envelope("m2", "s", nil)); err != nil {
		t.Fatal(err)
	}
	if got := px.count("POST /v1/oauth/token"); got != 1 {
		t.Fatalf("%d token requests for two publishes, want 1 (reused)", got)
	}
	// The rotation raises credential_version: the old token stops working;
	// the old secret still gets tokens during the overlap.
	if _, err := e.mgr.RotateSecret(ctx, e.ws, e.prodID, client.Overlap1h); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if _, err := e.producer.Publish(ctx, envelope("m3", "s", nil)); err != nil {
		t.Fatalf("publish after rotation: %v", err)
	}
	if got := px.count("POST /v1/oauth/token"); got != 2 {
		t.Fatalf("%d token requests, want 2", got)
	}
	if got := px.count("POST /v1/tenants/"); got != 4 {
		t.Fatalf("%d publish requests, want 4 (one refused with 401, then retried)", got)
	}
}

func TestTypedErrors(t *testing.T) {
	t.Parallel()
	e := setup(t, servertest.Options{}, client.ConnectionParams{})
	ctx := context.Background()

	_, err := e.producer.Publish(ctx, client.Envelope{MessageType: "Not A Type", Payload: map[string]any{}})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 400 || !ce.HasRule(client.RuleEnvelopeMessageType) || !ce.HasRule(client.RuleEnvelopeCorrelationID) {
		t.Fatalf("got %v, want 400 with envelope.message_type and envelope.correlation_id", err)
	}
	if len(client.ViolationsOf(err)) != 2 {
		t.Errorf("violations %v, want every failed check", client.ViolationsOf(err))
	}

	res, err := e.producer.PublishBatch(ctx, []client.Envelope{envelope("ok", "s", nil), {MessageID: "bad", MessageType: "story.context", CorrelationID: "s", Payload: []int{1}}})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Accepted || res[1].Accepted || client.RuleOf(res[1].Err()) != client.RuleEnvelopePayload {
		t.Fatalf("batch results %+v", res)
	}

	// A consumer's token cannot publish.
	asProducer, _ := client.NewProducer(client.Config{BaseURL: e.node.URL, ClientID: e.consID, ClientSecret: e.consSec})
	_, err = asProducer.Publish(ctx, envelope("x", "s", nil))
	if !errors.Is(err, client.ErrNotRegistered) {
		t.Fatalf("got %v, want producer.not_registered", err)
	}
	// Wrong credentials: the token service's invalid_client.
	bad, _ := client.NewConsumer(client.Config{BaseURL: e.node.URL, ClientID: e.consID, ClientSecret: "nope"})
	_, err = bad.Receive(ctx, client.ReceiveOptions{Wait: client.NoWait})
	if !errors.As(err, &ce) || ce.Status != 401 || !errors.Is(err, client.ErrInvalidClient) {
		t.Fatalf("got %v, want 401 invalid_client", err)
	}
	// Management refusals.
	_, err = e.mgr.GetConnection(ctx, e.ws, "cnope")
	if !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("got %v, want manage.not_found", err)
	}
}

func TestAckNackSkills(t *testing.T) {
	t.Parallel()
	e := setup(t, servertest.Options{}, client.ConnectionParams{})
	ctx := context.Background()
	e.publish(t, []client.Envelope{envelope("a", "s1", map[string]any{"n": 1}), envelope("b", "s2", nil)})
	msgs, err := e.consumer.Receive(ctx, client.ReceiveOptions{Wait: client.NoWait, Visibility: 30 * time.Second})
	if err != nil || len(msgs) != 2 {
		t.Fatalf("receive: %v, %v", msgs, err)
	}
	var p struct{ N int }
	if err := msgs[0].DecodePayload(&p); err != nil || p.N != 1 || msgs[0].Topic != "som.story.context" || msgs[0].ProducerID != e.prodID || msgs[0].EnqueuedAt.IsZero() {
		t.Fatalf("message %+v (payload %v)", msgs[0], err)
	}
	res, err := e.consumer.Ack(ctx, msgs[0].ReceiptHandle, "garbage")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Settled) != 1 || len(res.Failed) != 1 || res.Failed[0].Code != client.CodeReceiptHandleIsInvalid {
		t.Fatalf("ack result %+v", res)
	}
	res, err = e.consumer.Nack(ctx, []string{msgs[1].ReceiptHandle}, 0)
	if err != nil || len(res.Settled) != 1 {
		t.Fatalf("nack: %+v, %v", res, err)
	}
	again, err := e.consumer.Receive(ctx, client.ReceiveOptions{Wait: client.NoWait})
	if err != nil || len(again) != 1 || again[0].MessageID != "b" || again[0].ReceiveCount != 2 {
		t.Fatalf("after nack: %v, %v", again, err)
	}

	sk, err := e.consumer.Skills(ctx)
	if err != nil || len(sk.Registrations) != 0 {
		t.Fatalf("skills: %+v, %v", sk, err)
	}
	regs := []client.SkillRegistration{{InstanceID: "i1", Skill: "summarize", Name: "Summaries", Values: json.RawMessage(`{"lang":"en"}`), AuthorityScale: 40}}
	if _, err := e.mgr.PutSkills(ctx, e.ws, e.consID, regs); err != nil {
		t.Fatal(err)
	}
	sk, err = e.consumer.Skills(ctx)
	if err != nil || len(sk.Registrations) != 1 || sk.Registrations[0].AuthorityScale != 40 || sk.UpdatedAt.IsZero() {
		t.Fatalf("skills: %+v, %v", sk, err)
	}
	// Without Values the registration is sent with {}: the API refuses
	// null, which nil would be written as.
	regs = []client.SkillRegistration{{InstanceID: "i2", Skill: "s", Name: "n"}}
	if _, err := e.mgr.PutSkills(ctx, e.ws, e.consID, regs); err != nil {
		t.Fatal(err)
	}
	if regs[0].Values != nil {
		t.Errorf("PutSkills changed its argument: %s", regs[0].Values)
	}
	sk, err = e.consumer.Skills(ctx)
	if err != nil || len(sk.Registrations) != 1 || string(sk.Registrations[0].Values) != "{}" {
		t.Fatalf("skills: %+v, %v", sk, err)
	}
}

// The consume loop rides out a 429 on a receive, a 503 on an
// acknowledgement and a lost receive answer: every message is handled once.
func TestConsumeThroughFailures(t *testing.T) {
	t.Parallel()
	n := servertest.Start(t, servertest.Options{})
	px := newProxy(t, n.URL)
	e := setupOn(t, n, px.URL, client.ConnectionParams{})
	var envs []client.Envelope
	for i := range 20 {
		envs = append(envs, envelope(fmt.Sprintf("m%d", i), fmt.Sprintf("s%d", i%4), nil))
	}
	e.publish(t, envs)

	var step sync.Mutex
	receives := 0
	ack503 := onceFor("/ack", func(w http.ResponseWriter, r *http.Request, _ func() *http.Response) {
		refuse(w, http.StatusServiceUnavailable, client.RuleQueueUnavailable)
	})
	px.set(func(w http.ResponseWriter, r *http.Request, pass func() *http.Response) bool {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/messages") {
			step.Lock()
			receives++
			k := receives
			step.Unlock()
			switch k {
			case 1:
				refuse(w, http.StatusTooManyRequests, client.RuleRateLimited)
				return true
			case 2:
				resp := pass()
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				panic(http.ErrAbortHandler)
			}
		}
		return ack503(w, r, pass)
	})
	var mu sync.Mutex
	counts := map[string]int{}
	var handled atomic.Int64
	stop := consume(t, e.consumer, func(ctx context.Context, m *client.Message) error {
		mu.Lock()
		counts[m.MessageID]++
		mu.Unlock()
		handled.Add(1)
		return nil
	}, client.ConsumeOptions{Wait: time.Second})
	waitFor(t, "queue drained", 20*time.Second, func() bool {
		q := e.queue(t)
		return handled.Load() >= 20 && q.Ready+q.InFlight+q.Delayed == 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, c := range counts {
		if c != 1 {
			t.Errorf("%s handled %d times", id, c)
		}
	}
	if len(counts) != 20 {
		t.Errorf("%d messages handled, want 20", len(counts))
	}
}
