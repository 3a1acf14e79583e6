package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sombus/sombus/internal/bus"
)

// Token lifetimes and tolerances.
const (
	// TokenLifetime is how long an access token is valid: one hour (the HTTP contract).
	TokenLifetime = time.Hour
	// TokenLeeway is the clock skew Verify tolerates between the node that
	// issued a token and the node that checks it: a token is still accepted
	// up to 5 s after its exp, and one whose iat is up to 5 s ahead of this
	// node's clock is not refused as "issued in the future".
	TokenLeeway = 5 * time.Second
	// keyReloadInterval bounds how often an unknown kid makes Verify re-read
	// the signing keys from the store (another node may have made a key):
	// tokens with made-up kids cannot turn into a flood of store reads.
	keyReloadInterval = 5 * time.Second
	// maxTokenLength refuses absurd inputs before any parsing.
	maxTokenLength = 8 << 10
)

// AlgES256 is the one signing algorithm: ECDSA P-256 with SHA-256.
const AlgES256 = string(jose.ES256)

// Claims are the claims of a sombus access token (the HTTP contract).
type Claims struct {
	Issuer            string             // iss: this server
	Audience          string             // aud: the server's environment
	ClientID          string             // sub and client_id: the connection id
	Tenant            string             // tenant: the connection's workspace id
	Role              bus.ConnectionKind // role: consumer or producer
	CredentialVersion int64              // credential_version of the connection at issue
	IssuedAt          time.Time          // iat
	ExpiresAt         time.Time          // exp
	ID                string             // jti: random, unique per token
}

// tokenClaims is the JSON form of Claims; jwt.Claims carries the registered ones.
type tokenClaims struct {
	jwt.Claims
	ClientID          string `json:"client_id"`
	Tenant            string `json:"tenant"`
	Role              string `json:"role"`
	CredentialVersion *int64 `json:"credential_version"`
}

// Signer issues and verifies access tokens with the signing keys kept in
// the store, so that every node verifies every other node's tokens. Safe for
// concurrent use.
type Signer struct {
	store    bus.Store
	issuer   string
	audience string
	clock    bus.Clock
	logger   *slog.Logger

	mu      sync.RWMutex
	public  map[string]*ecdsa.PublicKey // by kid: every key that verifies
	order   []string                    // kids, newest first (for JWKS)
	signer  jose.Signer                 // signs with the newest key
	signKid string

	reloadMu   sync.Mutex // one reload at a time
	lastReload time.Time  // by the injected clock
}

// NewSigner loads the signing keys from the store. When there are none it
// makes an ES256 (ECDSA P-256) key, stores it (PKCS#8 DER under a random kid)
// and reads the keys again, so that nodes starting together end up with the
// same set. issuer is the iss claim (the server's public base URL, say) and
// audience the aud claim (the server's environment). logger may be nil.
func NewSigner(ctx context.Context, store bus.Store, issuer, audience string, clock bus.Clock, logger *slog.Logger) (*Signer, error) {
	if issuer == "" || audience == "" {
		return nil, errors.New("auth: signer needs an issuer and an audience")
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Signer{store: store, issuer: issuer, audience: audience, clock: clock, logger: logger}
	keys, err := s.readKeys(ctx)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		// Make the key outside the transaction: Update may run fn again.
		k, err := newSigningKey(clock.Now())
		if err != nil {
			return nil, err
		}
		err = store.Update(ctx, func(tx bus.Tx) error { return tx.SigningKeyCreate(k) })
		if err != nil && !errors.Is(err, bus.ErrConflict) {
			return nil, fmt.Errorf("auth: store signing key: %w", err)
		}
		// On success, and on a conflict (another node stored its key
		// first), read again: the newest stored key is the one to use.
		if keys, err = s.readKeys(ctx); err != nil {
			return nil, err
		}
		if len(keys) > 0 {
			logger.Info("token signing key ready", "kid", keys[0].ID, "keys", len(keys))
		}
	}
	if err := s.install(keys); err != nil {
		return nil, err
	}
	s.lastReload = clock.Now()
	return s, nil
}

// newSigningKey makes an ES256 key with a random kid.
func newSigningKey(now time.Time) (bus.SigningKey, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return bus.SigningKey{}, fmt.Errorf("auth: generate signing key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return bus.SigningKey{}, fmt.Errorf("auth: encode signing key: %w", err)
	}
	return bus.SigningKey{ID: randomToken(16), Algorithm: AlgES256, PrivateKey: der, CreatedAt: now}, nil
}

// readKeys lists the stored keys, newest first (ties broken by id so that
// every node picks the same one).
func (s *Signer) readKeys(ctx context.Context) ([]bus.SigningKey, error) {
	var keys []bus.SigningKey
	err := s.store.View(ctx, func(tx bus.Tx) error {
		var err error
		keys, err = tx.SigningKeyList()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("auth: read signing keys: %w", err)
	}
	sort.Slice(keys, func(i, j int) bool {
		if !keys[i].CreatedAt.Equal(keys[j].CreatedAt) {
			return keys[i].CreatedAt.After(keys[j].CreatedAt)
		}
		return keys[i].ID > keys[j].ID
	})
	return keys, nil
}

// install makes keys (newest first) the signer's key set.
func (s *Signer) install(keys []bus.SigningKey) error {
	public := make(map[string]*ecdsa.PublicKey, len(keys))
	var order []string
	var newest *ecdsa.PrivateKey
	var newestKid string
	for _, k := range keys {
		if k.Algorithm != AlgES256 {
			s.logger.Warn("ignoring signing key with unsupported algorithm", "kid", k.ID, "alg", k.Algorithm)
			continue
		}
		parsed, err := x509.ParsePKCS8PrivateKey(k.PrivateKey)
		priv, ok := parsed.(*ecdsa.PrivateKey)
		if err != nil || !ok || priv.Curve != elliptic.P256() {
			s.logger.Warn("ignoring unreadable signing key", "kid", k.ID)
			continue
		}
		public[k.ID] = &priv.PublicKey
		order = append(order, k.ID)
		if newest == nil {
			newest, newestKid = priv, k.ID
		}
	}
	if newest == nil {
		return errors.New("auth: no usable ES256 signing key in the store")
	}
	js, err := jose.NewSigner(
		jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: newest, KeyID: newestKid, Algorithm: AlgES256}},
		(&jose.SignerOptions{}).WithType("JWT"),
	)
	if err != nil {
		return fmt.Errorf("auth: signer: %w", err)
	}
	s.mu.Lock()
	s.public, s.order, s.signer, s.signKid = public, order, js, newestKid
	s.mu.Unlock()
	return nil
}

// Reload re-reads the signing keys from the store: new keys become known
// (and the newest signs), removed ones stop verifying. The server may call
// it periodically; Verify calls it by itself, rate-limited, on an unknown kid.
func (s *Signer) Reload(ctx context.Context) error {
	keys, err := s.readKeys(ctx)
	if err != nil {
		return err
	}
	return s.install(keys)
}

// Issue signs a token for c.ClientID, c.Tenant, c.Role and
// c.CredentialVersion; it sets iss, aud, sub, iat (now), exp (now + 1 h) and
// a random jti itself. It returns the token and its lifetime in seconds.
func (s *Signer) Issue(c Claims) (token string, expiresIn int, err error) {
	if c.ClientID == "" || c.Tenant == "" || (c.Role != bus.KindConsumer && c.Role != bus.KindProducer) {
		return "", 0, errors.New("auth: issue needs a client id, a tenant and a role")
	}
	now := s.clock.Now()
	v := c.CredentialVersion
	tc := tokenClaims{
		Claims: jwt.Claims{
			Issuer:   s.issuer,
			Audience: jwt.Audience{s.audience},
			Subject:  c.ClientID,
			IssuedAt: jwt.NewNumericDate(now),
			Expiry:   jwt.NewNumericDate(now.Add(TokenLifetime)),
			ID:       randomToken(16),
		},
		ClientID:          c.ClientID,
		Tenant:            c.Tenant,
		Role:              string(c.Role),
		CredentialVersion: &v,
	}
	s.mu.RLock()
	js := s.signer
	s.mu.RUnlock()
	token, err = jwt.Signed(js).Claims(tc).Serialize()
	if err != nil {
		return "", 0, fmt.Errorf("auth: sign token: %w", err)
	}
	if token, err = lowS(token); err != nil {
		return "", 0, err
	}
	return token, int(TokenLifetime / time.Second), nil
}

// Token refusal messages: what went wrong and what to do, never the token.
//
//nolint:gosec // G101 mistakes these sentences about tokens for credentials
const (
	msgTokenMissing   = "Missing access token: send the header \"Authorization: Bearer <access_token>\" with a token from POST /v1/oauth/token."
	msgTokenMalformed = "Access token is malformed: send the access_token from POST /v1/oauth/token unchanged."
	msgTokenSignature = "Access token is not signed by this server: get a new token from POST /v1/oauth/token."
	msgTokenIssuer    = "Access token was not issued by this server: get a new token from this server's POST /v1/oauth/token."
	msgTokenAudience  = "Access token is for another environment: get a token from this environment's POST /v1/oauth/token."
	msgTokenExpired   = "Access token expired: get a new token from POST /v1/oauth/token (tokens last one hour)."
	msgTokenFuture    = "Access token is not valid yet (issued in the future): check the clocks and get a new token from POST /v1/oauth/token."
	msgTokenLifetime  = "Access token lives longer than the one hour this server issues: get a new token from POST /v1/oauth/token."
)

func unauthenticated(msg string) *bus.Error { return bus.Errorf(bus.RuleUnauthenticated, "%s", msg) }

// Verify checks a token: its form, its algorithm (ES256 only: "none", HMAC
// and others are refused), its signature against the key set (in its one
// canonical form: low s, canonical base64url), iss, aud (this environment),
// exp/iat against the injected clock with TokenLeeway, and exp - iat
// against TokenLifetime.
//
// A token that fails is refused with a *bus.Error of rule
// producer.unauthenticated (401) whose message says what to do. Any other
// error (the store could not be read for an unknown kid) is internal.
// Verify does not look at the connection; Checker does.
func (s *Signer) Verify(token string) (*Claims, error) {
	if token == "" {
		return nil, unauthenticated(msgTokenMissing)
	}
	if len(token) > maxTokenLength || !isTokenText(token) {
		return nil, unauthenticated(msgTokenMalformed)
	}
	// Only ES256 is allowed: ParseSigned refuses any other "alg" header.
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil || len(tok.Headers) != 1 {
		return nil, unauthenticated(msgTokenMalformed)
	}
	kid := tok.Headers[0].KeyID
	pub := s.publicKey(kid)
	if pub == nil && kid != "" {
		// Another node may have made a key this node has not read yet.
		reloaded, err := s.reloadThrottled()
		if err != nil {
			return nil, err
		}
		if reloaded {
			pub = s.publicKey(kid)
		}
	}
	if pub == nil {
		return nil, unauthenticated(msgTokenSignature)
	}
	var tc tokenClaims
	if err := tok.Claims(pub, &tc); err != nil {
		return nil, unauthenticated(msgTokenSignature)
	}
	if !canonicalSignature(token) {
		// ECDSA accepts (r, s) and (r, N-s) alike, and base64url decoding
		// ignores the spare bits of the last character: either would make
		// a second token string out of one signature.
		return nil, unauthenticated(msgTokenSignature)
	}

	// The signature is ours; now the claims.
	if tc.Expiry == nil || tc.IssuedAt == nil || tc.Subject == "" || tc.ClientID != tc.Subject ||
		tc.Tenant == "" || tc.CredentialVersion == nil ||
		(tc.Role != string(bus.KindConsumer) && tc.Role != string(bus.KindProducer)) {
		return nil, unauthenticated(msgTokenMalformed)
	}
	if tc.Issuer != s.issuer {
		return nil, unauthenticated(msgTokenIssuer)
	}
	if !tc.Audience.Contains(s.audience) {
		return nil, unauthenticated(msgTokenAudience)
	}
	if tc.Expiry.Time().Sub(tc.IssuedAt.Time()) > TokenLifetime {
		return nil, unauthenticated(msgTokenLifetime)
	}
	now := s.clock.Now()
	err = tc.Claims.ValidateWithLeeway(jwt.Expected{Time: now}, TokenLeeway)
	switch {
	case errors.Is(err, jwt.ErrExpired):
		return nil, unauthenticated(msgTokenExpired)
	case errors.Is(err, jwt.ErrIssuedInTheFuture), errors.Is(err, jwt.ErrNotValidYet):
		return nil, unauthenticated(msgTokenFuture)
	case err != nil:
		return nil, unauthenticated(msgTokenMalformed)
	}
	return &Claims{
		Issuer:            tc.Issuer,
		Audience:          s.audience,
		ClientID:          tc.ClientID,
		Tenant:            tc.Tenant,
		Role:              bus.ConnectionKind(tc.Role),
		CredentialVersion: *tc.CredentialVersion,
		IssuedAt:          tc.IssuedAt.Time().UTC(),
		ExpiresAt:         tc.Expiry.Time().UTC(),
		ID:                tc.ID,
	}, nil
}

// isTokenText reports whether token holds only what a compact JWS is
// made of: base64url characters and dots. The base64 decoders skip "\r"
// and "\n", which would let a line break inside a token (a signature's,
// where it is not signed) make a second text of one token.
func isTokenText(token string) bool {
	for _, part := range strings.Split(token, ".") {
		if !isBase64URL(part) {
			return false
		}
	}
	return true
}

// es256Size is the size of an ES256 signature: r and s, 32 bytes each.
const es256Size = 64

// halfOrder is N/2 for P-256: a signature's s above it is the high form.
var halfOrder = new(big.Int).Rsh(elliptic.P256().Params().N, 1)

// canonicalSignature reports whether the signature of the compact JWS
// token is the one form Issue produces: strict base64url of 64 bytes whose
// s is at most N/2.
func canonicalSignature(token string) bool {
	i := strings.LastIndexByte(token, '.')
	if i < 0 {
		return false
	}
	sig, err := base64.RawURLEncoding.Strict().DecodeString(token[i+1:])
	if err != nil || len(sig) != es256Size {
		return false
	}
	return new(big.Int).SetBytes(sig[es256Size/2:]).Cmp(halfOrder) <= 0
}

// lowS rewrites the signature of a compact ES256 token into its low-s
// form (s = N - s when s > N/2), which verifies just the same.
func lowS(token string) (string, error) {
	i := strings.LastIndexByte(token, '.')
	if i < 0 {
		return "", errors.New("auth: signed token has no signature part")
	}
	sig, err := base64.RawURLEncoding.DecodeString(token[i+1:])
	if err != nil || len(sig) != es256Size {
		return "", errors.New("auth: signed token has no ES256 signature")
	}
	sv := new(big.Int).SetBytes(sig[es256Size/2:])
	if sv.Cmp(halfOrder) > 0 {
		sv.Sub(elliptic.P256().Params().N, sv)
		sv.FillBytes(sig[es256Size/2:])
	}
	return token[:i+1] + base64.RawURLEncoding.EncodeToString(sig), nil
}

func (s *Signer) publicKey(kid string) *ecdsa.PublicKey {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.public[kid]
}

// reloadThrottled re-reads the keys unless that was done less than
// keyReloadInterval ago (by the injected clock); it reports whether it did.
func (s *Signer) reloadThrottled() (bool, error) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	now := s.clock.Now()
	if !s.lastReload.IsZero() && now.Sub(s.lastReload) < keyReloadInterval && !now.Before(s.lastReload) {
		return false, nil
	}
	s.lastReload = now
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Reload(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// JWKS returns the public keys as a JSON Web Key Set (RFC 7517), newest
// first, each with kid, alg ES256 and use "sig": the body of GET /v1/oauth/jwks.
func (s *Signer) JWKS() ([]byte, error) {
	s.mu.RLock()
	set := jose.JSONWebKeySet{Keys: make([]jose.JSONWebKey, 0, len(s.order))}
	for _, kid := range s.order {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: s.public[kid], KeyID: kid, Algorithm: AlgES256, Use: "sig"})
	}
	s.mu.RUnlock()
	return json.Marshal(set)
}

// randomToken returns n random bytes as unpadded base64url text.
func randomToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("auth: crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
