package limits

import (
	"math"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// Why our own token bucket rather than golang.org/x/time/rate: rate.Limiter
// keeps its state privately and behind its own mutex, so it cannot be stored
// in a PostgreSQL row and shared by nodes; a refused Allow there cannot tell
// us the true wait without reserving (and then cancelling) a token; and we
// need the daily quota decided together with the bucket, so that a request
// refused by either consumes neither. The math below is a few lines on plain
// values, driven by an explicit `now`, which both stores can share.
//
// The bucket is kept in GCRA form: instead of a token count and a refill
// time, one instant, Full, when the bucket will be full again. With
// interval T = 1s/rate and capacity B·T, the bucket's deficit at `now` is
// d = Full − now (clamped to [0, B·T]); it holds B − d/T tokens. A request
// needs one token: allowed when d + T ≤ B·T, after which Full = now + d + T.
// Everything is integer nanoseconds, so 40 requests in one instant at 20/s
// are exactly a full 2s deficit and the 41st waits exactly 50ms.

// BucketState is a connection's token bucket: the instant it is full again
// (zero or past: full now) and the token interval that instant was computed
// with (to carry the deficit over when the tier changes).
type BucketState struct {
	Full     time.Time
	Interval time.Duration
}

// QuotaState counts a connection's allowed requests on one UTC day (Day is
// that day's 00:00 UTC).
type QuotaState struct {
	Day   time.Time
	Count int64
}

// State is everything a Limiter keeps per key. Its zero value is a full
// bucket and no requests today.
type State struct {
	Bucket BucketState
	Quota  QuotaState
}

// Idle reports whether forgetting the state changes nothing at now: the
// bucket is full and no request was counted today. Stores drop idle states.
func (s State) Idle(now time.Time) bool {
	return !s.Bucket.Full.After(now) && (s.Quota.Count == 0 || s.Quota.Day.Before(dayOf(now)))
}

// Decision is a Limiter's answer to one request.
//
// Limit, Remaining and Reset are what the RateLimit-* headers say. They
// describe the token bucket (Limit is the burst; Remaining the whole tokens
// left after this request; Reset the seconds, rounded up, until the bucket
// is full again) — except when the daily quota is the tighter limit (it
// refused the request, or fewer requests are left of it today than tokens in
// the bucket): then they describe the quota (Limit is the daily quota;
// Remaining what is left of it today; Reset the seconds until 00:00 UTC), as
// the RateLimit header draft asks for the policy closest to exhaustion. A
// client reading them is never told it has requests left when it has not.
type Decision struct {
	Allowed bool
	// Rule is bus.RuleRateLimited or bus.RuleQuotaExceeded when refused
	// (quota.exceeded when both refuse), empty when allowed.
	Rule      string
	Limit     int64
	Remaining int64
	Reset     int64 // seconds
	// RetryAfter is the true wait when refused: until one token is back
	// (rate.limited), until the next 00:00 UTC (quota.exceeded), the longer
	// of the two when both refuse. Zero when allowed.
	RetryAfter time.Duration
	// QuotaRemaining is what is left of today's quota after this request;
	// -1 when the tier has no daily quota.
	QuotaRemaining int64
	// Tier is the tier the request was decided under (for messages).
	Tier Tier
}

// Usage is a connection's quota use on one UTC day, for the management API.
type Usage struct {
	Day           string // YYYY-MM-DD (UTC)
	RequestsToday int64  // allowed requests counted today
	DailyQuota    int64  // 0 when the tier has no daily quota
	Remaining     int64  // DailyQuota − RequestsToday, at least 0; -1 when unlimited
	Unlimited     bool   // the tier has no daily quota
	ResetsAt      time.Time
}

// Take decides one request of a connection on tier at now, given its
// state, and returns the state to keep and the decision. It is pure: the
// in-process and the PostgreSQL limiters both call it under their lock.
//
// An allowed request takes one token and counts once against today's quota;
// a refused one takes and counts nothing: the state returned is s in the
// current tier's units (a tier change converts the bucket; a new day drops
// yesterday's count), holding the same tokens and count. Requests are
// counted on the unlimited tier too, so Usage reports them.
//
// Tier changes take effect at once: the bucket's deficit (tokens used and
// not yet back) carries over in tokens, clamped to the new burst, and comes
// back at the new rate. So a full bucket is full on any tier, an upgrade
// from standard (burst 40, 30 used) to a burst of 200 leaves 170, and a
// downgrade never leaves more than the new burst. Today's count carries over
// and is compared with the new tier's quota.
//
// A clock that goes backwards never gives more: the deficit is capped at the
// burst and the day's count is reset only when a later day begins.
func Take(s State, tier Tier, now time.Time) (State, Decision) {
	now = now.UTC()
	d := Decision{Tier: tier, QuotaRemaining: -1}

	q := s.Quota
	today := dayOf(now)
	if q.Day.Before(today) {
		q = QuotaState{Day: today}
	}
	quotaOut := tier.HasQuota() && q.Count >= tier.DailyQuota
	untilMidnight := dayOf(now).Add(24 * time.Hour).Sub(now)

	var iv, capacity, deficit, rateWait time.Duration
	rateOut := false
	if tier.RateLimited() {
		iv = tier.Interval()
		capacity = tier.capacity()
		deficit = s.Bucket.deficit(iv, capacity, now)
		if deficit+iv > capacity {
			rateOut = true
			rateWait = deficit + iv - capacity
		}
	}

	d.Allowed = !quotaOut && !rateOut
	if d.Allowed {
		q.Count++
		deficit += iv
	}
	next := State{Bucket: s.Bucket, Quota: q}
	// A refused request leaves a bucket of the same interval as it was: its
	// deficit may have been clamped to the capacity (a request whose now is
	// older than the last one's, as happens when nodes' requests reach the
	// shared state out of order), and writing now+capacity back would hand
	// tokens out again.
	if tier.RateLimited() && (d.Allowed || s.Bucket.Interval != iv) {
		next.Bucket = BucketState{}
		if deficit > 0 {
			next.Bucket = BucketState{Full: now.Add(deficit), Interval: iv}
		}
	}

	bucketRemaining := int64(-1)
	if tier.RateLimited() {
		bucketRemaining = int64((capacity - deficit) / iv)
	}
	if tier.HasQuota() {
		d.QuotaRemaining = max(tier.DailyQuota-q.Count, 0)
	}

	switch {
	case quotaOut:
		d.Rule = bus.RuleQuotaExceeded
		d.RetryAfter = max(untilMidnight, rateWait)
	case rateOut:
		d.Rule = bus.RuleRateLimited
		d.RetryAfter = rateWait
	}

	switch {
	case tier.HasQuota() && (quotaOut || !tier.RateLimited() || (!rateOut && d.QuotaRemaining < bucketRemaining)):
		d.Limit, d.Remaining, d.Reset = tier.DailyQuota, d.QuotaRemaining, ceilSeconds(untilMidnight)
	case tier.RateLimited():
		d.Limit, d.Remaining, d.Reset = int64(tier.Burst), bucketRemaining, ceilSeconds(deficit)
	}
	return next, d
}

// UsageOf reports a state's quota use at now under tier, without changing it.
func UsageOf(s State, tier Tier, now time.Time) Usage {
	now = now.UTC()
	today := dayOf(now)
	u := Usage{Day: today.Format(time.DateOnly), ResetsAt: today.Add(24 * time.Hour), Remaining: -1, Unlimited: true}
	if !s.Quota.Day.Before(today) {
		u.RequestsToday = s.Quota.Count
		if s.Quota.Day.After(today) { // the clock went back: report the day counted
			u.Day = s.Quota.Day.Format(time.DateOnly)
			u.ResetsAt = s.Quota.Day.Add(24 * time.Hour)
		}
	}
	if tier.HasQuota() {
		u.Unlimited = false
		u.DailyQuota = tier.DailyQuota
		u.Remaining = max(tier.DailyQuota-u.RequestsToday, 0)
	}
	return u
}

// deficit is the bucket's debt at now in the current interval, in [0, capacity].
func (b BucketState) deficit(iv, capacity time.Duration, now time.Time) time.Duration {
	if !b.Full.After(now) {
		return 0
	}
	d := b.Full.Sub(now)
	if b.Interval > 0 && b.Interval != iv {
		// The tier changed: keep the deficit in tokens, not in time.
		tokens := float64(d) / float64(b.Interval)
		if tokens*float64(iv) >= float64(capacity) {
			return capacity
		}
		d = time.Duration(math.Round(tokens * float64(iv)))
	}
	return min(d, capacity)
}

// dayOf is 00:00 UTC of t's UTC day.
func dayOf(t time.Time) time.Time {
	const day = 24 * 60 * 60
	sec := t.Unix()
	sec -= sec % day
	if t.Unix() < 0 && t.Unix()%day != 0 {
		sec -= day
	}
	return time.Unix(sec, 0).UTC()
}

// ceilSeconds rounds a positive duration up to whole seconds; 0 for ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
