package httpapi_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sombus/sombus/internal/bus"
)

// TestTokenEndpoint: Basic and form authentication and every refusal of
// RFC 6749 §5.2 the endpoint gives.
func TestTokenEndpoint(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "tokens")
	c := n.connection(t, ws, "consumer", nil)
	s := n.issue(t, ws, c.ID)
	grant := url.Values{"grant_type": {"client_credentials"}}

	okAnswer := func(name string, status int, header http.Header, body []byte) {
		t.Helper()
		if status != 200 {
			t.Fatalf("%s: %d %s", name, status, body)
		}
		var tr map[string]any
		if err := json.Unmarshal(body, &tr); err != nil {
			t.Fatal(err)
		}
		if tr["token_type"] != "Bearer" || tr["expires_in"] != 3600.0 || tr["access_token"] == "" || len(tr) != 3 {
			t.Errorf("%s: token answer %v", name, tr)
		}
		if header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: Cache-Control %q", name, header.Get("Cache-Control"))
		}
		n.pull(t, ws, c.ID, tr["access_token"].(string)).Must(t, 200)
	}

	r := n.tokenForm(t, grant, c.ID, s.ClientSecret)
	okAnswer("basic", r.Status, r.Header, r.Body)
	r = n.tokenForm(t, url.Values{"grant_type": {"client_credentials"}, "client_id": {c.ID}, "client_secret": {s.ClientSecret}}, "", "")
	okAnswer("form", r.Status, r.Header, r.Body)
	// Unrecognized parameters are ignored (RFC 6749 §3.1); a charset is fine.
	req, _ := http.NewRequest("POST", n.URL+"/v1/oauth/token", strings.NewReader("grant_type=client_credentials&scope=x"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	req.SetBasicAuth(c.ID, s.ClientSecret)
	r = n.send(t, req)
	okAnswer("charset and scope", r.Status, r.Header, r.Body)

	// Both ways at once.
	wantOAuthError(t, n.tokenForm(t, url.Values{"grant_type": {"client_credentials"}, "client_id": {c.ID}, "client_secret": {s.ClientSecret}}, c.ID, s.ClientSecret), 400, "invalid_request")
	wantOAuthError(t, n.tokenForm(t, url.Values{"grant_type": {"client_credentials"}, "client_secret": {s.ClientSecret}}, c.ID, s.ClientSecret), 400, "invalid_request")
	// An Authorization header that is not one HTTP Basic header is a
	// failed client authentication, not ignored for the form's fields.
	formCreds := []byte(url.Values{"grant_type": {"client_credentials"}, "client_id": {c.ID}, "client_secret": {s.ClientSecret}}.Encode())
	for _, auth := range []string{"Basic eA==", "Bearer xyz", "Basic", "basic !!", "Digest username=x"} {
		r := n.raw(t, "POST", "/v1/oauth/token", formCreds, map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Authorization": auth})
		wantOAuthError(t, r, 401, "invalid_client")
	}
	// An empty header carries nothing: the form's credentials are used.
	r = n.raw(t, "POST", "/v1/oauth/token", formCreds, map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Authorization": " "})
	okAnswer("form with an empty Authorization header", r.Status, r.Header, r.Body)
	req, _ = http.NewRequest("POST", n.URL+"/v1/oauth/token", strings.NewReader("grant_type=client_credentials"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(c.ID, s.ClientSecret)
	req.Header.Add("Authorization", "Bearer xyz")
	wantOAuthError(t, n.send(t, req), 401, "invalid_client")
	// Grant types.
	wantOAuthError(t, n.tokenForm(t, url.Values{}, c.ID, s.ClientSecret), 400, "invalid_request")
	wantOAuthError(t, n.tokenForm(t, url.Values{"grant_type": {"password"}}, c.ID, s.ClientSecret), 400, "unsupported_grant_type")
	wantOAuthError(t, n.tokenForm(t, url.Values{"grant_type": {"client_credentials", "client_credentials"}}, c.ID, s.ClientSecret), 400, "invalid_request")
	// Content types.
	for _, ct := range []string{"", "application/json", "text/plain", "multipart/form-data; boundary=x"} {
		h := map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(c.ID+":"+s.ClientSecret))}
		if ct != "" {
			h["Content-Type"] = ct
		}
		r := n.raw(t, "POST", "/v1/oauth/token", []byte("grant_type=client_credentials"), h)
		wantOAuthError(t, r, 400, "invalid_request")
		var b map[string]string
		r.Decode(t, &b)
		if !strings.Contains(b["error_description"], "Content-Type") {
			t.Errorf("content type %q: description %q", ct, b["error_description"])
		}
	}
	wantOAuthError(t, n.raw(t, "POST", "/v1/oauth/token", []byte(`{"grant_type":"client_credentials"}`), map[string]string{"Content-Type": "application/json"}), 400, "invalid_request")
	// Over 64 KiB.
	big := "grant_type=client_credentials&pad=" + strings.Repeat("x", 64<<10)
	wantOAuthError(t, n.raw(t, "POST", "/v1/oauth/token", []byte(big), map[string]string{"Content-Type": "application/x-www-form-urlencoded"}), 413, "invalid_request")

	// Authentication failures: all the same 401.
	for name, creds := range map[string][2]string{
		"wrong secret":   {c.ID, s.ClientSecret + "x"},
		"empty secret":   {c.ID, ""},
		"unknown client": {"c" + strings.Repeat("a", 26), s.ClientSecret},
		"other form":     {strings.ToUpper(c.ID), s.ClientSecret},
	} {
		r := n.tokenForm(t, grant, creds[0], creds[1])
		wantOAuthError(t, r, 401, "invalid_client")
		if strings.Contains(string(r.Body), s.ClientSecret) {
			t.Errorf("%s: the answer holds the secret", name)
		}
	}
	wantOAuthError(t, n.tokenForm(t, grant, "", ""), 401, "invalid_client")
	wantOAuthError(t, n.tokenForm(t, url.Values{"grant_type": {"client_credentials"}, "client_id": {c.ID}}, "", ""), 401, "invalid_client")
	wantOAuthError(t, n.tokenForm(t, url.Values{"grant_type": {"client_credentials"}, "client_secret": {s.ClientSecret}}, "", ""), 401, "invalid_client")
	// A connection without a secret.
	none := n.connection(t, ws, "producer", nil)
	wantOAuthError(t, n.tokenForm(t, grant, none.ID, ""), 401, "invalid_client")

	// A wrong method is the usual 405 refusal.
	r = n.do(t, "GET", "/v1/oauth/token", "", nil)
	wantRefusal(t, r, 405, "route.method_not_allowed")
	if !strings.Contains(r.Header.Get("Allow"), "POST") {
		t.Errorf("Allow: %q", r.Header.Get("Allow"))
	}
}

// TestTokenFailureLimits: 20 failures a minute per client id, 100 per
// address; then 429 slow_down with Retry-After, even for the right secret,
// until the minute has passed.
func TestTokenFailureLimits(t *testing.T) {
	t.Parallel()
	t.Run("per client", func(t *testing.T) {
		t.Parallel()
		n := start(t)
		ws := n.workspace(t, opKey, "limits")
		c := n.connection(t, ws, "consumer", nil)
		s := n.issue(t, ws, c.ID)
		other := n.connection(t, ws, "consumer", nil)
		otherSecret := n.issue(t, ws, other.ID)
		for i := range 20 {
			wantOAuthError(t, n.tokenResp(t, c.ID, fmt.Sprintf("wrong-%d", i)), 401, "invalid_client")
			n.advance(time.Second)
		}
		r := n.tokenResp(t, c.ID, s.ClientSecret)
		wantOAuthError(t, r, 429, "slow_down")
		if r.Header.Get("Retry-After") != "40" { // the window opened 20 s ago
			t.Errorf("Retry-After %q, want 40", r.Header.Get("Retry-After"))
		}
		// Other clients from the same address go on.
		n.token(t, other.ID, otherSecret.ClientSecret)
		n.advance(39 * time.Second)
		r = n.tokenResp(t, c.ID, s.ClientSecret)
		wantOAuthError(t, r, 429, "slow_down")
		if r.Header.Get("Retry-After") != "1" {
			t.Errorf("Retry-After %q, want 1", r.Header.Get("Retry-After"))
		}
		n.advance(time.Second)
		n.token(t, c.ID, s.ClientSecret)
	})
	t.Run("per address", func(t *testing.T) {
		t.Parallel()
		n := start(t)
		ws := n.workspace(t, opKey, "limits")
		c := n.connection(t, ws, "consumer", nil)
		s := n.issue(t, ws, c.ID)
		for i := range 100 {
			// Unknown client ids, each failing fewer than 20 times.
			wantOAuthError(t, n.tokenResp(t, fmt.Sprintf("c%026d", i/10), "wrong"), 401, "invalid_client")
		}
		r := n.tokenResp(t, c.ID, s.ClientSecret)
		wantOAuthError(t, r, 429, "slow_down")
		if r.Header.Get("Retry-After") != "60" {
			t.Errorf("Retry-After %q, want 60", r.Header.Get("Retry-After"))
		}
		wantOAuthError(t, n.tokenForm(t, url.Values{"grant_type": {"client_credentials"}, "client_id": {c.ID}, "client_secret": {s.ClientSecret}}, "", ""), 429, "slow_down")
		n.advance(time.Minute)
		n.token(t, c.ID, s.ClientSecret)
	})
}

// TestJWKSVerifiesToken: the key set verifies a token, whose claims are
// the HTTP contract's.
func TestJWKSVerifiesToken(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "jwks")
	c := n.connection(t, ws, "producer", nil)
	s := n.issue(t, ws, c.ID)
	tok := n.token(t, c.ID, s.ClientSecret)

	r := n.do(t, "GET", "/v1/oauth/jwks", "", nil).Must(t, 200)
	var set jose.JSONWebKeySet
	r.Decode(t, &set)
	if len(set.Keys) == 0 {
		t.Fatalf("empty key set: %s", r.Body)
	}
	for _, k := range set.Keys {
		if !k.IsPublic() || k.Algorithm != "ES256" || k.Use != "sig" || k.KeyID == "" {
			t.Errorf("key %+v", k)
		}
	}
	if strings.Contains(string(r.Body), `"d"`) {
		t.Fatal("the key set holds a private key")
	}
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	var std jwt.Claims
	var own struct {
		ClientID          string `json:"client_id"`
		Tenant            string `json:"tenant"`
		Role              string `json:"role"`
		CredentialVersion *int64 `json:"credential_version"`
	}
	if err := parsed.Claims(set, &std, &own); err != nil {
		t.Fatalf("the key set does not verify the token: %v", err)
	}
	if err := std.ValidateWithLeeway(jwt.Expected{Issuer: n.URL, AnyAudience: jwt.Audience{"sandbox"}, Subject: c.ID, Time: t0}, 0); err != nil {
		t.Errorf("registered claims: %v (%+v)", err, std)
	}
	if own.ClientID != c.ID || own.Tenant != ws || own.Role != "producer" || own.CredentialVersion == nil || *own.CredentialVersion != 1 {
		t.Errorf("claims %+v", own)
	}
	if !std.IssuedAt.Time().Equal(t0.Truncate(time.Second)) || std.Expiry.Time().Sub(std.IssuedAt.Time()) != time.Hour || std.ID == "" {
		t.Errorf("iat/exp/jti %+v", std)
	}
	if claims(t, n.token(t, c.ID, s.ClientSecret))["jti"] == std.ID {
		t.Error("two tokens share a jti")
	}
	if parsed.Headers[0].KeyID != set.Keys[0].KeyID {
		t.Errorf("signed with kid %q, newest key %q", parsed.Headers[0].KeyID, set.Keys[0].KeyID)
	}
}

// TestForgedTokens: tokens that are not this server's, for this environment,
// now, are 401 producer.unauthenticated.
func TestForgedTokens(t *testing.T) {
	t.Parallel()
	n := start(t)
	ws := n.workspace(t, opKey, "forged")
	c := n.connection(t, ws, "consumer", nil)
	s := n.issue(t, ws, c.ID)
	good := n.token(t, c.ID, s.ClientSecret)

	// The server's own signing key, read from its store.
	var keys []bus.SigningKey
	if err := n.Server.Store().View(ctx(t), func(tx bus.Tx) error {
		var err error
		keys, err = tx.SigningKeyList()
		return err
	}); err != nil || len(keys) == 0 {
		t.Fatalf("signing keys: %v", err)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(keys[0].PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	own := parsed.(*ecdsa.PrivateKey)
	stranger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	sign := func(key any, kid string, alg jose.SignatureAlgorithm, mut func(m map[string]any)) string {
		m := map[string]any{"iss": n.URL, "aud": "sandbox", "sub": c.ID, "client_id": c.ID, "tenant": ws, "role": "consumer",
			"credential_version": 1, "iat": t0.Unix(), "exp": t0.Add(time.Hour).Unix(), "jti": "x"}
		if mut != nil {
			mut(m)
		}
		sg, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, (&jose.SignerOptions{}).WithType("JWT"))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := jwt.Signed(sg).Claims(m).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		if alg == jose.ES256 {
			tok = lowS(t, tok) // the server accepts only the low-s form
		}
		return tok
	}
	// A well-formed forgery with the real key is accepted: the forgeries
	// below fail for their one difference.
	n.pull(t, ws, c.ID, sign(own, keys[0].ID, jose.ES256, nil)).Must(t, 200)
	parts := strings.Split(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), `"role":"consumer"`, `"role":"producer"`, 1))) + "." + parts[2]
	unsigned := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."

	for _, tc := range []struct {
		name, token, words string
	}{
		{"missing", "", "Missing"},
		{"garbage", "not-a-token", "malformed"},
		{"tampered", tampered, "signed"},
		{"alg none", unsigned, "malformed"},
		{"HS256", sign([]byte(strings.Repeat("k", 32)), keys[0].ID, jose.HS256, nil), "malformed"},
		{"another key", sign(stranger, keys[0].ID, jose.ES256, nil), "signed"},
		{"unknown kid", sign(stranger, "nokid", jose.ES256, nil), "signed"},
		{"another environment", sign(own, keys[0].ID, jose.ES256, func(m map[string]any) { m["aud"] = "production" }), "environment"},
		{"another issuer", sign(own, keys[0].ID, jose.ES256, func(m map[string]any) { m["iss"] = "https://evil.example" }), "issued"},
		{"expired", sign(own, keys[0].ID, jose.ES256, func(m map[string]any) {
			m["iat"], m["exp"] = t0.Add(-2*time.Hour).Unix(), t0.Add(-time.Hour).Unix()
		}), "expired"},
		{"future", sign(own, keys[0].ID, jose.ES256, func(m map[string]any) { m["iat"] = t0.Add(time.Minute).Unix() }), "future"},
		{"no credential_version", sign(own, keys[0].ID, jose.ES256, func(m map[string]any) { delete(m, "credential_version") }), "malformed"},
		{"old credential_version", sign(own, keys[0].ID, jose.ES256, func(m map[string]any) { m["credential_version"] = 0 }), "rotated"},
	} {
		msg := wantRefusal(t, n.pull(t, ws, c.ID, tc.token), 401, "producer.unauthenticated")
		if !strings.Contains(msg, tc.words) {
			t.Errorf("%s: message %q does not say %q", tc.name, msg, tc.words)
		}
		if tc.token != "" && strings.Contains(msg, tc.token) {
			t.Errorf("%s: the message repeats the token", tc.name)
		}
	}
	// Other schemes than Bearer are a missing token.
	r := n.raw(t, "GET", pullPath(ws, c.ID), nil, map[string]string{"Authorization": "Basic " + good})
	wantRefusal(t, r, 401, "producer.unauthenticated")
	n.raw(t, "GET", pullPath(ws, c.ID), nil, map[string]string{"Authorization": "bearer " + good}).Must(t, 200)
}

// lowS rewrites an ES256 token's signature (r, s) into its low-s form
// (r, N-s when s > N/2), the one form the server accepts.
func lowS(t *testing.T, tok string) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		t.Fatalf("ES256 signature: %v", err)
	}
	n := elliptic.P256().Params().N
	if v := new(big.Int).SetBytes(sig[32:]); v.Cmp(new(big.Int).Rsh(n, 1)) > 0 {
		v.Sub(n, v).FillBytes(sig[32:])
	}
	return parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(sig)
}
