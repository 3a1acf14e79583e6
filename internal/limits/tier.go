// Package limits holds sombus's per-connection allowances: quota tiers, a
// token bucket and a daily quota per connection (the Limiter interface and
// its in-process implementation, Memory), the RateLimit-* and Retry-After
// headers and 429 refusals they produce, and a gate on concurrent long polls.
//
// The arithmetic is in pure functions over plain state values (Take,
// UsageOf, State.Idle), so a store shared by several nodes (PostgreSQL) can
// keep the same State in a row and run the same math under a row lock.
package limits

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"time"

	"github.com/sombus/sombus/internal/strictjson"
)

// Names of the built-in tiers.
const (
	// StandardTier is the default tier of every connection: 20 requests a
	// second, bursts of 40, 100,000 requests a UTC day. A config file may
	// override its numbers.
	StandardTier = "standard"
	// UnlimitedTier has no limits at all; only operators may assign it (load
	// tests, internal tools). It cannot be redefined.
	UnlimitedTier = "unlimited"
)

// Bounds on configured tier values. They keep the bucket arithmetic (in
// nanoseconds, int64) far from overflow: Burst × (1s / RatePerSecond) is at
// most 10^6 × 10^12 ns.
const (
	MinRatePerSecond = 0.001
	MaxRatePerSecond = 1_000_000
	MaxBurst         = 1_000_000
	MaxDailyQuota    = 1_000_000_000_000
)

// Tier is a named allowance: a token bucket (RatePerSecond, Burst) and a
// daily quota of allowed requests per UTC day. A zero RatePerSecond and
// Burst mean no rate limit; a zero DailyQuota means no daily quota (only the
// built-in unlimited tier has neither). OperatorOnly tiers may be assigned
// to a connection only by an operator.
type Tier struct {
	Name          string
	RatePerSecond float64
	Burst         int
	DailyQuota    int64
	OperatorOnly  bool
}

// Standard returns the built-in standard tier.
func Standard() Tier {
	return Tier{Name: StandardTier, RatePerSecond: 20, Burst: 40, DailyQuota: 100_000}
}

// Unlimited returns the built-in unlimited tier.
func Unlimited() Tier {
	return Tier{Name: UnlimitedTier, OperatorOnly: true}
}

// RateLimited reports whether the tier has a token bucket.
func (t Tier) RateLimited() bool { return t.RatePerSecond > 0 && t.Burst > 0 }

// HasQuota reports whether the tier has a daily quota.
func (t Tier) HasQuota() bool { return t.DailyQuota > 0 }

// IsUnlimited reports whether the tier limits nothing.
func (t Tier) IsUnlimited() bool { return !t.RateLimited() && !t.HasQuota() }

// Interval is the time one token takes to come back: 1s / RatePerSecond,
// rounded to the nanosecond (exact for 20/s: 50ms). Zero without a rate.
func (t Tier) Interval() time.Duration {
	if !t.RateLimited() {
		return 0
	}
	iv := time.Duration(math.Round(float64(time.Second) / t.RatePerSecond))
	return max(iv, 1)
}

// capacity is the time a full bucket of the tier takes to fill from
// empty: the burst's tokens at one an interval.
func (t Tier) capacity() time.Duration { return time.Duration(t.Burst) * t.Interval() }

// Validate checks a tier handed to a Limiter: a name, and either no limit or
// values within bounds for each of the bucket and the quota.
func (t Tier) Validate() error {
	if t.Name == "" {
		return errors.New("limits: tier has no name")
	}
	if t.RatePerSecond != 0 || t.Burst != 0 {
		if err := checkRate(t.RatePerSecond); err != nil {
			return fmt.Errorf("limits: tier %q: %w", t.Name, err)
		}
		if err := checkBurst(t.Burst); err != nil {
			return fmt.Errorf("limits: tier %q: %w", t.Name, err)
		}
	}
	if t.DailyQuota != 0 {
		if err := checkQuota(t.DailyQuota); err != nil {
			return fmt.Errorf("limits: tier %q: %w", t.Name, err)
		}
	}
	return nil
}

func checkRate(r float64) error {
	if math.IsNaN(r) || r < MinRatePerSecond || r > MaxRatePerSecond {
		return fmt.Errorf("rate_per_second must be between %g and %g, got %g", float64(MinRatePerSecond), float64(MaxRatePerSecond), r)
	}
	return nil
}

func checkBurst(b int) error {
	if b < 1 || b > MaxBurst {
		return fmt.Errorf("burst must be between 1 and %d, got %d", MaxBurst, b)
	}
	return nil
}

func checkQuota(q int64) error {
	if q < 1 || q > MaxDailyQuota {
		return fmt.Errorf("daily_quota must be between 1 and %d, got %d", int64(MaxDailyQuota), q)
	}
	return nil
}

// Tiers is the server's registry of tiers: the built-ins with the config
// file's tiers merged over them. It is immutable, so safe for concurrent
// use; the zero value holds only the built-ins.
type Tiers struct {
	m map[string]Tier
}

// DefaultTiers returns the built-in tiers only (standard and unlimited).
func DefaultTiers() Tiers {
	return Tiers{m: map[string]Tier{StandardTier: Standard(), UnlimitedTier: Unlimited()}}
}

// Get returns the tier of that name.
func (ts Tiers) Get(name string) (Tier, bool) {
	if ts.m == nil {
		ts = DefaultTiers()
	}
	t, ok := ts.m[name]
	return t, ok
}

// Info reports whether a tier exists and whether only operators may assign
// it. Its shape is bus.TierInfo, so `bus.Config{Tiers: tiers.Info}` works.
func (ts Tiers) Info(name string) (exists, operatorOnly bool) {
	t, ok := ts.Get(name)
	return ok, ok && t.OperatorOnly
}

// Names returns the tier names, sorted.
func (ts Tiers) Names() []string {
	if ts.m == nil {
		ts = DefaultTiers()
	}
	names := make([]string, 0, len(ts.m))
	for n := range ts.m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// tierConfig is one entry of the config file. Pointers tell a missing field
// from a zero one, so the error can say "is required".
type tierConfig struct {
	Name          string   `json:"name" strictjson:"required"`
	RatePerSecond *float64 `json:"rate_per_second" strictjson:"required"`
	Burst         *int     `json:"burst" strictjson:"required"`
	DailyQuota    *int64   `json:"daily_quota" strictjson:"required"`
	OperatorOnly  bool     `json:"operator_only" strictjson:"nullable"` // null is false, as it always was
}

type tiersFile struct {
	Tiers []tierConfig `json:"tiers"`
}

var tierNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// LoadTiers reads a tiers config file and merges its tiers over the
// built-ins:
//
//	{"tiers": [{"name": "gold", "rate_per_second": 100, "burst": 200,
//	            "daily_quota": 1000000, "operator_only": false}]}
//
// Every field but operator_only is required. A tier named standard replaces
// the built-in standard's numbers (it cannot be operator_only: it is every
// connection's default); unlimited cannot be redefined. Unknown fields,
// repeated names and values out of bounds are refused with an error naming
// the tier, the field and the bound.
func LoadTiers(path string) (Tiers, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Tiers{}, fmt.Errorf("limits: reading tiers: %w", err)
	}
	ts, err := ParseTiers(data)
	if err != nil {
		return Tiers{}, fmt.Errorf("limits: tiers file %s: %w", path, err)
	}
	return ts, nil
}

// ParseTiers is LoadTiers on the file's contents.
func ParseTiers(data []byte) (Tiers, error) {
	// Names are exact and null is no value: encoding/json would read
	// "BURST" as burst and null as left out. Repeated names (the last
	// would win) and bytes that are not UTF-8 are refused too. Syntax
	// errors are the decoder's to name, and unknown or missing members
	// are refused below with the tier named.
	if err := strictjson.Check(data); err != nil && err.Kind != strictjson.Syntax {
		return Tiers{}, fmt.Errorf("refused JSON: %w", err)
	} else if err == nil {
		if merr := strictjson.Members(data, reflect.TypeFor[tiersFile]()); merr != nil && merr.Kind != strictjson.Missing && merr.Kind != strictjson.Unknown {
			return Tiers{}, merr
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f tiersFile
	if err := dec.Decode(&f); err != nil {
		return Tiers{}, fmt.Errorf("malformed JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Tiers{}, errors.New("malformed JSON: data after the top-level object")
	}
	ts := DefaultTiers()
	seen := map[string]bool{}
	for i, c := range f.Tiers {
		where := fmt.Sprintf("tiers[%d]", i)
		if c.Name != "" {
			where += fmt.Sprintf(" (%q)", c.Name)
		}
		switch {
		case c.Name == "":
			return Tiers{}, fmt.Errorf("%s: name is required", where)
		case !tierNameRE.MatchString(c.Name):
			return Tiers{}, fmt.Errorf("%s: name must be 1 to 32 characters of a-z, 0-9, _ and -, starting with a letter or digit", where)
		case c.Name == UnlimitedTier:
			return Tiers{}, fmt.Errorf("%s: unlimited is built in and cannot be redefined", where)
		case seen[c.Name]:
			return Tiers{}, fmt.Errorf("%s: name is defined twice", where)
		case c.RatePerSecond == nil:
			return Tiers{}, fmt.Errorf("%s: rate_per_second is required", where)
		case c.Burst == nil:
			return Tiers{}, fmt.Errorf("%s: burst is required", where)
		case c.DailyQuota == nil:
			return Tiers{}, fmt.Errorf("%s: daily_quota is required", where)
		case c.Name == StandardTier && c.OperatorOnly:
			return Tiers{}, fmt.Errorf("%s: operator_only cannot be set on standard, every connection's default tier", where)
		}
		seen[c.Name] = true
		if err := checkRate(*c.RatePerSecond); err != nil {
			return Tiers{}, fmt.Errorf("%s: %w", where, err)
		}
		if err := checkBurst(*c.Burst); err != nil {
			return Tiers{}, fmt.Errorf("%s: %w", where, err)
		}
		if err := checkQuota(*c.DailyQuota); err != nil {
			return Tiers{}, fmt.Errorf("%s: %w", where, err)
		}
		ts.m[c.Name] = Tier{
			Name: c.Name, RatePerSecond: *c.RatePerSecond, Burst: *c.Burst,
			DailyQuota: *c.DailyQuota, OperatorOnly: c.OperatorOnly,
		}
	}
	return ts, nil
}
