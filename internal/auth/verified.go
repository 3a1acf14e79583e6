package auth

import (
	"crypto/sha256"
	"sync"
	"time"
)

// maxVerifiedTokens bounds the cache of verified tokens.
const maxVerifiedTokens = 50_000

// verifiedCache remembers tokens whose signature and claims were verified,
// so that a consumer's steady stream of requests with one token costs one
// ECDSA verification an hour instead of one per request (it was about a
// third of a request's CPU). Only successful verifications are kept; expiry
// is still checked on every use against the injected clock, and everything
// that can change (credential version, status) is checked after it.
type verifiedCache struct {
	mu sync.Mutex
	m  map[[32]byte]*Claims
}

// keyScratch holds copies of tokens being hashed: []byte(token) would
// allocate a copy of the whole token on every request.
var keyScratch = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func tokenKey(token string) [32]byte {
	b := keyScratch.Get().(*[]byte)
	*b = append((*b)[:0], token...)
	k := sha256.Sum256(*b)
	if cap(*b) <= 1<<16 {
		keyScratch.Put(b)
	}
	return k
}

// get returns the claims of a verified token still valid at now.
func (v *verifiedCache) get(token string, now time.Time) (*Claims, bool) {
	k := tokenKey(token)
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.m[k]
	if !ok {
		return nil, false
	}
	// The same leeway as Verify: a token is refused from exp + leeway on.
	if !now.Before(c.ExpiresAt.Add(TokenLeeway)) {
		delete(v.m, k)
		return nil, false
	}
	return c, true
}

// put remembers verified claims.
func (v *verifiedCache) put(token string, c *Claims, now time.Time) {
	k := tokenKey(token)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = make(map[[32]byte]*Claims)
	}
	if len(v.m) >= maxVerifiedTokens {
		for key, e := range v.m {
			if !now.Before(e.ExpiresAt.Add(TokenLeeway)) || len(v.m) >= maxVerifiedTokens/2 {
				delete(v.m, key)
			}
		}
	}
	v.m[k] = c
}
