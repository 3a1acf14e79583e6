package auth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// DefaultCheckTTL is how long the Checker trusts what it read about a
// connection. With 10 s, a change made on another node (a revoke, a
// rotation) reaches this node's checks well within the 30 seconds the contract allows;
// a state past it may still answer checks while its workspace is read
// again, up to staleCheckLimit after it was read.
const DefaultCheckTTL = 10 * time.Second

// maxCachedConnections bounds the Checker's cache.
const maxCachedConnections = 100_000

// staleCheckLimit is how long after it was read a connection's state may
// still answer a check while its workspace's states are read again (see
// state): within the 30 seconds the contract allows a change to take, with
// room for the read itself.
const staleCheckLimit = 25 * time.Second

// connState is what a check needs to know about a connection.
type connState struct {
	exists            bool
	kind              bus.ConnectionKind
	workspaceID       string
	status            bus.ConnectionStatus
	credentialVersion int64
	quotaTier         string
}

type cacheEntry struct {
	state     connState
	fetchedAt time.Time // by the injected clock
}

// Checker checks the bearer token of a workspace route (publish, pull)
// against the connection it names. Safe for concurrent use.
type Checker struct {
	store  bus.Store
	signer *Signer
	clock  bus.Clock
	ttl    time.Duration

	verified verifiedCache // tokens whose signature was checked

	mu    sync.Mutex
	cache map[string]cacheEntry // by connection id
	// gen counts Invalidate calls: a store read that started before one
	// may have seen the state before the change, so it is not cached.
	gen uint64
	// refreshing holds the workspaces whose cached states a check is
	// reading again (refreshWorkspace).
	refreshing map[string]struct{}
}

// NewChecker returns a checker that verifies tokens with signer and reads
// connections from store, trusting what it read for ttl (DefaultCheckTTL in
// the server; 0 reads the store on every check).
func NewChecker(store bus.Store, signer *Signer, clock bus.Clock, ttl time.Duration) *Checker {
	return &Checker{store: store, signer: signer, clock: clock, ttl: ttl, cache: make(map[string]cacheEntry), refreshing: make(map[string]struct{})}
}

// Check verifies token for a route that needs role, in workspace tenant
// (the {t} of the URL) and, on consumer routes, for connection clientID (the
// {c} of the URL; "" on producer routes). It returns the token's claims, or a
// *bus.Error refusal; the first failing rule of this order wins:
//
//  1. 401 producer.unauthenticated: the token is missing, malformed, badly
//     signed, expired or for another environment, or its credential_version
//     is below the connection's current one (the secret was rotated or revoked).
//  2. 403 producer.not_registered: the connection was removed or is revoked,
//     or the token's role is not role (a producer's token on a pull route).
//  3. 403 tenant.mismatch: the token's tenant is not tenant.
//  4. 403 consumer.not_owner: clientID is not "" and not the token's client_id.
//
// Other errors (the store could not be read) are internal, not refusals.
func (c *Checker) Check(ctx context.Context, token string, role bus.ConnectionKind, tenant, clientID string) (*Claims, error) {
	claims, ok := c.verified.get(token, c.clock.Now())
	if !ok {
		var err error
		if claims, err = c.signer.Verify(token); err != nil {
			return nil, err
		}
		c.verified.put(token, claims, c.clock.Now())
	}
	// The cached claims are shared: work on a copy.
	cp := *claims
	claims = &cp
	st, err := c.state(ctx, claims.ClientID)
	if err != nil {
		return nil, err
	}
	if st.exists && claims.CredentialVersion < st.credentialVersion {
		return nil, bus.Errorf(bus.RuleUnauthenticated,
			"Access token was issued before the client secret of connection %s was rotated or revoked: get a new token from POST /v1/oauth/token with the current secret.",
			claims.ClientID)
	}
	switch {
	case !st.exists:
		return nil, bus.Errorf(bus.RuleNotRegistered,
			"Connection %s no longer exists (it was removed): use the credentials of an existing %s connection.",
			claims.ClientID, role)
	case st.status != bus.StatusActive:
		return nil, bus.Errorf(bus.RuleNotRegistered,
			"Connection %s is revoked: a workspace admin can restore it (POST /v1/manage/workspaces/%s/connections/%s/restore), then this token works again until it expires.",
			claims.ClientID, claims.Tenant, claims.ClientID)
	case claims.Role != role || st.kind != role:
		return nil, bus.Errorf(bus.RuleNotRegistered,
			"This route needs a %s connection's token, but the token belongs to %s connection %s: use your %s connection's client id and secret.",
			role, claims.Role, claims.ClientID, role)
	}
	if claims.Tenant != tenant || st.workspaceID != tenant {
		return nil, bus.Errorf(bus.RuleTenantMismatch,
			"Workspace %q in the URL is not the workspace of this token: use the tenant claim of your token (%s).",
			tenant, claims.Tenant)
	}
	if clientID != "" && clientID != claims.ClientID {
		return nil, bus.Errorf(bus.RuleNotOwner,
			"Client id %q in the URL is not the connection of this token: use your client id (%s).",
			clientID, claims.ClientID)
	}
	return claims, nil
}

// QuotaTier returns the quota tier of a connection from the same cached
// state as Check (a tier change on this node is seen at once through
// Invalidate, on other nodes within the ttl). "" when it does not exist.
func (c *Checker) QuotaTier(ctx context.Context, connectionID string) (string, error) {
	st, err := c.state(ctx, connectionID)
	if err != nil {
		return "", err
	}
	return st.quotaTier, nil
}

// Invalidate forgets what the checker knows of a connection, so that a change
// made on this node (a revoke, a rotation, a removal) takes effect at once
// here; other nodes see it when their cache entry expires.
func (c *Checker) Invalidate(connectionID string) {
	c.mu.Lock()
	delete(c.cache, connectionID)
	c.gen++
	c.mu.Unlock()
}

// state returns the connection's state from the cache when it was read less
// than ttl ago, else from the store.
//
// A state read longer ago, but less than staleCheckLimit, is read again
// with its whole workspace's (refreshWorkspace): one store read brings
// every cached connection of the workspace up to date, and the checks of
// that workspace that come while it runs use the states they had. Without
// it, clients that come back less often than ttl (long polls re-issued
// every 20 s when nothing arrives) each cost a read of their own, and
// polls that were opened together come back together: ten thousand store
// reads within seconds, which delayed the publishes and answers made
// meanwhile.
func (c *Checker) state(ctx context.Context, id string) (connState, error) {
	now := c.clock.Now()
	c.mu.Lock()
	e, ok := c.cache[id]
	// An entry is fresh for ttl after it was read. A clock that went back
	// (now before fetchedAt) also counts as stale, so no entry lives forever.
	age := now.Sub(e.fetchedAt)
	if ok && !now.Before(e.fetchedAt) && age < c.ttl {
		c.mu.Unlock()
		return e.state, nil
	}
	gen := c.gen
	if ws := e.state.workspaceID; ok && !now.Before(e.fetchedAt) && age < staleCheckLimit && e.state.exists && ws != "" {
		if _, busy := c.refreshing[ws]; busy {
			c.mu.Unlock()
			return e.state, nil // the check that refreshes reads it again
		}
		c.refreshing[ws] = struct{}{}
		c.mu.Unlock()
		if st, ok := c.refreshWorkspace(ctx, ws, id, gen, now); ok {
			return st, nil
		}
		// The workspace could not be read: read the connection alone, as
		// if it had not been cached.
	} else {
		c.mu.Unlock()
	}

	// Read outside the lock: a slow store must not hold up other checks.
	// Two checks missing on the same id at once both read; that is fine.
	var st connState
	err := c.store.View(ctx, func(tx bus.Tx) error {
		conn, err := tx.ConnectionGet(id)
		if errors.Is(err, bus.ErrNotFound) {
			st = connState{} // removed: cached like any state, for ttl
			return nil
		}
		if err != nil {
			return err
		}
		st = stateOf(conn)
		return nil
	})
	if err != nil {
		return connState{}, fmt.Errorf("auth: read connection: %w", err)
	}
	if c.ttl <= 0 {
		return st, nil
	}
	c.mu.Lock()
	if c.gen == gen { // else an Invalidate ran meanwhile: st may be stale
		if len(c.cache) >= maxCachedConnections {
			c.evictLocked(now)
		}
		c.cache[id] = cacheEntry{state: st, fetchedAt: now}
	}
	c.mu.Unlock()
	return st, nil
}

// refreshWorkspace reads the connections of workspace ws again and brings
// the cached states of those among them that are cached up to date (as
// read at now, before the read began); it returns the state of id, false
// when the store could not be read. A connection missing from the list was
// removed.
func (c *Checker) refreshWorkspace(ctx context.Context, ws, id string, gen uint64, now time.Time) (connState, bool) {
	var conns []bus.ConnectionState
	err := func() error {
		defer func() {
			c.mu.Lock()
			delete(c.refreshing, ws)
			c.mu.Unlock()
		}()
		// Only the fields a check needs: a full listing (names,
		// subscriptions, secret hashes) of a large workspace costs several
		// times as much, and these reads come in waves.
		return c.store.View(ctx, func(tx bus.Tx) error {
			var err error
			conns, err = tx.ConnectionStates(ws)
			return err
		})
	}()
	if err != nil {
		return connState{}, false
	}
	st := connState{} // removed, unless listed
	c.mu.Lock()
	defer c.mu.Unlock()
	// An entry is replaced only when no Invalidate ran meanwhile (the list
	// may predate the change) and it was not read after now (by a check of
	// its own: that read may be the newer).
	update := func(id string, st connState) {
		if e, ok := c.cache[id]; ok && c.gen == gen && e.fetchedAt.Before(now) {
			c.cache[id] = cacheEntry{state: st, fetchedAt: now}
		}
	}
	for _, conn := range conns {
		cs := stateFrom(conn)
		if conn.ID == id {
			st = cs
		}
		update(conn.ID, cs)
	}
	update(id, st)
	return st, true
}

func stateOf(conn bus.Connection) connState { return stateFrom(conn.State()) }

func stateFrom(conn bus.ConnectionState) connState {
	return connState{
		exists:            true,
		kind:              conn.Kind,
		workspaceID:       conn.WorkspaceID,
		status:            conn.Status,
		credentialVersion: conn.CredentialVersion,
		quotaTier:         conn.QuotaTier,
	}
}

// evictLocked drops entries too old to answer a check and, if the cache is
// still full, half of the rest (any half: they are only re-read from the
// store).
func (c *Checker) evictLocked(now time.Time) {
	for id, e := range c.cache {
		if now.Sub(e.fetchedAt) >= max(c.ttl, staleCheckLimit) || now.Before(e.fetchedAt) {
			delete(c.cache, id)
		}
	}
	for id := range c.cache {
		if len(c.cache) < maxCachedConnections/2 {
			break
		}
		delete(c.cache, id)
	}
}
