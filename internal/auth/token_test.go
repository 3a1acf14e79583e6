package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sombus/sombus/internal/bus"
)

func testClaims() Claims {
	return Claims{
		ClientID:          bus.NewID(bus.PrefixConnection),
		Tenant:            bus.NewID(bus.PrefixWorkspace),
		Role:              bus.KindConsumer,
		CredentialVersion: 3,
	}
}

func TestIssueVerifyRoundTrip(t *testing.T) {
	clock := bus.NewManualClock(t0)
	s := newSignerT(t, newFakeStore(), clock, testEnv)
	in := testClaims()
	tok, expiresIn, err := s.Issue(in)
	if err != nil {
		t.Fatal(err)
	}
	if expiresIn != 3600 {
		t.Fatalf("expires_in = %d, want 3600", expiresIn)
	}
	got, err := s.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if got.ClientID != in.ClientID || got.Tenant != in.Tenant || got.Role != in.Role ||
		got.CredentialVersion != 3 || got.Issuer != testIssuer || got.Audience != testEnv ||
		!got.IssuedAt.Equal(t0) || !got.ExpiresAt.Equal(t0.Add(time.Hour)) || got.ID == "" {
		t.Fatalf("claims = %+v", got)
	}

	// The raw claims are the ones the HTTP contract names.
	var raw map[string]any
	payload, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	if err := json.Unmarshal(payload, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"iss", "aud", "sub", "client_id", "tenant", "role", "credential_version", "iat", "exp", "jti"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("claim %s missing from %v", k, raw)
		}
	}
	if raw["sub"] != in.ClientID || raw["aud"] != testEnv || raw["role"] != "consumer" {
		t.Errorf("raw claims = %v", raw)
	}
	header, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
	if !strings.Contains(string(header), `"alg":"ES256"`) || !strings.Contains(string(header), `"kid":`) {
		t.Errorf("header = %s", header)
	}

	// Two tokens have different jti.
	tok2, _, _ := s.Issue(in)
	got2, _ := s.Verify(tok2)
	if got2.ID == got.ID {
		t.Fatal("jti repeated")
	}
}

func TestIssueNeedsClaims(t *testing.T) {
	s := newSignerT(t, newFakeStore(), bus.NewManualClock(t0), testEnv)
	for _, c := range []Claims{{Tenant: "w", Role: bus.KindConsumer}, {ClientID: "c", Role: bus.KindConsumer}, {ClientID: "c", Tenant: "w", Role: "admin"}} {
		if _, _, err := s.Issue(c); err == nil {
			t.Errorf("Issue(%+v) succeeded", c)
		}
	}
}

func TestVerifyExpiryWithClock(t *testing.T) {
	clock := bus.NewManualClock(t0)
	s := newSignerT(t, newFakeStore(), clock, testEnv)
	tok, _, _ := s.Issue(testClaims())

	clock.Set(t0.Add(time.Hour - time.Second))
	if _, err := s.Verify(tok); err != nil {
		t.Fatalf("before exp: %v", err)
	}
	clock.Set(t0.Add(time.Hour + TokenLeeway)) // the leeway's last instant
	if _, err := s.Verify(tok); err != nil {
		t.Fatalf("within leeway: %v", err)
	}
	clock.Set(t0.Add(time.Hour + TokenLeeway + time.Second))
	e := wantRefusal(t, verifyErr(s, tok), bus.RuleUnauthenticated)
	if !strings.Contains(e.Violations[0].Message, "expired") {
		t.Fatalf("message = %q", e.Violations[0].Message)
	}
	mustNotContain(t, e.Error(), tok)

	// A token from a node whose clock runs ahead beyond the leeway.
	clock.Set(t0.Add(-TokenLeeway - time.Second))
	wantRefusal(t, verifyErr(s, tok), bus.RuleUnauthenticated)
	clock.Set(t0.Add(-TokenLeeway))
	if _, err := s.Verify(tok); err != nil {
		t.Fatalf("iat within leeway: %v", err)
	}
}

func verifyErr(s *Signer, tok string) error {
	_, err := s.Verify(tok)
	return err
}

func TestVerifyRefusesAudienceAndIssuer(t *testing.T) {
	store := newFakeStore()
	clock := bus.NewManualClock(t0)
	sandbox := newSignerT(t, store, clock, testEnv)
	prod := newSignerT(t, store, clock, "production") // same keys, other environment
	tok, _, _ := sandbox.Issue(testClaims())
	e := wantRefusal(t, verifyErr(prod, tok), bus.RuleUnauthenticated)
	if !strings.Contains(e.Violations[0].Message, "environment") {
		t.Fatalf("message = %q", e.Violations[0].Message)
	}

	other, err := NewSigner(context.Background(), store, "https://elsewhere.test", testEnv, clock, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, _ = other.Issue(testClaims())
	wantRefusal(t, verifyErr(sandbox, tok), bus.RuleUnauthenticated)
}

func TestVerifyRefusesBadTokens(t *testing.T) {
	clock := bus.NewManualClock(t0)
	store := newFakeStore()
	s := newSignerT(t, store, clock, testEnv)
	good, _, _ := s.Issue(testClaims())
	parts := strings.Split(good, ".")
	kid := store.keys[0].ID

	// Another server's key (another store), with our kid in the header.
	foreignKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	foreign, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: foreignKey, KeyID: kid}}, nil)
	forgedES, err := jwt.Signed(foreign).Claims(rawClaims(good)).Serialize()
	if err != nil {
		t.Fatal(err)
	}

	// HS256 keyed with the public JWKS (the classic alg confusion).
	jwks, _ := s.JWKS()
	hs, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: jose.JSONWebKey{Key: jwks, KeyID: kid}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	forgedHS, err := jwt.Signed(hs).Claims(rawClaims(good)).Serialize()
	if err != nil {
		t.Fatal(err)
	}

	// alg "none" with no signature.
	noneHeader := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT","kid":"` + kid + `"}`))
	none := noneHeader + "." + parts[1] + "."

	// A payload changed under a valid signature (a higher credential_version).
	var m map[string]any
	p, _ := base64.RawURLEncoding.DecodeString(parts[1])
	_ = json.Unmarshal(p, &m)
	m["credential_version"] = 99
	p2, _ := json.Marshal(m)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(p2) + "." + parts[2]

	for name, tok := range map[string]string{
		"empty":        "",
		"garbage":      "not-a-token",
		"two parts":    parts[0] + "." + parts[1],
		"truncated":    good[:len(good)-5],
		"foreign key":  forgedES,
		"hs256":        forgedHS,
		"alg none":     none,
		"tampered":     tampered,
		"huge":         strings.Repeat("a", 10000),
		"bad sig b64":  parts[0] + "." + parts[1] + ".!!!",
		"sig of other": parts[0] + "." + parts[1] + "." + strings.Split(mustIssue(t, s), ".")[2],
	} {
		t.Run(name, func(t *testing.T) {
			e := wantRefusal(t, verifyErr(s, tok), bus.RuleUnauthenticated)
			if tok != "" {
				mustNotContain(t, e.Error(), tok)
			}
		})
	}
}

func mustIssue(t *testing.T, s *Signer) string {
	tok, _, err := s.Issue(testClaims())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// rawClaims returns the claims of tok without checking it.
func rawClaims(tok string) map[string]any {
	var m map[string]any
	p, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	_ = json.Unmarshal(p, &m)
	return m
}

func TestVerifyRequiresClaims(t *testing.T) {
	clock := bus.NewManualClock(t0)
	store := newFakeStore()
	s := newSignerT(t, store, clock, testEnv)
	key, _ := parseStoredKey(store.keys[0])
	sig, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: store.keys[0].ID}}, nil)
	base := rawClaims(mustIssue(t, s))
	for _, drop := range []string{"exp", "iat", "sub", "tenant", "role", "credential_version", "client_id"} {
		m := map[string]any{}
		for k, v := range base {
			if k != drop {
				m[k] = v
			}
		}
		tok, err := jwt.Signed(sig).Claims(m).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		wantRefusal(t, verifyErr(s, lowSTwin(t, tok)), bus.RuleUnauthenticated)
	}
	// Correctly signed with every claim: accepted (the helper is sound).
	tok, _ := jwt.Signed(sig).Claims(base).Serialize()
	if _, err := s.Verify(lowSTwin(t, tok)); err != nil {
		t.Fatal(err)
	}
}

func parseStoredKey(k bus.SigningKey) (*ecdsa.PrivateKey, error) { return x509Parse(k.PrivateKey) }

func TestNewSignerReusesStoredKey(t *testing.T) {
	store := newFakeStore()
	clock := bus.NewManualClock(t0)
	a := newSignerT(t, store, clock, testEnv)
	b := newSignerT(t, store, clock, testEnv)
	if len(store.keys) != 1 {
		t.Fatalf("%d keys stored, want 1", len(store.keys))
	}
	if store.keys[0].Algorithm != "ES256" {
		t.Fatalf("alg = %s", store.keys[0].Algorithm)
	}
	if _, err := x509Parse(store.keys[0].PrivateKey); err != nil {
		t.Fatalf("stored key is not PKCS#8 P-256: %v", err)
	}
	if _, err := b.Verify(mustIssue(t, a)); err != nil {
		t.Fatal(err)
	}
}

func TestNewSignerLosesRace(t *testing.T) {
	store := newFakeStore()
	clock := bus.NewManualClock(t0)
	winner, _ := newSigningKey(t0)
	// Another node stores its key first, and our insert conflicts.
	store.onKeyCreate = func(tx *fakeTx) error {
		tx.s.keys = append(tx.s.keys, winner)
		return bus.ErrConflict
	}
	s := newSignerT(t, store, clock, testEnv)
	if s.signKid != winner.ID || len(store.keys) != 1 {
		t.Fatalf("signing with %s, want the winner %s (%d keys)", s.signKid, winner.ID, len(store.keys))
	}
}

func TestNewSignerStoreDown(t *testing.T) {
	store := newFakeStore()
	store.fail = bus.ErrUnavailable
	_, err := NewSigner(context.Background(), store, testIssuer, testEnv, bus.NewManualClock(t0), nil)
	if !errors.Is(err, bus.ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
}

func TestSignsWithNewestAndReloadsUnknownKid(t *testing.T) {
	store := newFakeStore()
	clock := bus.NewManualClock(t0)
	a := newSignerT(t, store, clock, testEnv)
	b := newSignerT(t, store, clock, testEnv)
	old := mustIssue(t, a)

	// Another node adds a newer key and a signer built now uses it.
	clock.Advance(time.Minute)
	k, _ := newSigningKey(clock.Now())
	if err := store.Update(context.Background(), func(tx bus.Tx) error { return tx.SigningKeyCreate(k) }); err != nil {
		t.Fatal(err)
	}
	c := newSignerT(t, store, clock, testEnv)
	if c.signKid != k.ID {
		t.Fatalf("signing with %s, want newest %s", c.signKid, k.ID)
	}
	fresh := mustIssue(t, c)

	// b does not know k yet: the unknown kid makes it reload once.
	views := store.viewCount()
	if _, err := b.Verify(fresh); err != nil {
		t.Fatalf("verify with a new key: %v", err)
	}
	if store.viewCount() != views+1 {
		t.Fatalf("%d store reads, want 1", store.viewCount()-views)
	}
	if _, err := b.Verify(old); err != nil {
		t.Fatalf("old key must still verify: %v", err)
	}

	// Unknown kids reload at most once per interval.
	forged := forgeKid(t, fresh, "nope")
	views = store.viewCount()
	for i := 0; i < 10; i++ {
		wantRefusal(t, verifyErr(b, forged), bus.RuleUnauthenticated)
	}
	if n := store.viewCount() - views; n > 1 {
		t.Fatalf("%d reloads for unknown kids within the interval, want at most 1", n)
	}
	clock.Advance(keyReloadInterval)
	views = store.viewCount()
	wantRefusal(t, verifyErr(b, forged), bus.RuleUnauthenticated)
	if store.viewCount() != views+1 {
		t.Fatal("no reload after the interval")
	}

	// The store down during a reload is an internal error, not a refusal.
	clock.Advance(keyReloadInterval)
	store.mu.Lock()
	store.fail = bus.ErrUnavailable
	store.mu.Unlock()
	err := verifyErr(b, forged)
	if _, ok := bus.AsError(err); ok || !errors.Is(err, bus.ErrUnavailable) {
		t.Fatalf("err = %v, want internal", err)
	}
}

// forgeKid re-signs tok's claims with a fresh key under kid.
func forgeKid(t *testing.T, tok, kid string) string {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	sig, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, nil)
	out, err := jwt.Signed(sig).Claims(rawClaims(tok)).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestJWKS(t *testing.T) {
	store := newFakeStore()
	clock := bus.NewManualClock(t0)
	s := newSignerT(t, store, clock, testEnv)
	clock.Advance(time.Minute)
	k, _ := newSigningKey(clock.Now())
	_ = store.Update(context.Background(), func(tx bus.Tx) error { return tx.SigningKeyCreate(k) })
	if err := s.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	tok := mustIssue(t, s)

	body, err := s.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), `"d"`) {
		t.Fatalf("JWKS leaks private keys: %s", body)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 || set.Keys[0].KeyID != k.ID {
		t.Fatalf("keys = %+v, want 2, newest first", set.Keys)
	}
	for _, jwk := range set.Keys {
		if jwk.Algorithm != "ES256" || jwk.Use != "sig" || !jwk.IsPublic() || jwk.KeyID == "" {
			t.Fatalf("jwk = %+v", jwk)
		}
	}
	// A client verifies a token with the published set alone.
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	var c jwt.Claims
	if err := parsed.Claims(set, &c); err != nil {
		t.Fatalf("verify with JWKS: %v", err)
	}
}
