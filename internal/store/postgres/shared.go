package postgres

import (
	"github.com/sombus/sombus/internal/auth"
	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/limits"
)

// Several nodes may share one database, so the store offers the node its
// rate limits and token failure windows as rows of that database, through
// the server's optional store interfaces (LockStartup is the third).

// RateLimiter returns Limiter as a limits.Limiter.
func (s *Store) RateLimiter() limits.Limiter { return s.Limiter() }

// TokenFailureLimiter returns FailureLimiter as an auth.FailureLimiter.
func (s *Store) TokenFailureLimiter(clock bus.Clock) auth.FailureLimiter {
	return s.FailureLimiter(clock)
}
