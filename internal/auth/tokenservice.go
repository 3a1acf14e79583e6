package auth

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// OAuth 2.0 error codes of the token endpoint (RFC 6749 §5.2, plus
// slow_down for the failure limit and temporarily_unavailable when the store
// cannot be read).
const (
	OAuthInvalidRequest         = "invalid_request"
	OAuthInvalidClient          = "invalid_client"
	OAuthUnsupportedGrantType   = "unsupported_grant_type"
	OAuthSlowDown               = "slow_down"
	OAuthTemporarilyUnavailable = "temporarily_unavailable"
)

// TokenResponse is the body of a successful token request (RFC 6749 §5.1).
type TokenResponse struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int    `json:"expires_in"`
}

// OAuthError is a refused token request: the HTTP status, the RFC 6749 error
// code for the body {"error": Code}, and for 429/503 the Retry-After wait.
// Err is the internal cause of a 503, for the log only; it never holds a
// secret.
type OAuthError struct {
	Status     int
	Code       string
	RetryAfter time.Duration
	Err        error
}

func (e *OAuthError) Error() string {
	if e.Err != nil {
		return e.Code + ": " + e.Err.Error()
	}
	return e.Code
}

// TokenService is the logic of POST /v1/oauth/token without the HTTP: the
// HTTP layer parses the form or Basic credentials, calls Exchange and
// writes the answer. Safe for concurrent use.
type TokenService struct {
	store    bus.Store
	signer   *Signer
	clock    bus.Clock
	failures FailureLimiter
	// attempts serializes, on this node, the attempts for one client id
	// (by a hash, in stripes) from the check of the failure limits to the
	// count of a failure: attempts sent all at once must not all pass the
	// check before any of them is counted.
	attempts [64]sync.Mutex
	seed     maphash.Seed
}

// NewTokenService returns a token service that reads connections from store,
// signs with signer and limits failed authentications with failures
// (NewMemoryFailureLimiter for one node).
func NewTokenService(store bus.Store, signer *Signer, clock bus.Clock, failures FailureLimiter) *TokenService {
	return &TokenService{store: store, signer: signer, clock: clock, failures: failures, seed: maphash.MakeSeed()}
}

// dummyHash is compared against when the client is unknown, so that an
// unknown client id costs the same work as a wrong secret.
var dummyHash = HashSecret("sbs_unknown-client")

// Exchange swaps a client id and secret for an access token. The secret must
// be the connection's current one or, while now < PreviousSecretExpiresAt,
// the previous one; the connection must be active and its secret state
// active. The token carries the connection's current credential_version.
//
// Every authentication failure is the same 401 invalid_client, whichever
// part was wrong, and counts against the client id and the remote address;
// past the limits every attempt, even a correct one, gets 429 slow_down with
// RetryAfter until the window has passed.
func (s *TokenService) Exchange(ctx context.Context, clientID, clientSecret, remoteAddr string) (*TokenResponse, *OAuthError) {
	// A client id no connection can have (not UTF-8, with NUL or another
	// control character, or longer than any id) is an unknown client: it is
	// not looked up, and the limiter counts its failures under a key of
	// bounded size that is no connection's id (LimiterKey).
	lookup := bus.PlainText(clientID) && len(clientID) <= bus.MaxIDLength
	mu := &s.attempts[maphash.String(s.seed, clientID)%uint64(len(s.attempts))]
	mu.Lock()
	defer mu.Unlock()
	wait, err := s.failures.Blocked(ctx, clientID, remoteAddr)
	if err != nil {
		return nil, unavailable(ctx, err)
	}
	if wait > 0 {
		return nil, &OAuthError{Status: 429, Code: OAuthSlowDown, RetryAfter: wait}
	}

	var conn bus.Connection
	found := false
	if lookup {
		conn, found, err = s.connection(ctx, clientID)
		if err != nil {
			return nil, unavailable(ctx, err)
		}
	}
	if !s.accepts(conn, found, clientSecret) {
		if err := s.failures.Failed(ctx, clientID, remoteAddr); err != nil {
			return nil, unavailable(ctx, err)
		}
		return nil, &OAuthError{Status: 401, Code: OAuthInvalidClient}
	}

	token, expiresIn, err := s.signer.Issue(Claims{
		ClientID:          conn.ID,
		Tenant:            conn.WorkspaceID,
		Role:              conn.Kind,
		CredentialVersion: conn.CredentialVersion,
	})
	if err != nil {
		return nil, &OAuthError{Status: 500, Code: "server_error", Err: err}
	}
	return &TokenResponse{AccessToken: token, TokenType: "Bearer", ExpiresIn: expiresIn}, nil
}

// connection reads the connection clientID; found is false when there is none.
func (s *TokenService) connection(ctx context.Context, clientID string) (conn bus.Connection, found bool, err error) {
	if clientID == "" {
		return bus.Connection{}, false, nil
	}
	err = s.store.View(ctx, func(tx bus.Tx) error {
		var err error
		conn, err = tx.ConnectionGet(clientID)
		return err
	})
	if errors.Is(err, bus.ErrNotFound) {
		return bus.Connection{}, false, nil
	}
	return conn, err == nil, err
}

// accepts reports whether secret opens conn now.
func (s *TokenService) accepts(conn bus.Connection, found bool, secret string) bool {
	if !found {
		SecretMatches(secret, dummyHash) // same work as a real check
		return false
	}
	// Both secrets are always compared (no early exit), so the time taken
	// does not tell which one a guess was compared with.
	current := SecretMatches(secret, conn.SecretHash)
	previous := SecretMatches(secret, conn.PreviousSecretHash) &&
		conn.PreviousSecretExpiresAt != nil && s.clock.Now().Before(*conn.PreviousSecretExpiresAt)
	return conn.Status == bus.StatusActive && conn.SecretState == bus.SecretActive &&
		secret != "" && (current || previous)
}

// unavailable answers a store error: 503 temporarily_unavailable when the
// store cannot be reached (bus.ErrUnavailable) or did not answer within the
// request's time (its context ended at the node's deadline, bus.TimedOut),
// else 500 server_error.
func unavailable(ctx context.Context, err error) *OAuthError {
	if !errors.Is(err, bus.ErrUnavailable) && !bus.TimedOut(ctx) {
		return &OAuthError{Status: 500, Code: "server_error", Err: err}
	}
	return &OAuthError{Status: 503, Code: OAuthTemporarilyUnavailable, RetryAfter: time.Second, Err: err}
}
