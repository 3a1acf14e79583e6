package auth

import (
	"crypto/elliptic"
	"encoding/base64"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sombus/sombus/internal/bus"
)

// highSTwin returns tok with its ES256 signature (r, s) replaced by
// (r, N-s): the same ECDSA signature in its other form, which verifies
// under the plain ECDSA equation.
func highSTwin(t *testing.T, tok string) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		t.Fatalf("signature: %v (%d bytes)", err, len(sig))
	}
	n := elliptic.P256().Params().N
	s := new(big.Int).SetBytes(sig[32:])
	twin := make([]byte, 64)
	copy(twin, sig[:32])
	new(big.Int).Sub(n, s).FillBytes(twin[32:])
	return parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(twin)
}

// Every token the signer issues has a low-s signature, and the high-s twin
// of a valid token is refused: one token string per signature.
func TestVerifyRefusesHighSTwin(t *testing.T) {
	clock := bus.NewManualClock(t0)
	s := newSignerT(t, newFakeStore(), clock, testEnv)
	half := new(big.Int).Rsh(elliptic.P256().Params().N, 1)
	for i := 0; i < 64; i++ { // half of all raw ECDSA signatures are high-s
		tok := mustIssue(t, s)
		sig, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[2])
		if new(big.Int).SetBytes(sig[32:]).Cmp(half) > 0 {
			t.Fatalf("issued token %d has a high-s signature", i)
		}
		if _, err := s.Verify(tok); err != nil {
			t.Fatalf("issued token %d refused: %v", i, err)
		}
		twin := highSTwin(t, tok)
		e := wantRefusal(t, verifyErr(s, twin), bus.RuleUnauthenticated)
		mustNotContain(t, e.Error(), twin)
	}
}

// The signature part must be the one base64url text of its bytes: the
// spare low bits of its last character cannot make a second token string.
func TestVerifyRefusesNonCanonicalSignatureText(t *testing.T) {
	s := newSignerT(t, newFakeStore(), bus.NewManualClock(t0), testEnv)
	tok := mustIssue(t, s)
	parts := strings.Split(tok, ".")
	last := parts[2][len(parts[2])-1]
	alphabet := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, last)
	other := alphabet[i^1] // differs only in a bit the decoder drops
	twin := parts[0] + "." + parts[1] + "." + parts[2][:len(parts[2])-1] + string(other)
	wantRefusal(t, verifyErr(s, twin), bus.RuleUnauthenticated)
}

// A token signed with the real key but living longer than the service
// issues is refused, even while it has not expired.
func TestVerifyRefusesLongLifetime(t *testing.T) {
	clock := bus.NewManualClock(t0)
	store := newFakeStore()
	s := newSignerT(t, store, clock, testEnv)
	key, err := parseStoredKey(store.keys[0])
	if err != nil {
		t.Fatal(err)
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: store.keys[0].ID}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(lifetime time.Duration) string {
		m := rawClaims(mustIssue(t, s))
		m["exp"] = t0.Add(lifetime).Unix()
		tok, err := jwt.Signed(sig).Claims(m).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return lowSTwin(t, tok)
	}
	// Exactly the issued lifetime: accepted (the helper is sound).
	if _, err := s.Verify(sign(TokenLifetime)); err != nil {
		t.Fatalf("a token of the issued lifetime was refused: %v", err)
	}
	for _, d := range []time.Duration{TokenLifetime + time.Second, 24 * time.Hour, 10 * 365 * 24 * time.Hour} {
		tok := sign(d)
		e := wantRefusal(t, verifyErr(s, tok), bus.RuleUnauthenticated)
		mustNotContain(t, e.Error(), tok)
	}
}

// lowSTwin returns tok with its signature in low-s form, so that a test
// signature made with go-jose directly passes the low-s check.
func lowSTwin(t *testing.T, tok string) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
	half := new(big.Int).Rsh(elliptic.P256().Params().N, 1)
	if new(big.Int).SetBytes(sig[32:]).Cmp(half) > 0 {
		return highSTwin(t, tok)
	}
	return tok
}
