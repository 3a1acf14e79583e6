package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Rule names of the bus's refusals (the HTTP contract and the pull API). An *Error
// carries one or more violations, each with one of these rules.
const (
	RuleRouteNotFound         = "route.not_found"
	RuleMethodNotAllowed      = "route.method_not_allowed"
	RuleUnauthenticated       = "producer.unauthenticated"
	RuleNotRegistered         = "producer.not_registered"
	RuleTenantMismatch        = "tenant.mismatch"
	RuleNotOwner              = "consumer.not_owner"
	RulePullBadRequest        = "pull.bad_request"
	RuleRateLimited           = "rate.limited"
	RuleQuotaExceeded         = "quota.exceeded"
	RuleQueueUnavailable      = "consumer.queue_unavailable"
	RuleSkillsUnavailable     = "skills.unavailable"
	RuleManageUnauthenticated = "manage.unauthenticated"
	RuleManageForbidden       = "manage.forbidden"
	RuleManageNotFound        = "manage.not_found"
	RuleManageConflict        = "manage.conflict"
	RuleManageBadRequest      = "manage.bad_request"
	RuleEnvelopeMalformed     = "envelope.malformed"
	RuleEnvelopeSomVersion    = "envelope.som_version"
	RuleEnvelopeMessageID     = "envelope.message_id"
	RuleEnvelopeMessageType   = "envelope.message_type"
	RuleEnvelopeCorrelationID = "envelope.correlation_id"
	RuleEnvelopePayload       = "envelope.payload"
	RuleEnvelopeTooLarge      = "envelope.too_large"
	RuleInternal              = "internal.error"

	// The token service answers with RFC 6749 error codes; the SDK reports
	// them as the rule of an *Error whose Status is the token endpoint's.
	RuleInvalidClient = "invalid_client"
	RuleSlowDown      = "slow_down"
)

// CodeReceiptHandleIsInvalid is the per-handle failure code of Ack and Nack.
const CodeReceiptHandleIsInvalid = "ReceiptHandleIsInvalid"

// Violation is one failed check of a request.
type Violation struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// Error is a refusal by the bus: the HTTP status, every violation the bus
// reported, and for 429 and 503 the wait it asked for (Retry-After).
//
// Use errors.As to read it, or errors.Is with one of the sentinel errors
// (ErrRateLimited, ErrNotFound, …), which match when any violation has
// their rule:
//
//	var e *client.Error
//	if errors.As(err, &e) && e.Rule() == client.RuleEnvelopeMessageID { … }
//	if errors.Is(err, client.ErrConflict) { … }
type Error struct {
	// Status is the HTTP status of the answer.
	Status int
	// Violations are the failed checks, at least one for a bus refusal.
	Violations []Violation
	// RetryAfter is the answer's Retry-After (429 and 503), else 0.
	RetryAfter time.Duration
	// Method and Path name the request that was refused.
	Method, Path string
	// Err is the underlying error, if any (an *oauth2.RetrieveError for a
	// refusal of the token service).
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("sombus: ")
	if e.Method != "" {
		fmt.Fprintf(&b, "%s %s: ", e.Method, e.Path)
	}
	fmt.Fprintf(&b, "%d", e.Status)
	for i, v := range e.Violations {
		if i == 0 {
			b.WriteString(" ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(v.Rule)
		if v.Message != "" {
			b.WriteString(": " + v.Message)
		}
	}
	return b.String()
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Rule is the first violation's rule ("" when there is none).
func (e *Error) Rule() string {
	if len(e.Violations) == 0 {
		return ""
	}
	return e.Violations[0].Rule
}

// HasRule reports whether any violation has rule.
func (e *Error) HasRule(rule string) bool {
	for _, v := range e.Violations {
		if v.Rule == rule {
			return true
		}
	}
	return false
}

// Temporary reports whether the same request may succeed later: 429, 503
// and other 5xx answers.
func (e *Error) Temporary() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// Is makes errors.Is(err, ErrX) true when any violation has ErrX's rule.
func (e *Error) Is(target error) bool {
	r, ok := target.(ruleError)
	return ok && e.HasRule(string(r))
}

// ruleError is a sentinel that matches any *Error carrying its rule.
type ruleError string

func (r ruleError) Error() string { return "sombus: " + string(r) }

// Sentinel errors: errors.Is(err, ErrRateLimited) is true when err is an
// *Error with a violation of that rule.
var (
	ErrRouteNotFound         error = ruleError(RuleRouteNotFound)
	ErrUnauthenticated       error = ruleError(RuleUnauthenticated)
	ErrNotRegistered         error = ruleError(RuleNotRegistered)
	ErrTenantMismatch        error = ruleError(RuleTenantMismatch)
	ErrNotOwner              error = ruleError(RuleNotOwner)
	ErrPullBadRequest        error = ruleError(RulePullBadRequest)
	ErrRateLimited           error = ruleError(RuleRateLimited)
	ErrQuotaExceeded         error = ruleError(RuleQuotaExceeded)
	ErrQueueUnavailable      error = ruleError(RuleQueueUnavailable)
	ErrSkillsUnavailable     error = ruleError(RuleSkillsUnavailable)
	ErrManageUnauthenticated error = ruleError(RuleManageUnauthenticated)
	ErrForbidden             error = ruleError(RuleManageForbidden)
	ErrNotFound              error = ruleError(RuleManageNotFound)
	ErrConflict              error = ruleError(RuleManageConflict)
	ErrBadRequest            error = ruleError(RuleManageBadRequest)
	ErrEnvelopeMalformed     error = ruleError(RuleEnvelopeMalformed)
	ErrEnvelopeTooLarge      error = ruleError(RuleEnvelopeTooLarge)
	ErrInvalidClient         error = ruleError(RuleInvalidClient)
)

// RuleOf returns the first rule of the *Error in err's chain ("" if none).
func RuleOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Rule()
	}
	return ""
}

// ViolationsOf returns the violations of the *Error in err's chain.
func ViolationsOf(err error) []Violation {
	var e *Error
	if errors.As(err, &e) {
		return e.Violations
	}
	return nil
}

// parseRefusal builds the *Error of a non-2xx answer.
func parseRefusal(method, path string, status int, h http.Header, body []byte) *Error {
	e := &Error{Status: status, Method: method, Path: path, RetryAfter: retryAfter(h)}
	var r struct {
		Violations []Violation `json:"violations"`
		// RFC 6749 error bodies (token service).
		Error            string `json:"error"`
		ErrorDescription string `json:"error_description"`
	}
	if json.Unmarshal(body, &r) == nil {
		e.Violations = r.Violations
		if len(e.Violations) == 0 && r.Error != "" {
			e.Violations = []Violation{{Rule: r.Error, Message: r.ErrorDescription}}
		}
	}
	if len(e.Violations) == 0 {
		msg := strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		if msg == "" {
			msg = http.StatusText(status)
		}
		e.Violations = []Violation{{Rule: "http." + strconv.Itoa(status), Message: msg}}
	}
	return e
}

// retryAfter reads Retry-After as whole seconds (or an HTTP date).
func retryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}
