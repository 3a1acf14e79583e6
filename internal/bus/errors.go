// Package bus holds the domain of sombus: its types, its rules, the Store
// interface that both stores implement, and the typed errors whose rule names
// and statuses the HTTP layer writes.
package bus

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Rule names of refusals, as fixed by the HTTP contract and the pull API specification.
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
	RuleStoreUnavailable      = "store.unavailable"
	RuleInternal              = "internal.error"
)

// Violation is one failed check of a request, written into the refusal body.
type Violation struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// Error is a refusal: an HTTP status, one or more violations, and for 429
// and 503 the wait the client should observe. Internal errors are plain
// errors, never *Error.
type Error struct {
	Status     int
	Violations []Violation
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if len(e.Violations) == 0 {
		return fmt.Sprintf("refused (%d)", e.Status)
	}
	return e.Violations[0].Rule + ": " + e.Violations[0].Message
}

// Rule is the first violation's rule.
func (e *Error) Rule() string {
	if len(e.Violations) == 0 {
		return ""
	}
	return e.Violations[0].Rule
}

// Errorf returns a refusal with one violation; the status comes from the rule.
func Errorf(rule, format string, args ...any) *Error {
	return &Error{Status: StatusOf(rule), Violations: []Violation{{Rule: rule, Message: fmt.Sprintf(format, args...)}}}
}

// StatusOf maps a rule to its HTTP status: one table for the whole bus.
func StatusOf(rule string) int {
	switch rule {
	case RuleRouteNotFound, RuleManageNotFound:
		return http.StatusNotFound
	case RuleMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case RuleUnauthenticated, RuleManageUnauthenticated:
		return http.StatusUnauthorized
	case RuleNotRegistered, RuleTenantMismatch, RuleNotOwner, RuleManageForbidden:
		return http.StatusForbidden
	case RuleRateLimited, RuleQuotaExceeded:
		return http.StatusTooManyRequests
	case RuleQueueUnavailable, RuleSkillsUnavailable, RuleStoreUnavailable:
		return http.StatusServiceUnavailable
	case RuleManageConflict:
		return http.StatusConflict
	case RuleEnvelopeTooLarge:
		return http.StatusRequestEntityTooLarge
	case RuleInternal:
		return http.StatusInternalServerError
	default:
		return http.StatusBadRequest
	}
}

// AsError returns the refusal inside err, if any.
func AsError(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// Store-level sentinel errors. Stores map their driver errors onto these
// once, so nothing above a store sees driver types.
var (
	// ErrNotFound: the addressed row does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a uniqueness rule or a state precondition failed.
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: the store cannot be reached or cannot take writes
	// right now (connection failures, a closed store, a lock held past the
	// busy timeout, I/O errors, a failed fsync). Both stores wrap their
	// driver's errors of this kind around it; the HTTP layer answers any
	// error that wraps it 503 store.unavailable with Retry-After, and every
	// other internal error 500 internal.error.
	ErrUnavailable = errors.New("store unavailable")
)

// ErrTimedOut is the cause (context.Cause) of a request's context that
// ended at the node's deadline for its work with the store (--store-timeout),
// not because its client went away: a database that accepts connections and
// never answers would otherwise hold the request, and its connection from
// the pool, for as long as the kernel's TCP timeouts take. It wraps
// ErrUnavailable: such a request is answered 503 with Retry-After.
var ErrTimedOut = fmt.Errorf("the request ran out of time for the store: %w", ErrUnavailable)

// ClientGone reports whether ctx ended because its client went away (or it
// was cancelled), not at the node's deadline (ErrTimedOut).
func ClientGone(ctx context.Context) bool {
	return ctx.Err() != nil && !errors.Is(context.Cause(ctx), ErrTimedOut)
}

// TimedOut reports whether ctx ended at the node's deadline (ErrTimedOut).
func TimedOut(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrTimedOut)
}

// IsUnavailable reports whether err says the store cannot be reached or
// cannot take writes right now: whether it wraps ErrUnavailable. It is the
// one test that decides between a 503 (retry later) and a 500 (a fault of
// the server): a refusal (*Error) is neither.
func IsUnavailable(err error) bool {
	if _, refused := AsError(err); refused {
		return false
	}
	return errors.Is(err, ErrUnavailable)
}

// Unavailable is the 503 refusal with rule (RuleQueueUnavailable on the
// pull routes, RuleSkillsUnavailable on the consumer's skills route,
// RuleStoreUnavailable elsewhere) that answers an error for which
// IsUnavailable holds, with the wait the client should observe.
func Unavailable(rule string) *Error {
	e := &Error{Status: http.StatusServiceUnavailable, RetryAfter: time.Second}
	switch rule {
	case RuleQueueUnavailable:
		e.Violations = []Violation{{Rule: rule, Message: "The queue could not be reached; retry after Retry-After."}}
	case RuleSkillsUnavailable:
		e.RetryAfter = 5 * time.Second
		e.Violations = []Violation{{Rule: rule, Message: "Your skill registrations could not be read; keep what you read last and retry after Retry-After."}}
	default:
		e.Violations = []Violation{{Rule: RuleStoreUnavailable, Message: "The store cannot be reached right now; retry after Retry-After."}}
	}
	return e
}
