package postgres

import (
	"github.com/sombus/sombus/internal/auth"
	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/limits"
)

// Several nodes may share one database, so the store offers the node its
// rate limits and failed token requests as rows of that database, through
// the server's optional store interfaces (LockStartup is the third).

// RateLimiter returns the node's limits.Limiter: Limiter's, deciding at
// the database's clock whatever time it is given, so that the nodes share
// one clock for the buckets and days they share. A node whose own clock
// runs ahead would otherwise find every bucket full again and its sweep
// would delete states still in use; one behind, or stepped back, would
// find the others' buckets spent further than they are.
func (s *Store) RateLimiter() limits.Limiter { return &Limiter{s: s, dbClock: true} }

// TokenFailureLimiter returns FailureLimiter as an auth.FailureLimiter.
// With the system clock (a node's) failures are dated and judged at the
// database's clock, as RateLimiter's buckets are: a node whose clock runs
// ahead would otherwise see the others' failures leave the window early
// (20 more attempts) and sweep them away. Another clock (a test's) is
// followed as given.
func (s *Store) TokenFailureLimiter(clock bus.Clock) auth.FailureLimiter {
	l := s.FailureLimiter(clock)
	_, l.dbClock = clock.(bus.SystemClock)
	return l
}

// SignInFailureLimiter is TokenFailureLimiter for the portal's sign-ins:
// their failures are rows of kinds of their own, counted apart from the
// token service's.
func (s *Store) SignInFailureLimiter(clock bus.Clock) auth.FailureLimiter {
	l := s.TokenFailureLimiter(clock).(*FailureLimiter)
	l.kinds = signInKinds
	return l
}
