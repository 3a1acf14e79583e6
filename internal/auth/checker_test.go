package auth

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

type checkEnv struct {
	store   *fakeStore
	clock   *bus.ManualClock
	signer  *Signer
	checker *Checker
}

func newCheckEnv(t *testing.T) *checkEnv {
	store := newFakeStore()
	clock := bus.NewManualClock(t0)
	s := newSignerT(t, store, clock, testEnv)
	return &checkEnv{store: store, clock: clock, signer: s, checker: NewChecker(store, s, clock, DefaultCheckTTL)}
}

func (e *checkEnv) token(t *testing.T, c bus.Connection) string {
	tok, _, err := e.signer.Issue(Claims{ClientID: c.ID, Tenant: c.WorkspaceID, Role: c.Kind, CredentialVersion: c.CredentialVersion})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestCheckAccepts(t *testing.T) {
	e := newCheckEnv(t)
	cons, _ := addConn(t, e.store, e.clock, bus.KindConsumer)
	prod, _ := addConn(t, e.store, e.clock, bus.KindProducer)
	c, err := e.checker.Check(context.Background(), e.token(t, cons), bus.KindConsumer, cons.WorkspaceID, cons.ID)
	if err != nil || c.ClientID != cons.ID {
		t.Fatalf("consumer: %+v, %v", c, err)
	}
	c, err = e.checker.Check(context.Background(), e.token(t, prod), bus.KindProducer, prod.WorkspaceID, "")
	if err != nil || c.ClientID != prod.ID || c.Role != bus.KindProducer {
		t.Fatalf("producer: %+v, %v", c, err)
	}
}

func TestCheckRules(t *testing.T) {
	e := newCheckEnv(t)
	ctx := context.Background()
	cons, _ := addConn(t, e.store, e.clock, bus.KindConsumer)
	prod, _ := addConn(t, e.store, e.clock, bus.KindProducer)
	consTok, prodTok := e.token(t, cons), e.token(t, prod)

	other := newSignerT(t, newFakeStore(), e.clock, testEnv) // another server's keys
	foreignTok, _, _ := other.Issue(Claims{ClientID: cons.ID, Tenant: cons.WorkspaceID, Role: bus.KindConsumer, CredentialVersion: 1})
	prodEnv := newSignerT(t, e.store, e.clock, "production")
	prodEnvTok, _, _ := prodEnv.Issue(Claims{ClientID: cons.ID, Tenant: cons.WorkspaceID, Role: bus.KindConsumer, CredentialVersion: 1})

	type tc struct {
		name                 string
		token                string
		role                 bus.ConnectionKind
		tenant, client, rule string
		wantInMessage        string
	}
	cases := []tc{
		{"missing", "", bus.KindConsumer, cons.WorkspaceID, cons.ID, bus.RuleUnauthenticated, "Missing"},
		{"malformed", "abc.def", bus.KindConsumer, cons.WorkspaceID, cons.ID, bus.RuleUnauthenticated, "malformed"},
		{"badly signed", foreignTok, bus.KindConsumer, cons.WorkspaceID, cons.ID, bus.RuleUnauthenticated, "signed"},
		{"other environment", prodEnvTok, bus.KindConsumer, cons.WorkspaceID, cons.ID, bus.RuleUnauthenticated, "environment"},
		{"producer token on pull", prodTok, bus.KindConsumer, prod.WorkspaceID, prod.ID, bus.RuleNotRegistered, "consumer"},
		{"consumer token on publish", consTok, bus.KindProducer, cons.WorkspaceID, "", bus.RuleNotRegistered, "producer"},
		{"wrong tenant", consTok, bus.KindConsumer, prod.WorkspaceID, cons.ID, bus.RuleTenantMismatch, cons.WorkspaceID},
		{"wrong tenant beats not owner", consTok, bus.KindConsumer, prod.WorkspaceID, prod.ID, bus.RuleTenantMismatch, "tenant"},
		{"not owner", consTok, bus.KindConsumer, cons.WorkspaceID, prod.ID, bus.RuleNotOwner, cons.ID},
		{"role beats tenant", prodTok, bus.KindConsumer, "wother", "cother", bus.RuleNotRegistered, "consumer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.checker.Check(ctx, c.token, c.role, c.tenant, c.client)
			r := wantRefusal(t, err, c.rule)
			if !strings.Contains(r.Violations[0].Message, c.wantInMessage) {
				t.Fatalf("message %q lacks %q", r.Violations[0].Message, c.wantInMessage)
			}
			mustNotContain(t, r.Error(), c.token)
		})
	}

	// Expired (by the clock).
	e.clock.Advance(time.Hour + TokenLeeway + time.Second)
	r := wantRefusal(t, checkErr(e, consTok, cons), bus.RuleUnauthenticated)
	if !strings.Contains(r.Violations[0].Message, "expired") {
		t.Fatalf("message = %q", r.Violations[0].Message)
	}
}

func checkErr(e *checkEnv, tok string, c bus.Connection) error {
	_, err := e.checker.Check(context.Background(), tok, c.Kind, c.WorkspaceID, ownerArg(c))
	return err
}

func ownerArg(c bus.Connection) string {
	if c.Kind == bus.KindConsumer {
		return c.ID
	}
	return ""
}

func TestCheckCredentialVersionAndCacheWindow(t *testing.T) {
	e := newCheckEnv(t)
	cons, _ := addConn(t, e.store, e.clock, bus.KindConsumer)
	tok := e.token(t, cons)
	if err := checkErr(e, tok, cons); err != nil {
		t.Fatal(err)
	}

	// Another node rotates the secret: credential_version goes up.
	c := e.store.get(cons.ID)
	c.CredentialVersion++
	e.store.put(c)

	// Cached: still accepted within the TTL, without reading the store.
	views := e.store.viewCount()
	e.clock.Advance(DefaultCheckTTL - time.Millisecond)
	if err := checkErr(e, tok, cons); err != nil {
		t.Fatalf("within the cache window: %v", err)
	}
	if e.store.viewCount() != views {
		t.Fatal("cache hit read the store")
	}
	// Past the TTL: refused as unauthenticated (well within 30 s).
	e.clock.Advance(time.Millisecond)
	r := wantRefusal(t, checkErr(e, tok, cons), bus.RuleUnauthenticated)
	if !strings.Contains(r.Violations[0].Message, "rotated or revoked") {
		t.Fatalf("message = %q", r.Violations[0].Message)
	}
	// A token with the new version works.
	if err := checkErr(e, e.token(t, c), c); err != nil {
		t.Fatal(err)
	}

	// Stale version beats revoked (401 before 403).
	c.Status = bus.StatusRevoked
	e.store.put(c)
	e.checker.Invalidate(c.ID)
	wantRefusal(t, checkErr(e, tok, cons), bus.RuleUnauthenticated)
}

func TestCheckRevokeRestoreRemoveAndInvalidate(t *testing.T) {
	e := newCheckEnv(t)
	cons, _ := addConn(t, e.store, e.clock, bus.KindConsumer)
	tok := e.token(t, cons)
	if err := checkErr(e, tok, cons); err != nil {
		t.Fatal(err)
	}

	// Revoked on this node: Invalidate makes it take effect at once.
	c := e.store.get(cons.ID)
	c.Status = bus.StatusRevoked
	e.store.put(c)
	e.checker.Invalidate(c.ID)
	r := wantRefusal(t, checkErr(e, tok, cons), bus.RuleNotRegistered)
	if !strings.Contains(r.Violations[0].Message, "revoked") || !strings.Contains(r.Violations[0].Message, "restore") {
		t.Fatalf("message = %q", r.Violations[0].Message)
	}

	// Restored on another node: the same token works again after the TTL.
	c.Status = bus.StatusActive
	e.store.put(c)
	wantRefusal(t, checkErr(e, tok, cons), bus.RuleNotRegistered)
	e.clock.Advance(DefaultCheckTTL)
	if err := checkErr(e, tok, cons); err != nil {
		t.Fatalf("after restore: %v", err)
	}

	// Removed on another node: 403 within the TTL.
	e.store.remove(c.ID)
	if err := checkErr(e, tok, cons); err != nil {
		t.Fatalf("cached until the TTL ends: %v", err)
	}
	e.clock.Advance(DefaultCheckTTL)
	r = wantRefusal(t, checkErr(e, tok, cons), bus.RuleNotRegistered)
	if !strings.Contains(r.Violations[0].Message, "removed") {
		t.Fatalf("message = %q", r.Violations[0].Message)
	}
}

func TestCheckStoreDownIsInternal(t *testing.T) {
	e := newCheckEnv(t)
	cons, _ := addConn(t, e.store, e.clock, bus.KindConsumer)
	tok := e.token(t, cons)
	e.store.mu.Lock()
	e.store.fail = bus.ErrUnavailable
	e.store.mu.Unlock()
	err := checkErr(e, tok, cons)
	if _, ok := bus.AsError(err); ok || !errors.Is(err, bus.ErrUnavailable) {
		t.Fatalf("err = %v, want an internal error", err)
	}
}

func TestCheckCacheBounded(t *testing.T) {
	e := newCheckEnv(t)
	// Fill the cache with entries read long ago, then one more check.
	e.checker.mu.Lock()
	for i := 0; i < maxCachedConnections; i++ {
		e.checker.cache[bus.NewID(bus.PrefixConnection)] = cacheEntry{fetchedAt: t0.Add(-time.Hour)}
	}
	e.checker.mu.Unlock()
	cons, _ := addConn(t, e.store, e.clock, bus.KindConsumer)
	if err := checkErr(e, e.token(t, cons), cons); err != nil {
		t.Fatal(err)
	}
	if n := len(e.checker.cache); n != 1 {
		t.Fatalf("%d entries after eviction, want 1", n)
	}
	// Full of fresh entries: half are dropped.
	e.checker.mu.Lock()
	for i := len(e.checker.cache); i < maxCachedConnections; i++ {
		e.checker.cache[bus.NewID(bus.PrefixConnection)] = cacheEntry{fetchedAt: e.clock.Now()}
	}
	e.checker.mu.Unlock()
	other, _ := addConn(t, e.store, e.clock, bus.KindConsumer)
	if err := checkErr(e, e.token(t, other), other); err != nil {
		t.Fatal(err)
	}
	if n := len(e.checker.cache); n > maxCachedConnections/2+1 {
		t.Fatalf("%d entries, want at most half the bound", n)
	}
}

func TestCheckConcurrent(t *testing.T) {
	e := newCheckEnv(t)
	cons, _ := addConn(t, e.store, e.clock, bus.KindConsumer)
	tok := e.token(t, cons)
	done := make(chan error)
	for i := 0; i < 8; i++ {
		go func() {
			var err error
			for j := 0; j < 50 && err == nil; j++ {
				err = checkErr(e, tok, cons)
				e.checker.Invalidate(cons.ID)
				e.clock.Advance(time.Millisecond)
			}
			done <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// A token verified once is not verified again, but its expiry still holds.
func TestCheckVerifiedTokenStillExpires(t *testing.T) {
	e := newCheckEnv(t)
	cons, _ := addConn(t, e.store, e.clock, bus.KindConsumer)
	tok := e.token(t, cons)
	for range 3 {
		if _, err := e.checker.Check(context.Background(), tok, bus.KindConsumer, cons.WorkspaceID, cons.ID); err != nil {
			t.Fatalf("check: %v", err)
		}
	}
	if _, ok := e.checker.verified.get(tok, e.clock.Now()); !ok {
		t.Fatal("verified token not remembered")
	}
	e.clock.Advance(TokenLifetime + TokenLeeway + time.Second)
	_, err := e.checker.Check(context.Background(), tok, bus.KindConsumer, cons.WorkspaceID, cons.ID)
	if re, ok := bus.AsError(err); !ok || re.Rule() != bus.RuleUnauthenticated {
		t.Fatalf("expired token: %v, want %s", err, bus.RuleUnauthenticated)
	}
	// A tampered copy of a remembered token is still refused.
	if _, err := e.checker.Check(context.Background(), tok[:len(tok)-2]+"AA", bus.KindConsumer, cons.WorkspaceID, cons.ID); err == nil {
		t.Fatal("tampered token accepted")
	}
}

// A state older than the TTL but younger than staleCheckLimit is read
// again with its workspace's: one read brings the workspace's other cached
// connections up to date, a change made meanwhile is seen by the check
// that reads, and a connection missing from the workspace was removed.
func TestCheckStaleRefreshesWorkspace(t *testing.T) {
	e := newCheckEnv(t)
	a, _ := addConn(t, e.store, e.clock, bus.KindConsumer)
	b := e.store.get(a.ID)
	b.ID = bus.NewID(bus.PrefixConnection)
	e.store.put(b)
	c := b
	c.ID = bus.NewID(bus.PrefixConnection)
	e.store.put(c)
	ta, tb, tc := e.token(t, a), e.token(t, b), e.token(t, c)
	for _, x := range []struct {
		tok string
		c   bus.Connection
	}{{ta, a}, {tb, b}, {tc, c}} {
		if err := checkErr(e, x.tok, x.c); err != nil {
			t.Fatal(err)
		}
	}

	// Another node revokes a's secret and removes c.
	a2 := e.store.get(a.ID)
	a2.CredentialVersion++
	e.store.put(a2)
	e.store.remove(c.ID)

	e.clock.Advance(DefaultCheckTTL + 5*time.Second)
	views := e.store.viewCount()
	wantRefusal(t, checkErr(e, ta, a), bus.RuleUnauthenticated)
	if n := e.store.viewCount() - views; n != 1 {
		t.Fatalf("%d store reads, want 1 (the workspace)", n)
	}
	// b was read with it.
	if err := checkErr(e, tb, b); err != nil {
		t.Fatal(err)
	}
	if n := e.store.viewCount() - views; n != 1 {
		t.Fatalf("%d store reads, want 1 (b was fresh)", n)
	}
	// c, missing from the list, is still stale: its own check reads the
	// workspace again and finds it removed.
	wantRefusal(t, checkErr(e, tc, c), bus.RuleNotRegistered)
	if n := e.store.viewCount() - views; n != 2 {
		t.Fatalf("%d store reads, want 2", n)
	}

	// Past staleCheckLimit a state is read alone again.
	e.clock.Advance(staleCheckLimit)
	views = e.store.viewCount()
	if err := checkErr(e, tb, b); err != nil {
		t.Fatal(err)
	}
	if n := e.store.viewCount() - views; n != 1 {
		t.Fatalf("%d store reads, want 1", n)
	}
}

// While a workspace is read again, its other stale states answer checks
// (within staleCheckLimit of their read); one the store cannot list is
// read alone.
func TestCheckStaleWhileRefreshing(t *testing.T) {
	e := newCheckEnv(t)
	a, _ := addConn(t, e.store, e.clock, bus.KindConsumer)
	tok := e.token(t, a)
	if err := checkErr(e, tok, a); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(DefaultCheckTTL)
	e.checker.mu.Lock()
	e.checker.refreshing[a.WorkspaceID] = struct{}{}
	e.checker.mu.Unlock()
	views := e.store.viewCount()
	a2 := e.store.get(a.ID)
	a2.Status = bus.StatusRevoked
	e.store.put(a2)
	if err := checkErr(e, tok, a); err != nil {
		t.Fatalf("stale state while its workspace is read: %v", err)
	}
	if e.store.viewCount() != views {
		t.Fatal("read the store while its workspace is read")
	}
	e.checker.mu.Lock()
	delete(e.checker.refreshing, a.WorkspaceID)
	e.checker.mu.Unlock()
	wantRefusal(t, checkErr(e, tok, a), bus.RuleNotRegistered)

	// The store fails: the error, as for any read.
	e.clock.Advance(DefaultCheckTTL)
	e.store.mu.Lock()
	e.store.fail = bus.ErrUnavailable
	e.store.mu.Unlock()
	if err := checkErr(e, tok, a); !errors.Is(err, bus.ErrUnavailable) {
		t.Fatalf("err = %v, want unavailable", err)
	}
	e.checker.mu.Lock()
	n := len(e.checker.refreshing)
	e.checker.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d workspaces still marked as being read", n)
	}
}
