package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// TokenEarlyRefresh is how long before its expiry an access token is
// replaced: a request never leaves with a token about to run out.
const TokenEarlyRefresh = 2 * time.Minute

// Config is what a producer or consumer needs to reach the bus.
type Config struct {
	// BaseURL is the bus's address, such as "https://bus.example.com"
	// (a trailing "/v1" is accepted too).
	BaseURL string
	// ClientID and ClientSecret are the connection's credentials ("Get
	// client secret" in the portal, `sombus secret get` on the command
	// line). The client id is also the consumer's {c} in the pull URLs.
	ClientID     string
	ClientSecret string
	// WorkspaceID is the workspace ({t}) of the connection. When empty it
	// is read from the access token's tenant claim.
	WorkspaceID string
	// HTTPClient sends every request (the token requests too); nil is a
	// client with sensible transport timeouts. Its Timeout, if any, must
	// exceed a long poll's wait (20 s).
	HTTPClient *http.Client
	// MaxRetries is how often a call is retried after a 429 answer, or
	// after a 503 answer or a lost answer of a call that is safe to repeat
	// (publishing, receiving, ack and nack, reads and puts; not the
	// management POSTs and DELETEs, such as a secret's rotation), after
	// Retry-After (with jitter, up to MaxRetryAfter) or a backoff. 0 is
	// DefaultMaxRetries; negative: never.
	MaxRetries int
	// RequestTimeout bounds one attempt of a call (a receive's wait comes
	// on top); 0 is DefaultRequestTimeout.
	RequestTimeout time.Duration
	// UserAgent is sent with every request; "" is "sombus-go".
	UserAgent string
}

// Client speaks to the bus as one connection (a producer or a consumer).
// It gets access tokens with the client-credentials grant, reuses each for
// its hour, refreshes it before it expires, and after a 401 on a workspace
// route fetches a new one once and retries. A Client is safe for concurrent
// use. Producer and Consumer wrap one.
type Client struct {
	cfg Config
	t   *transport

	mu        sync.Mutex
	tokens    oauth2.TokenSource // the reusing source in use
	newSource func() oauth2.TokenSource
	workspace string
}

// defaultHTTPClient has transport-level timeouts but no overall timeout:
// long polls last up to 20 s and each call sets its own deadline.
func defaultHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	tr.ResponseHeaderTimeout = 0
	return &http.Client{Transport: tr}
}

// New returns a Client for the connection of cfg. It makes no request:
// the first call gets the first token.
func New(cfg Config) (*Client, error) {
	base, err := normalizeBase(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	if cfg.ClientID == "" || cfg.ClientSecret == "" {
		return nil, errors.New("sombus: ClientID and ClientSecret are required")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = defaultHTTPClient()
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "sombus-go"
	}
	c := &Client{cfg: cfg, workspace: cfg.WorkspaceID}
	cc := &clientcredentials.Config{
		ClientID:     cfg.ClientID,
		ClientSecret: cfg.ClientSecret,
		TokenURL:     base + "/v1/oauth/token",
		// HTTP Basic, as the token service documents; no probing.
		AuthStyle: oauth2.AuthStyleInHeader,
	}
	fetch := tokenFetcher{cc: cc, http: cfg.HTTPClient, timeout: cfg.RequestTimeout}
	c.newSource = func() oauth2.TokenSource {
		// Reuse each token until TokenEarlyRefresh before it expires.
		return oauth2.ReuseTokenSourceWithExpiry(nil, fetch, TokenEarlyRefresh)
	}
	c.tokens = c.newSource()
	c.t = &transport{
		base: base, http: cfg.HTTPClient, maxRetries: cfg.MaxRetries, timeout: cfg.RequestTimeout,
		userAgent: cfg.UserAgent, bearer: c.bearer, refresh: c.dropToken,
	}
	return c, nil
}

// ClientID is the connection's id.
func (c *Client) ClientID() string { return c.cfg.ClientID }

// bearer returns the current access token, fetching one when needed.
func (c *Client) bearer(ctx context.Context) (string, error) {
	c.mu.Lock()
	src := c.tokens
	c.mu.Unlock()
	type result struct {
		tok *oauth2.Token
		err error
	}
	// oauth2.TokenSource takes no context: run it aside so the caller's
	// deadline still applies.
	ch := make(chan result, 1)
	go func() {
		tok, err := src.Token()
		ch <- result{tok, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		return "", fmt.Errorf("sombus: get access token: %w", ctx.Err())
	}
	if r.err != nil {
		return "", tokenError(r.err)
	}
	return r.tok.AccessToken, nil
}

// dropToken forgets bad (the token the bus refused), so that the next
// request fetches a new one. It reports whether a retry is worthwhile.
func (c *Client) dropToken(bad string) bool {
	if bad == "" {
		return false
	}
	c.mu.Lock()
	src := c.tokens
	c.mu.Unlock()
	// Only replace the source if it still holds the refused token; another
	// goroutine may have replaced it already. A valid cached token is
	// returned without a request.
	tok, err := src.Token()
	if err != nil || tok.AccessToken == bad {
		c.mu.Lock()
		if c.tokens == src {
			c.tokens = c.newSource()
		}
		c.mu.Unlock()
	}
	return true
}

// tokenFetcher gets a new token with every call; a reusing source wraps it.
type tokenFetcher struct {
	cc      *clientcredentials.Config
	http    *http.Client
	timeout time.Duration
}

func (f tokenFetcher) Token() (*oauth2.Token, error) {
	timeout := f.timeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), oauth2.HTTPClient, f.http), timeout)
	defer cancel()
	return f.cc.Token(ctx)
}

// tokenError turns a refusal of the token service into an *Error with the
// RFC 6749 error code as its rule (invalid_client, slow_down …).
func tokenError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil {
		e := parseRefusal(http.MethodPost, "/v1/oauth/token", re.Response.StatusCode, re.Response.Header, re.Body)
		if re.ErrorCode != "" {
			e.Violations = []Violation{{Rule: re.ErrorCode, Message: re.ErrorDescription}}
		}
		e.Err = err
		return e
	}
	return fmt.Errorf("sombus: get access token: %w", err)
}

// Workspace returns the connection's workspace id: Config.WorkspaceID, or
// else the tenant claim of its access token (which may fetch one).
func (c *Client) Workspace(ctx context.Context) (string, error) {
	c.mu.Lock()
	ws := c.workspace
	c.mu.Unlock()
	if ws != "" {
		return ws, nil
	}
	tok, err := c.bearer(ctx)
	if err != nil {
		return "", err
	}
	ws, err = tenantOf(tok)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	c.workspace = ws
	c.mu.Unlock()
	return ws, nil
}

// tenantOf reads the tenant claim of a JWT without checking its signature
// (the bus checks it; the SDK only needs the workspace id).
func tenantOf(jwt string) (string, error) {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return "", errors.New("sombus: the access token is not a JWT; set Config.WorkspaceID")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", errors.New("sombus: cannot read the access token's claims; set Config.WorkspaceID")
	}
	var claims struct {
		Tenant string `json:"tenant"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil || claims.Tenant == "" {
		return "", errors.New("sombus: the access token has no tenant claim; set Config.WorkspaceID")
	}
	return claims.Tenant, nil
}

// tenantPath is /v1/tenants/{t} + rest.
func (c *Client) tenantPath(ctx context.Context, rest string) (string, error) {
	ws, err := c.Workspace(ctx)
	if err != nil {
		return "", err
	}
	return "/v1/tenants/" + pathEscape(ws) + rest, nil
}
