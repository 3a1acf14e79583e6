package auth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

type tokenEnv struct {
	store  *fakeStore
	clock  *bus.ManualClock
	signer *Signer
	svc    *TokenService
}

func newTokenEnv(t *testing.T) *tokenEnv {
	store := newFakeStore()
	clock := bus.NewManualClock(t0)
	s := newSignerT(t, store, clock, testEnv)
	return &tokenEnv{store: store, clock: clock, signer: s, svc: NewTokenService(store, s, clock, NewMemoryFailureLimiter(clock))}
}

const addr = "203.0.113.7:51000"

func (e *tokenEnv) exchange(id, secret string) (*TokenResponse, *OAuthError) {
	return e.svc.Exchange(context.Background(), id, secret, addr)
}

func wantOAuth(t *testing.T, res *TokenResponse, oe *OAuthError, status int, code string, secrets ...string) {
	t.Helper()
	if res != nil || oe == nil || oe.Status != status || oe.Code != code {
		t.Fatalf("got %+v, %+v; want %d %s", res, oe, status, code)
	}
	mustNotContain(t, oe.Error(), secrets...)
	mustNotContain(t, fmt.Sprintf("%+v %#v", oe, oe), secrets...)
}

func TestExchangeIssuesToken(t *testing.T) {
	e := newTokenEnv(t)
	for _, kind := range []bus.ConnectionKind{bus.KindConsumer, bus.KindProducer} {
		c, secret := addConn(t, e.store, e.clock, kind)
		c.CredentialVersion = 4
		e.store.put(c)
		res, oe := e.exchange(c.ID, secret)
		if oe != nil {
			t.Fatal(oe)
		}
		if res.TokenType != "Bearer" || res.ExpiresIn != 3600 || res.AccessToken == "" {
			t.Fatalf("res = %+v", res)
		}
		claims, err := e.signer.Verify(res.AccessToken)
		if err != nil {
			t.Fatal(err)
		}
		if claims.ClientID != c.ID || claims.Tenant != c.WorkspaceID || claims.Role != kind || claims.CredentialVersion != 4 {
			t.Fatalf("claims = %+v", claims)
		}
	}
}

func TestExchangeRefusals(t *testing.T) {
	e := newTokenEnv(t)
	c, secret := addConn(t, e.store, e.clock, bus.KindConsumer)
	other, otherSecret := addConn(t, e.store, e.clock, bus.KindConsumer)
	secrets := []string{secret, otherSecret}

	// Each case is one failure against c.ID from addr: fewer than 20.
	res, oe := e.exchange(c.ID, otherSecret) // another connection's secret
	wantOAuth(t, res, oe, 401, OAuthInvalidClient, secrets...)
	res, oe = e.exchange(c.ID, "")
	wantOAuth(t, res, oe, 401, OAuthInvalidClient, secrets...)
	res, oe = e.exchange(c.ID, secret+"x")
	wantOAuth(t, res, oe, 401, OAuthInvalidClient, secrets...)
	res, oe = e.exchange(bus.NewID(bus.PrefixConnection), secret) // unknown client
	wantOAuth(t, res, oe, 401, OAuthInvalidClient, secrets...)
	res, oe = e.exchange("", secret)
	wantOAuth(t, res, oe, 401, OAuthInvalidClient, secrets...)
	res, oe = e.exchange(other.ID, secret)
	wantOAuth(t, res, oe, 401, OAuthInvalidClient, secrets...)

	// Connection revoked: refused; restored: the same secret works again.
	conn := e.store.get(c.ID)
	conn.Status = bus.StatusRevoked
	e.store.put(conn)
	res, oe = e.exchange(c.ID, secret)
	wantOAuth(t, res, oe, 401, OAuthInvalidClient, secrets...)
	conn.Status = bus.StatusActive
	e.store.put(conn)
	if _, oe := e.exchange(c.ID, secret); oe != nil {
		t.Fatalf("after restore: %v", oe)
	}

	// Secret revoked (the hash may even still be there): refused.
	conn.SecretState = bus.SecretRevoked
	e.store.put(conn)
	res, oe = e.exchange(c.ID, secret)
	wantOAuth(t, res, oe, 401, OAuthInvalidClient, secrets...)
	conn.SecretState = bus.SecretNone
	conn.SecretHash = nil
	e.store.put(conn)
	res, oe = e.exchange(c.ID, "")
	wantOAuth(t, res, oe, 401, OAuthInvalidClient, secrets...)
}

func TestExchangeRotationOverlap(t *testing.T) {
	e := newTokenEnv(t)
	c, oldSecret := addConn(t, e.store, e.clock, bus.KindProducer)

	// Rotate with a one-hour overlap.
	newSecret, newHash := NewSecret()
	conn := e.store.get(c.ID)
	until := e.clock.Now().Add(time.Hour)
	conn.PreviousSecretHash, conn.PreviousSecretExpiresAt = conn.SecretHash, &until
	conn.SecretHash = newHash
	conn.CredentialVersion++
	e.store.put(conn)

	for _, s := range []string{oldSecret, newSecret} {
		res, oe := e.exchange(c.ID, s)
		if oe != nil {
			t.Fatalf("within the overlap: %v", oe)
		}
		claims, _ := e.signer.Verify(res.AccessToken)
		if claims.CredentialVersion != conn.CredentialVersion {
			t.Fatalf("credential_version = %d, want the current %d", claims.CredentialVersion, conn.CredentialVersion)
		}
	}
	e.clock.Advance(time.Hour - time.Millisecond)
	if _, oe := e.exchange(c.ID, oldSecret); oe != nil {
		t.Fatalf("just before the overlap ends: %v", oe)
	}
	e.clock.Advance(time.Millisecond) // now == PreviousSecretExpiresAt: over
	res, oe := e.exchange(c.ID, oldSecret)
	wantOAuth(t, res, oe, 401, OAuthInvalidClient, oldSecret, newSecret)
	if _, oe := e.exchange(c.ID, newSecret); oe != nil {
		t.Fatal(oe)
	}

	// An overlap without an expiry never accepts the previous secret.
	conn.PreviousSecretExpiresAt = nil
	e.store.put(conn)
	res, oe = e.exchange(c.ID, oldSecret)
	wantOAuth(t, res, oe, 401, OAuthInvalidClient, oldSecret, newSecret)
}

func TestExchangeFailureLimitPerClient(t *testing.T) {
	e := newTokenEnv(t)
	c, secret := addConn(t, e.store, e.clock, bus.KindConsumer)
	for i := 0; i < FailuresPerClient; i++ {
		// From different addresses: only the client id limit applies.
		_, oe := e.svc.Exchange(context.Background(), c.ID, "wrong", fmt.Sprintf("198.51.100.%d:1", i))
		if oe == nil || oe.Code != OAuthInvalidClient {
			t.Fatalf("failure %d: %v", i+1, oe)
		}
		e.clock.Advance(time.Second)
	}
	// The 21st attempt, even a correct one from a fresh address: 429.
	res, oe := e.svc.Exchange(context.Background(), c.ID, secret, "192.0.2.1:1")
	wantOAuth(t, res, oe, 429, OAuthSlowDown, secret)
	// The window opened at t0; 20 s have passed: 40 s to wait.
	if oe.RetryAfter != 40*time.Second {
		t.Fatalf("Retry-After = %v, want 40s", oe.RetryAfter)
	}
	// Other clients are not affected.
	d, dSecret := addConn(t, e.store, e.clock, bus.KindConsumer)
	if _, oe := e.exchange(d.ID, dSecret); oe != nil {
		t.Fatal(oe)
	}
	e.clock.Advance(40*time.Second - time.Millisecond)
	res, oe = e.exchange(c.ID, secret)
	wantOAuth(t, res, oe, 429, OAuthSlowDown, secret)
	if oe.RetryAfter != time.Second {
		t.Fatalf("Retry-After = %v, want rounded up to 1s", oe.RetryAfter)
	}
	e.clock.Advance(time.Millisecond) // the minute has passed
	if _, oe := e.exchange(c.ID, secret); oe != nil {
		t.Fatalf("after the minute: %v", oe)
	}
}

func TestExchangeFailureLimitPerAddress(t *testing.T) {
	e := newTokenEnv(t)
	c, secret := addConn(t, e.store, e.clock, bus.KindConsumer)
	for i := 0; i < FailuresPerRemoteAddr; i++ {
		// Each failure for a different unknown client id, from one address
		// (on different ports).
		_, oe := e.svc.Exchange(context.Background(), bus.NewID(bus.PrefixConnection), "x", fmt.Sprintf("203.0.113.7:%d", 1000+i))
		if oe == nil || oe.Code != OAuthInvalidClient {
			t.Fatalf("failure %d: %v", i+1, oe)
		}
	}
	res, oe := e.exchange(c.ID, secret)
	wantOAuth(t, res, oe, 429, OAuthSlowDown, secret)
	if oe.RetryAfter != time.Minute {
		t.Fatalf("Retry-After = %v", oe.RetryAfter)
	}
	// Another address gets on.
	if _, oe := e.svc.Exchange(context.Background(), c.ID, secret, "192.0.2.9:5"); oe != nil {
		t.Fatal(oe)
	}
	e.clock.Advance(time.Minute)
	if _, oe := e.exchange(c.ID, secret); oe != nil {
		t.Fatal(oe)
	}
}

func TestExchangeStoreDown(t *testing.T) {
	e := newTokenEnv(t)
	c, secret := addConn(t, e.store, e.clock, bus.KindConsumer)
	e.store.fail = bus.ErrUnavailable
	res, oe := e.exchange(c.ID, secret)
	wantOAuth(t, res, oe, 503, OAuthTemporarilyUnavailable, secret)
	if !errors.Is(oe.Err, bus.ErrUnavailable) || oe.RetryAfter <= 0 {
		t.Fatalf("oe = %+v", oe)
	}
}

// A store error that is not unavailability (a bug) is a 500 server_error,
// not a 503 that would have the client retry for ever.
func TestExchangeStoreBugIsServerError(t *testing.T) {
	e := newTokenEnv(t)
	c, secret := addConn(t, e.store, e.clock, bus.KindConsumer)
	e.store.fail = errors.New("injected bug")
	res, oe := e.exchange(c.ID, secret)
	wantOAuth(t, res, oe, 500, "server_error", secret)
	if oe.RetryAfter != 0 {
		t.Fatalf("oe = %+v", oe)
	}
}

// TestExchangeConcurrentFailuresAreCounted: wrong secrets for one client
// id sent all at once, against a store whose reads take a while, are
// counted in turn: exactly the limit's number get 401, the rest 429.
func TestExchangeConcurrentFailuresAreCounted(t *testing.T) {
	e := newTokenEnv(t)
	c, _ := addConn(t, e.store, e.clock, bus.KindConsumer)
	e.store.mu.Lock()
	e.store.delay = 2 * time.Millisecond
	e.store.mu.Unlock()
	const burst = 100
	codes := make(chan string, burst)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, oe := e.svc.Exchange(context.Background(), c.ID, "wrong", fmt.Sprintf("198.51.%d.%d:1", i/200, i%200))
			if oe == nil {
				codes <- "ok"
				return
			}
			codes <- oe.Code
		}()
	}
	wg.Wait()
	close(codes)
	got := map[string]int{}
	for code := range codes {
		got[code]++
	}
	if got[OAuthInvalidClient] != FailuresPerClient || got[OAuthSlowDown] != burst-FailuresPerClient {
		t.Fatalf("%d wrong secrets at once: %v, want %d invalid_client and the rest slow_down", burst, got, FailuresPerClient)
	}
}
