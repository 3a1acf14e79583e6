// Package httpapi is the HTTP face of sombus: routes, request parsing, the
// refusal body. It holds no business rules: refusals come from the typed
// errors of bus and auth.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/edge"
	"github.com/sombus/sombus/internal/strictjson"
)

// handlerFunc is a route handler that returns its refusal or internal error
// instead of writing it, so one place writes every error.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// refusal is the bus's usual refusal body.
type refusal struct {
	Accepted   bool            `json:"accepted"`
	Violations []bus.Violation `json:"violations"`
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		http.Error(w, `{"accepted":false,"violations":[{"rule":"internal.error","message":"Internal error."}]}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// unavailableAs makes store unavailability on a route answer rule instead
// of store.unavailable: the pull routes answer the pull API's
// consumer.queue_unavailable, the consumer's skills route
// skills.unavailable, whatever step (the token's connection, the rate
// limit, the queue) could not reach the store.
type unavailableAs struct {
	rule string
	err  error
}

func (u *unavailableAs) Error() string { return u.err.Error() }
func (u *unavailableAs) Unwrap() error { return u.err }

// onUnavailable tags err (nil stays nil) with the rule its route answers
// store unavailability with; writeError reads the tag.
func onUnavailable(err error, rule string) error {
	if err == nil {
		return nil
	}
	return &unavailableAs{rule: rule, err: err}
}

// writeError writes err, the one place where errors become answers: a
// refusal as the usual body with its status; an error for which
// bus.IsUnavailable holds (it wraps bus.ErrUnavailable) as 503 with
// Retry-After and the route's rule (store.unavailable unless the error was
// tagged by onUnavailable); any other error as a 500 "Internal error."
// logged with everything. 5xx are logged loudly, 4xx quietly.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	if errors.Is(err, errClientGone) {
		return // nobody is listening for an answer
	}
	e, ok := bus.AsError(err)
	switch {
	case !ok && (bus.IsUnavailable(err) || bus.TimedOut(r.Context())):
		rule := bus.RuleStoreUnavailable
		if u := (*unavailableAs)(nil); errors.As(err, &u) {
			rule = u.rule
		}
		log.WarnContext(r.Context(), "store unavailable", "method", r.Method, "path", r.URL.Path, "rule", rule, "err", err)
		e = bus.Unavailable(rule)
	case !ok && errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The request's context ended (its client went away) and the work
		// stopped with it: no fault of the node, so no error line for it.
		log.DebugContext(r.Context(), "request cancelled", "method", r.Method, "path", r.URL.Path, "err", err)
		e = &bus.Error{Status: http.StatusInternalServerError, Violations: []bus.Violation{{Rule: bus.RuleInternal, Message: "Internal error."}}}
	case !ok:
		log.ErrorContext(r.Context(), "internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		e = &bus.Error{Status: http.StatusInternalServerError, Violations: []bus.Violation{{Rule: bus.RuleInternal, Message: "Internal error."}}}
	case e.Status >= 500:
		log.WarnContext(r.Context(), "refused", "method", r.Method, "path", r.URL.Path, "status", e.Status, "rule", e.Rule())
	default:
		log.DebugContext(r.Context(), "refused", "method", r.Method, "path", r.URL.Path, "status", e.Status, "rule", e.Rule())
	}
	if e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable {
		ra := e.RetryAfter
		if ra <= 0 {
			ra = time.Second
		}
		w.Header().Set("Retry-After", strconv.FormatInt(int64((ra+time.Second-1)/time.Second), 10))
	}
	if e.Status == http.StatusRequestEntityTooLarge {
		edge.CloseUnread(w, r) // the body is refused unread: answer at once
	}
	if e.Status == http.StatusMethodNotAllowed && w.Header().Get("Allow") == "" {
		w.Header().Set("Allow", "")
	}
	vs, cloned := e.Violations, false
	for i, v := range vs {
		if m := cutText(v.Message, maxMessageBytes); m != v.Message {
			if !cloned { // the error's own stay whole
				vs, cloned = slices.Clone(vs), true
			}
			vs[i].Message = m
		}
	}
	writeJSON(w, e.Status, refusal{Accepted: false, Violations: vs})
}

// maxMessageBytes bounds a refusal's message. Messages quote what was
// sent (a field's value, a parameter's name, an id of the path), which may
// be anything up to the request's own limits: a megabyte of quota_tier
// came back whole in the refusal before.
const maxMessageBytes = bus.MaxRefusalBytes

// cutText is bus.CutText: s with the characters that would hide or
// reorder text escaped, cut to at most n bytes, saying how much it left
// out.
var cutText = bus.CutText

// utf8Charset reports whether a charset label names UTF-8 or a subset of
// it (ASCII), which a JSON body may carry.
func utf8Charset(cs string) bool {
	switch strings.ToLower(cs) {
	case "utf-8", "utf8", "us-ascii", "ascii":
		return true
	}
	return false
}

// bodyOptions say how to read a JSON body.
type bodyOptions struct {
	limit int64  // bytes
	rule  string // the route's *.bad_request rule
	// tooLargeRule is the rule of a body over limit (defaults to rule).
	tooLargeRule string
}

// readBody reads a request body up to the limit, checking the content type.
func readBody(r *http.Request, o bodyOptions) ([]byte, error) {
	if n := len(r.Header.Values("Content-Type")); n > 1 {
		return nil, bus.Errorf(o.rule, "Content-Type is given %d times; send it once, as application/json.", n)
	}
	ct := r.Header.Get("Content-Type")
	if ct != "application/json" { // the usual case needs no parsing
		mt, params, err := mime.ParseMediaType(ct)
		if ct == "" || err != nil || mt != "application/json" {
			return nil, bus.Errorf(o.rule, "Content-Type must be application/json (got %q).", ct)
		}
		// JSON is UTF-8 here: a body said to be in another charset would be
		// read as UTF-8 all the same.
		if cs, ok := params["charset"]; ok && !utf8Charset(cs) {
			return nil, bus.Errorf(o.rule, "Content-Type's charset must be utf-8 (got %q).", cs)
		}
	}
	// Nor is a compressed body read: it would be taken for the JSON itself.
	if ce := r.Header.Values("Content-Encoding"); len(ce) > 0 && !(len(ce) == 1 && strings.EqualFold(ce[0], "identity")) {
		return nil, bus.Errorf(o.rule, "Content-Encoding %q is not accepted: send the body uncompressed.", strings.Join(ce, ", "))
	}
	tooLarge := o.tooLargeRule
	if tooLarge == "" {
		tooLarge = o.rule
	}
	if r.ContentLength > o.limit {
		return nil, &bus.Error{Status: http.StatusRequestEntityTooLarge, Violations: []bus.Violation{{Rule: tooLarge,
			Message: fmt.Sprintf("The request body is %d bytes; this route accepts at most %d bytes.", r.ContentLength, o.limit)}}}
	}
	b, err := readAll(r.Body, r.ContentLength, o.limit+1)
	if err != nil {
		var slow *edge.BodyTimeoutError
		if errors.As(err, &slow) {
			return nil, bus.Errorf(o.rule, "The request body did not arrive within %s; the connection is closed.", slow.Timeout)
		}
		return nil, bus.Errorf(o.rule, "The request body could not be read.")
	}
	if int64(len(b)) > o.limit {
		return nil, &bus.Error{Status: http.StatusRequestEntityTooLarge, Violations: []bus.Violation{{Rule: tooLarge,
			Message: fmt.Sprintf("The request body is over %d bytes, the most this route accepts.", o.limit)}}}
	}
	if bytes.HasPrefix(b, []byte("\xef\xbb\xbf")) {
		// JSON texts must not begin with one (RFC 8259 §8.1); said plainly
		// rather than as the parser's "invalid character" at byte 0.
		return nil, bus.Errorf(o.rule, "The request body starts with a byte order mark (U+FEFF); send the JSON without it.")
	}
	return b, nil
}

// readAll reads body to its end, but no more than limit bytes. With the
// length the request declares (size, at most limit; -1 when unknown) it
// reads into one buffer of that size, and grows it only if the body goes
// on past it.
func readAll(body io.Reader, size, limit int64) ([]byte, error) {
	if size < 0 || size >= limit {
		return io.ReadAll(io.LimitReader(body, limit))
	}
	b := make([]byte, size, size+1) // +1: room to see the end without growing
	n := 0
	for n < len(b) {
		m, err := body.Read(b[n:])
		n += m
		if err == io.EOF {
			return b[:n], nil
		}
		if err != nil {
			return nil, err
		}
	}
	// All that was declared has arrived: the end is next, unless the body
	// is longer than declared.
	for {
		m, err := body.Read(b[n:cap(b)])
		n += m
		if err == io.EOF {
			return b[:n], nil
		}
		if err != nil {
			return nil, err
		}
		if m > 0 {
			rest, err := io.ReadAll(io.LimitReader(body, limit-int64(n)))
			if err != nil {
				return nil, err
			}
			return append(b[:n], rest...), nil
		}
	}
}

// decodeStrict decodes one JSON object into v, refusing unknown fields,
// wrong types and trailing data with a message naming the field, and first
// anything strictjson refuses (bytes that are not UTF-8, repeated member
// names, too deep nesting, numbers too long or too large) with its byte
// offset and member.
func decodeStrict(b []byte, v any, rule string) error {
	return decodeStrictOuter(b, v, rule, -1)
}

// decodeStrictOuter is decodeStrict checking strictly only down to nesting
// level outer (-1: everywhere): values nested deeper are checked on their
// own later (the envelopes of a batch).
func decodeStrictOuter(b []byte, v any, rule string, outer int) error {
	if len(bytes.TrimSpace(b)) > 0 {
		// Syntax errors are left to encoding/json, which names them as
		// every route always has.
		err := strictjson.CheckOuter(b, outer)
		if err != nil && err.Kind != strictjson.Syntax {
			return bus.Errorf(rule, "The request body is refused: %s.", err)
		}
		// encoding/json reads member names regardless of case and null as
		// left out: names must be exact, and null is refused where the
		// request's schema does not allow it.
		if err == nil {
			if merr := strictjson.Members(b, reflect.TypeOf(v)); merr != nil {
				return bus.Errorf(rule, "%s", describeMemberError(merr))
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bus.Errorf(rule, "%s", describeJSONError(err))
	}
	// Only whitespace may follow. (dec.More() would not do: it reports no
	// more after a stray "}" or "]", so "{} }" passed as one object.)
	if len(bytes.TrimSpace(b[dec.InputOffset():])) > 0 {
		return bus.Errorf(rule, "The request body must hold one JSON object and nothing after it.")
	}
	if bytes.TrimSpace(b)[0] != '{' {
		return bus.Errorf(rule, "The request body must be a JSON object.")
	}
	return nil
}

// describeMemberError turns a refusal of strictjson.Members into a
// sentence naming the member.
func describeMemberError(e *strictjson.MemberError) string {
	switch e.Kind {
	case strictjson.Folded:
		return fmt.Sprintf("The request body has a member %q, which differs from the member %q the bus reads only by case: names are exact.", e.Path, e.Field)
	case strictjson.Missing:
		return fmt.Sprintf("%s is required.", e.Path)
	case strictjson.Unknown:
		return fmt.Sprintf("Unknown field %q: it is not part of this request.", e.Path)
	}
	return e.Error() + "." // a member's path first, as the routes' own refusals name it
}

// describeJSONError turns a decoding error into a sentence naming the field.
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return fmt.Sprintf("The request body must be a JSON object, not %s.", te.Value)
		}
		kind := te.Type.Kind()
		if num, ok := strings.CutPrefix(te.Value, "number "); ok && kind >= reflect.Int && kind <= reflect.Uint64 {
			// A number the field's integer type cannot hold: a fraction,
			// an exponent, or too many digits. (A whole number out of the
			// field's own range is refused by the route, with the range.)
			if strings.ContainsAny(num, ".eE") {
				return fmt.Sprintf("Field %q must be an integer written without a fraction or an exponent, not %s.", field, num)
			}
			return fmt.Sprintf("Field %q must be an integer, not %s: it is out of range.", field, num)
		}
		return fmt.Sprintf("Field %q must be %s, not %s.", field, jsonKind(kind.String()), te.Value)
	case errors.As(err, &se):
		return fmt.Sprintf("The request body is not valid JSON (at byte %d).", se.Offset)
	case errors.Is(err, io.EOF):
		return "The request body is empty; a JSON object is required."
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return fmt.Sprintf("Unknown field %s: it is not part of this request.", strings.TrimPrefix(err.Error(), "json: unknown field "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "The request body is cut short: it is not valid JSON."
	}
	return "The request body is not valid JSON."
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "int", "int64", "int32", "float64":
		return "a number"
	case "bool":
		return "true or false"
	case "slice":
		return "an array"
	case "struct", "map", "ptr":
		return "an object"
	}
	return "of another type"
}

var errInvalidJWKS = errors.New("jwks: signer produced invalid JSON")

// errClientGone ends a request whose client went away: no answer, no log.
var errClientGone = errors.New("client gone")
