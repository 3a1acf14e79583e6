package limits

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// SetHeaders writes RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset
// (see Decision for what they describe) and, when the request was refused,
// Retry-After in whole seconds, rounded up, at least 1. The HTTP layer calls
// it on every answer of a limited route, whatever the answer. A decision
// under the unlimited tier writes nothing: there is no limit to describe.
func (d Decision) SetHeaders(h http.Header) {
	// The keys are written in their canonical form (net/http's spelling of
	// "RateLimit-Limit"), as Set would store them, without its per-call
	// canonicalization.
	if d.Limit > 0 {
		v := []string{strconv.FormatInt(d.Limit, 10), strconv.FormatInt(d.Remaining, 10), strconv.FormatInt(d.Reset, 10)}
		h[limitKey], h[remainingKey], h[resetKey] = v[0:1:1], v[1:2:2], v[2:3:3]
	} else {
		// A tier without limits still answers with the headers the HTTP contract asks
		// for on every answer of a limited route: a limit that is never
		// reached, all of it remaining, nothing to wait for. The values are
		// shared, full slices: an Add to them copies.
		h[limitKey], h[remainingKey], h[resetKey] = unlimitedValue, unlimitedValue, zeroValue
	}
	if !d.Allowed {
		h.Set("Retry-After", strconv.FormatInt(RetryAfterSeconds(d.RetryAfter), 10))
	}
}

// The RateLimit header keys as http.Header stores them.
var (
	limitKey     = http.CanonicalHeaderKey("RateLimit-Limit")
	remainingKey = http.CanonicalHeaderKey("RateLimit-Remaining")
	resetKey     = http.CanonicalHeaderKey("RateLimit-Reset")
)

// unlimitedHeader is the RateLimit-Limit and -Remaining of an unlimited tier.
const unlimitedHeader = "1000000000"

var (
	unlimitedValue = []string{unlimitedHeader}
	zeroValue      = []string{"0"}
)

// RetryAfterSeconds is a wait as the Retry-After header writes it: whole
// seconds, rounded up, at least 1.
func RetryAfterSeconds(wait time.Duration) int64 {
	return max(ceilSeconds(wait), 1)
}

// Err returns the 429 refusal for a refused decision (nil when allowed):
// rule rate.limited or quota.exceeded, a message stating the limit and the
// wait, and RetryAfter set to the true wait.
func (d Decision) Err() *bus.Error {
	if d.Allowed {
		return nil
	}
	wait := time.Duration(RetryAfterSeconds(d.RetryAfter)) * time.Second
	var msg string
	switch d.Rule {
	case bus.RuleQuotaExceeded:
		msg = "Daily quota of " + count(d.Tier.DailyQuota, "request") +
			" exceeded for this connection; it resets at 00:00 UTC, retry after " + wait.String() + "."
	default:
		msg = "Rate limit of " + count(d.Tier.RatePerSecond, "request") + " a second (bursts of " +
			strconv.Itoa(d.Tier.Burst) + ") exceeded for this connection; retry after " + wait.String() + "."
	}
	e := bus.Errorf(d.Rule, "%s", msg)
	e.RetryAfter = d.RetryAfter
	return e
}

// count writes "1 request", "20 requests", "100,000 requests", "0.5 requests".
func count[N int64 | float64](n N, noun string) string {
	var s string
	switch v := any(n).(type) {
	case int64:
		s = thousands(strconv.FormatInt(v, 10))
	case float64:
		s = strconv.FormatFloat(v, 'f', -1, 64)
		if i := strings.IndexByte(s, '.'); i >= 0 {
			s = thousands(s[:i]) + s[i:]
		} else {
			s = thousands(s)
		}
	}
	if s != "1" {
		noun += "s"
	}
	return s + " " + noun
}

// thousands puts commas into a string of digits: 100000 → 100,000.
func thousands(digits string) string {
	var b strings.Builder
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
