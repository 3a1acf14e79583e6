package httpapi_test

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
)

// limited is a consumer connection with its token on a node.
type limited struct {
	ws, id, secret, token string
}

func (n *node) limitedConsumer(t *testing.T, ws string, extra map[string]any) limited {
	t.Helper()
	body := map[string]any{"subscriptions": []map[string]any{{"topic": "som.>"}}}
	for k, v := range extra {
		body[k] = v
	}
	c := n.connection(t, ws, "consumer", body)
	s := n.issue(t, ws, c.ID)
	return limited{ws: ws, id: c.ID, secret: s.ClientSecret, token: n.token(t, c.ID, s.ClientSecret)}
}

// poll is a receive that answers at once.
func (n *node) poll(t *testing.T, c limited) *servertest.Response {
	t.Helper()
	return n.do(t, "GET", msgsPath(c.ws, c.id)+"?wait=0", c.token, nil)
}

// msgsPath is the receive route without a query.
func msgsPath(ws, c string) string { return "/v1/tenants/" + ws + "/consumers/" + c + "/messages" }

func header(t *testing.T, r *servertest.Response, name string) int {
	t.Helper()
	v, err := strconv.Atoi(r.Header.Get(name))
	if err != nil {
		t.Fatalf("%s: %q is not a number (status %d)", name, r.Header.Get(name), r.Status)
	}
	return v
}

// Standard tier: bursts of 40, then 20 a second; the 41st request is refused
// with the true wait, and the clock (not sleeps) refills the bucket.
func TestRateLimitBurstAndRefill(t *testing.T) {
	t.Parallel()
	n := start(t)
	c := n.limitedConsumer(t, n.workspace(t, opKey, "burst"), nil)
	for i := range 40 {
		r := n.poll(t, c).Must(t, 200)
		if header(t, r, "RateLimit-Limit") != 40 || header(t, r, "RateLimit-Remaining") != 39-i {
			t.Fatalf("request %d: RateLimit-Limit %s, RateLimit-Remaining %s", i+1, r.Header.Get("RateLimit-Limit"), r.Header.Get("RateLimit-Remaining"))
		}
	}
	r := n.poll(t, c)
	wantRefusal(t, r, 429, bus.RuleRateLimited)
	if r.Header.Get("Retry-After") != "1" || header(t, r, "RateLimit-Remaining") != 0 || header(t, r, "RateLimit-Reset") < 1 {
		t.Fatalf("41st: Retry-After %q, headers %v", r.Header.Get("Retry-After"), r.Header)
	}
	// A refusal takes nothing: 49 ms later still nothing, at 50 ms one token.
	n.advance(49 * time.Millisecond)
	wantRefusal(t, n.poll(t, c), 429, bus.RuleRateLimited)
	n.advance(time.Millisecond)
	n.poll(t, c).Must(t, 200)
	wantRefusal(t, n.poll(t, c), 429, bus.RuleRateLimited)
	// Two seconds refill the whole burst, not more.
	n.advance(2 * time.Second)
	for range 40 {
		n.poll(t, c).Must(t, 200)
	}
	wantRefusal(t, n.poll(t, c), 429, bus.RuleRateLimited)
}

// A daily quota counts allowed requests per UTC day and starts again at
// midnight UTC; the usage route shows it.
func TestDailyQuotaResetsAtMidnightUTC(t *testing.T) {
	t.Parallel()
	tiers := filepath.Join(t.TempDir(), "tiers.json")
	if err := os.WriteFile(tiers, []byte(`{"tiers":[{"name":"tiny","rate_per_second":1000,"burst":1000,"daily_quota":5}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startWith(t, servertest.Options{TiersFile: tiers})
	ws := n.workspace(t, opKey, "quota")
	c := n.limitedConsumer(t, ws, map[string]any{"quota_tier": "tiny"})
	for range 5 {
		n.poll(t, c).Must(t, 200)
	}
	r := n.poll(t, c)
	wantRefusal(t, r, 429, bus.RuleQuotaExceeded)
	now := n.Clock.Now()
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	wantWait := int((midnight.Sub(now) + time.Second - 1) / time.Second)
	if got := header(t, r, "Retry-After"); got != wantWait {
		t.Fatalf("Retry-After %d, want %d (seconds to midnight UTC)", got, wantWait)
	}
	var u struct {
		Tier          string `json:"tier"`
		RequestsToday int64  `json:"requests_today"`
		Remaining     *int64 `json:"remaining"`
		DailyQuota    *int64 `json:"daily_quota"`
	}
	n.do(t, "GET", connPath(ws, c.id)+"/usage", opKey, nil).Must(t, 200).Decode(t, &u)
	if u.Tier != "tiny" || u.RequestsToday != 5 || u.Remaining == nil || *u.Remaining != 0 || u.DailyQuota == nil || *u.DailyQuota != 5 {
		t.Fatalf("usage %+v", u)
	}
	n.advance(midnight.Sub(now) - time.Millisecond)
	c.token = n.token(t, c.id, c.secret) // the first token expired hours ago; getting one is no workspace request
	wantRefusal(t, n.poll(t, c), 429, bus.RuleQuotaExceeded)
	n.advance(time.Millisecond)
	n.poll(t, c).Must(t, 200)
	n.do(t, "GET", connPath(ws, c.id)+"/usage", opKey, nil).Must(t, 200).Decode(t, &u)
	if u.RequestsToday != 1 || *u.Remaining != 4 {
		t.Fatalf("usage after midnight %+v", u)
	}
}

// A tier change through the management API takes effect at the next
// request; only operators assign the unlimited tier.
func TestTierChangeTakesEffectAtOnce(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "tiers")
	c := n.limitedConsumer(t, ws, nil)
	for range 40 {
		n.poll(t, c).Must(t, 200)
	}
	wantRefusal(t, n.poll(t, c), 429, bus.RuleRateLimited)

	// An admin who is not an operator may not hand out unlimited.
	adminID, adminKey := n.user(t, "admin", false)
	n.member(t, ws, adminID, bus.RoleAdmin)
	wantRefusal(t, n.do(t, "PATCH", connPath(ws, c.id), adminKey, map[string]any{"quota_tier": "unlimited"}), 403, bus.RuleManageForbidden)
	wantRefusal(t, n.do(t, "PATCH", connPath(ws, c.id), adminKey, map[string]any{"quota_tier": "gold"}), 400, bus.RuleManageBadRequest)

	n.do(t, "PATCH", connPath(ws, c.id), opKey, map[string]any{"quota_tier": "unlimited"}).Must(t, 200)
	for range 100 {
		n.poll(t, c).Must(t, 200)
	}
	n.do(t, "PATCH", connPath(ws, c.id), opKey, map[string]any{"quota_tier": "standard"}).Must(t, 200)
	// Back on standard, the bucket emptied before the change is still empty.
	wantRefusal(t, n.poll(t, c), 429, bus.RuleRateLimited)
}

// One connection over its limit does not slow another.
func TestLimitsArePerConnection(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "isolation")
	a, b := n.limitedConsumer(t, ws, nil), n.limitedConsumer(t, ws, nil)
	for range 40 {
		n.poll(t, a).Must(t, 200)
	}
	wantRefusal(t, n.poll(t, a), 429, bus.RuleRateLimited)
	r := n.poll(t, b).Must(t, 200)
	if header(t, r, "RateLimit-Remaining") != 39 {
		t.Fatalf("the other connection's allowance: %s", r.Header.Get("RateLimit-Remaining"))
	}
}

// Every answer of a limited route carries the RateLimit headers once the
// caller is known: successes, refusals of the request, of the route and of
// the limit (a 401 has no connection to describe).
func TestRateLimitHeadersOnEveryAnswer(t *testing.T) {
	t.Parallel()
	n := start(t)
	p := n.NewPair(nil)
	answers := map[string]*servertest.Response{
		"receive 200":   n.do(t, "GET", msgsPath(p.WS, p.Consumer)+"?wait=0", p.ConsumTok, nil),
		"receive 400":   n.do(t, "GET", msgsPath(p.WS, p.Consumer)+"?max=11", p.ConsumTok, nil),
		"ack 200":       n.do(t, "POST", p.SettlePath("ack"), p.ConsumTok, map[string]any{"receipt_handles": []string{"x"}}),
		"skills 200":    n.do(t, "GET", skillsPath(p.WS, p.Consumer), p.ConsumTok, nil),
		"publish 202":   n.do(t, "POST", publishPath(p.WS), p.ProducerTok, servertest.Envelope("m1", "s1", nil)),
		"publish 400":   n.do(t, "POST", publishPath(p.WS), p.ProducerTok, map[string]any{"payload": 1}),
		"tenant 403":    n.do(t, "GET", msgsPath("w"+"aaaaaaaaaaaaaaaaaaaaaaaaaa", p.Consumer)+"?wait=0", p.ConsumTok, nil),
		"not owner 403": n.do(t, "GET", msgsPath(p.WS, p.Producer)+"?wait=0", p.ConsumTok, nil),
	}
	for name, r := range answers {
		for _, h := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
			if r.Header.Get(h) == "" {
				t.Errorf("%s (status %d): no %s", name, r.Status, h)
			}
		}
	}
}

// A long poll counts once however long it waits, and a connection may have
// at most 10 waiting at once: the 11th is answered 429 at once.
func TestLongPollsCountOnceAndAreCapped(t *testing.T) {
	t.Parallel()
	n := startWith(t, servertest.Options{Clock: bus.SystemClock{}})
	ws := n.workspace(t, opKey, "polls")
	c := n.limitedConsumer(t, ws, nil)
	r := n.do(t, "GET", msgsPath(c.ws, c.id)+"?wait=1", c.token, nil).Must(t, 200)
	if header(t, r, "RateLimit-Remaining") != 39 {
		t.Fatalf("a one-second long poll left %s of 40", r.Header.Get("RateLimit-Remaining"))
	}

	// Eleven polls at once on one connection: ten wait, the eleventh is
	// refused at once.
	u := n.limitedConsumer(t, ws, map[string]any{"quota_tier": "unlimited"})
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for range 11 {
		wg.Go(func() {
			begun := time.Now()
			r := n.do(t, "GET", msgsPath(u.ws, u.id)+"?wait=3", u.token, nil)
			mu.Lock()
			defer mu.Unlock()
			statuses[r.Status]++
			if r.Status == 429 {
				wantRefusal(t, r, 429, bus.RuleRateLimited)
				if r.Header.Get("Retry-After") != "1" || time.Since(begun) > 2*time.Second {
					t.Errorf("refused poll: Retry-After %q after %v", r.Header.Get("Retry-After"), time.Since(begun))
				}
			}
		})
	}
	wg.Wait()
	if statuses[200] != 10 || statuses[429] != 1 {
		t.Fatalf("eleven polls at once: %v, want ten 200 and one 429", statuses)
	}
}
