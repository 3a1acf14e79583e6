package auth

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sombus/sombus/internal/bus"
)

// fuzzHandleKey keys the handle codec of the fuzz targets, so that the
// committed seeds stay valid handles.
var fuzzHandleKey = bytes.Repeat([]byte{0x5a}, 32)

// fuzzHandles are valid handles: queue ids of every length modulo 3, so
// that the base64url text ends in each of its three shapes.
var fuzzHandles = []bus.Handle{
	{QueueID: "cxxxxxxxxxxxxxxxxxxxxxxxxxx", StoryID: 1, Seq: 1, Nonce: 7},
	{QueueID: "c", StoryID: 2, Seq: 3, Nonce: -1},
	{QueueID: "cq", StoryID: 1 << 40, Seq: 1 << 62, Nonce: 0},
	{QueueID: "", StoryID: 0, Seq: 0, Nonce: 0},
	{QueueID: strings.Repeat("q", 128), StoryID: -5, Seq: 9, Nonce: 1},
}

// FuzzHandleDecode: a string is a receipt handle only when it is the one
// text Encode makes of what it decodes to; everything else is refused with
// ErrInvalidHandle.
func FuzzHandleDecode(f *testing.F) {
	c, err := NewHandleCodec(fuzzHandleKey)
	if err != nil {
		f.Fatal(err)
	}
	for _, h := range fuzzHandles {
		s := c.Encode(h)
		f.Add(s)
		f.Add(s[:len(s)-1])
		f.Add(s + "A")
		f.Add(strings.ToUpper(s))
	}
	f.Add("")
	f.Add("AQ")
	f.Add(strings.Repeat("A", 600))
	f.Fuzz(func(t *testing.T, s string) {
		h, err := c.Decode(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidHandle) {
				t.Fatalf("Decode(%q) = %v, not ErrInvalidHandle", s, err)
			}
			if h != (bus.Handle{}) {
				t.Fatalf("refused %q but returned %+v", s, h)
			}
			return
		}
		if again := c.Encode(h); again != s {
			t.Fatalf("%q decodes to %+v, which encodes to %q: two texts for one handle", s, h, again)
		}
		if len(h.QueueID) > maxHandleQueueID {
			t.Fatalf("decoded a queue id of %d bytes", len(h.QueueID))
		}
	})
}

// FuzzHandleRoundTrip: every handle round-trips, and any change to one
// character of its text, or a cut, is refused.
func FuzzHandleRoundTrip(f *testing.F) {
	c, err := NewHandleCodec(fuzzHandleKey)
	if err != nil {
		f.Fatal(err)
	}
	for i, h := range fuzzHandles {
		f.Add(h.QueueID, h.StoryID, h.Seq, h.Nonce, uint16(i*7), byte(i+1))
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	f.Fuzz(func(t *testing.T, queue string, story, seq, nonce int64, pos uint16, change byte) {
		if len(queue) > maxHandleQueueID {
			queue = queue[:maxHandleQueueID]
		}
		h := bus.Handle{QueueID: queue, StoryID: story, Seq: seq, Nonce: nonce}
		s := c.Encode(h)
		got, err := c.Decode(s)
		if err != nil || got != h {
			t.Fatalf("Decode(Encode(%+v)) = %+v, %v", h, got, err)
		}
		i := int(pos) % len(s)
		k := (strings.IndexByte(alphabet, s[i]) + 1 + int(change)%63) % 64
		altered := s[:i] + string(alphabet[k]) + s[i+1:]
		if got, err := c.Decode(altered); err == nil {
			t.Fatalf("altered handle %q (from %q) accepted as %+v", altered, s, got)
		}
		if got, err := c.Decode(s[:i]); err == nil {
			t.Fatalf("cut handle %q accepted as %+v", s[:i], got)
		}
	})
}

// fuzzSigner is a signer over a fixed key (so that the committed seed
// tokens verify in every run) and a checker over a few connections, at a
// fixed time.
type fuzzSigner struct {
	signer  *Signer
	checker *Checker
	store   *fakeStore
	conns   []bus.Connection // active consumer, active producer, revoked, rotated
	tokens  []string         // one per connection, valid now
}

const (
	fuzzKid = "fuzz-kid"
	fuzzWS  = "waaaaaaaaaaaaaaaaaaaaaaaaaa"
)

// fuzzNow is the fuzz signer's clock; fuzzTokens were issued at it.
var fuzzNow = time.Date(2026, 9, 25, 10, 0, 0, 0, time.UTC)

func newFuzzSigner(tb testing.TB) *fuzzSigner {
	tb.Helper()
	d := sha256.Sum256([]byte("sombus fuzz signing key"))
	priv, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d[:])
	if err != nil {
		tb.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		tb.Fatal(err)
	}
	store := newFakeStore()
	store.keys = []bus.SigningKey{{ID: fuzzKid, Algorithm: AlgES256, PrivateKey: der, CreatedAt: fuzzNow}}
	clock := bus.NewManualClock(fuzzNow)
	s, err := NewSigner(context.Background(), store, testIssuer, testEnv, clock, nil)
	if err != nil {
		tb.Fatal(err)
	}
	fs := &fuzzSigner{signer: s, checker: NewChecker(store, s, clock, DefaultCheckTTL), store: store}
	mk := func(id string, kind bus.ConnectionKind, status bus.ConnectionStatus, version int64) {
		c := bus.Connection{ID: id, WorkspaceID: fuzzWS, Kind: kind, Status: status, CredentialVersion: version, QuotaTier: "standard"}
		store.put(c)
		fs.conns = append(fs.conns, c)
		tok, _, err := s.Issue(Claims{ClientID: id, Tenant: fuzzWS, Role: kind, CredentialVersion: 1})
		if err != nil {
			tb.Fatal(err)
		}
		fs.tokens = append(fs.tokens, tok)
	}
	mk("caaaaaaaaaaaaaaaaaaaaaaaaaa", bus.KindConsumer, bus.StatusActive, 1)
	mk("cbbbbbbbbbbbbbbbbbbbbbbbbbb", bus.KindProducer, bus.StatusActive, 1)
	mk("ccccccccccccccccccccccccccc", bus.KindConsumer, bus.StatusRevoked, 1)
	mk("cdddddddddddddddddddddddddd", bus.KindConsumer, bus.StatusActive, 2) // rotated since its token
	return fs
}

// canonical is the token Issue would write for claims, but for the
// signature: the header and payload texts it signs.
func (fs *fuzzSigner) canonical(tb testing.TB, c *Claims) string {
	tb.Helper()
	v := c.CredentialVersion
	tc := tokenClaims{
		Claims: jwt.Claims{Issuer: c.Issuer, Audience: jwt.Audience{c.Audience}, Subject: c.ClientID,
			IssuedAt: jwt.NewNumericDate(c.IssuedAt), Expiry: jwt.NewNumericDate(c.ExpiresAt), ID: c.ID},
		ClientID: c.ClientID, Tenant: c.Tenant, Role: string(c.Role), CredentialVersion: &v,
	}
	// The signer writes the claims as a JSON object with sorted names.
	b, err := json.Marshal(tc)
	if err != nil {
		tb.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		tb.Fatal(err)
	}
	payload, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"ES256","kid":"` + fuzzKid + `","typ":"JWT"}`))
	return header + "." + base64.RawURLEncoding.EncodeToString(payload)
}

// tokenRules are the rules a token check may refuse with.
var tokenRules = []string{bus.RuleUnauthenticated, bus.RuleNotRegistered, bus.RuleTenantMismatch, bus.RuleNotOwner}

// FuzzVerifyAndCheck: Verify accepts only a token this signer issued, in
// the one form it issues (header, payload and a canonical low-s signature);
// a refusal is producer.unauthenticated that never repeats the token; and
// Check accepts only for the route the token's connection may use (its
// role, its workspace, its own {c}), while the connection is active and its
// credential version not above the token's.
func FuzzVerifyAndCheck(f *testing.F) {
	fs := newFuzzSigner(f)
	for i, tok := range fs.tokens {
		c := fs.conns[i]
		client := c.ID
		if c.Kind == bus.KindProducer {
			client = ""
		}
		f.Add(tok, byte(i), c.WorkspaceID, client)
		f.Add(tok, byte(i+1), c.WorkspaceID, client)
		f.Add(tok, byte(i), "wother", client)
		f.Add(tok, byte(i), c.WorkspaceID, "cother")
		parts := strings.Split(tok, ".")
		f.Add(parts[0]+"."+parts[1]+"."+highSTwinText(parts[2]), byte(i), c.WorkspaceID, client)
		f.Add(parts[0]+"."+parts[1]+".", byte(i), c.WorkspaceID, client)
		// A line break in the signature, which base64 decoders skip.
		f.Add(parts[0]+"."+parts[1]+"."+parts[2][:10]+"\n"+parts[2][10:], byte(i), c.WorkspaceID, client)
	}
	f.Add("", byte(0), fuzzWS, "")
	f.Add("eyJhbGciOiJub25lIn0.e30.", byte(0), fuzzWS, "")
	f.Fuzz(func(t *testing.T, token string, role byte, tenant, client string) {
		kind := bus.KindConsumer
		if role%2 == 1 {
			kind = bus.KindProducer
		}
		claims, verr := fs.signer.Verify(token)
		if verr != nil {
			e := wantTokenRefusal(t, verr, token)
			if e.Rule() != bus.RuleUnauthenticated {
				t.Fatalf("Verify refused with %s", e.Rule())
			}
		} else {
			sig, err := base64.RawURLEncoding.Strict().DecodeString(token[strings.LastIndexByte(token, '.')+1:])
			got := fs.canonical(t, claims)
			if err != nil || token != got+"."+base64.RawURLEncoding.EncodeToString(sig) || !canonicalSignature(token) {
				t.Fatalf("accepted %q, which is not the token issued for its claims (%q.…)", token, got)
			}
			if claims.ExpiresAt.Sub(claims.IssuedAt) > TokenLifetime || claims.Issuer != testIssuer || claims.Audience != testEnv {
				t.Fatalf("accepted claims %+v", claims)
			}
		}
		got, cerr := fs.checker.Check(context.Background(), token, kind, tenant, client)
		if verr != nil {
			if cerr == nil {
				t.Fatalf("Check accepted %q, which Verify refuses", token)
			}
		}
		if cerr != nil {
			e := wantTokenRefusal(t, cerr, token)
			ok := false
			for _, r := range tokenRules {
				ok = ok || e.Rule() == r
			}
			if !ok {
				t.Fatalf("Check refused with %s", e.Rule())
			}
			return
		}
		conn := fs.store.get(got.ClientID)
		if got.Role != kind || got.Tenant != tenant || (client != "" && client != got.ClientID) ||
			conn.ID == "" || conn.Status != bus.StatusActive || conn.Kind != kind || conn.WorkspaceID != tenant ||
			conn.CredentialVersion > got.CredentialVersion {
			t.Fatalf("Check accepted %+v for role %s, tenant %q, client %q; connection %+v", got, kind, tenant, client, conn)
		}
	})
}

// wantTokenRefusal fails unless err is a refusal with its rule's status
// whose message does not hold the token.
func wantTokenRefusal(t *testing.T, err error, token string) *bus.Error {
	t.Helper()
	e, ok := bus.AsError(err)
	if !ok {
		t.Fatalf("error %v is not a refusal", err)
	}
	if e.Status != bus.StatusOf(e.Rule()) || len(e.Violations) != 1 || !strings.HasSuffix(e.Violations[0].Message, ".") {
		t.Fatalf("refusal %d %+v", e.Status, e.Violations)
	}
	if len(token) >= 16 && strings.Contains(e.Error(), token) {
		t.Fatalf("refusal %q repeats the token", e.Error())
	}
	return e
}

// highSTwinText is the other form (r, N-s) of an ES256 signature text.
func highSTwinText(sig string) string {
	b, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(b) != 64 {
		return sig
	}
	s := new(big.Int).SetBytes(b[32:])
	s.Sub(elliptic.P256().Params().N, s)
	s.FillBytes(b[32:])
	return base64.RawURLEncoding.EncodeToString(b)
}
