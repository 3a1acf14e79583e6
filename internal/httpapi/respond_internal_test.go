package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sombus/sombus/internal/bus"
)

// writeError is the one place errors become answers: store unavailability
// (any error wrapping bus.ErrUnavailable) is 503 store.unavailable with
// Retry-After; any other internal error, a bug, is 500 internal.error.
func TestWriteErrorMapsStoreUnavailability(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		err    error
		status int
		rule   string
	}{
		{fmt.Errorf("read workspace: %w", bus.ErrUnavailable), 503, bus.RuleStoreUnavailable},
		{errors.New("a bug"), 500, bus.RuleInternal},
		// A route's own rule for unavailability (the pull routes'), and
		// never for a fault or a refusal.
		{onUnavailable(fmt.Errorf("auth: %w", bus.ErrUnavailable), bus.RuleQueueUnavailable), 503, bus.RuleQueueUnavailable},
		{onUnavailable(fmt.Errorf("auth: %w", bus.ErrUnavailable), bus.RuleSkillsUnavailable), 503, bus.RuleSkillsUnavailable},
		{onUnavailable(errors.New("a bug"), bus.RuleQueueUnavailable), 500, bus.RuleInternal},
		{onUnavailable(bus.Errorf(bus.RuleTenantMismatch, "no"), bus.RuleQueueUnavailable), 403, bus.RuleTenantMismatch},
	} {
		w := httptest.NewRecorder()
		writeError(w, httptest.NewRequest("GET", "/v1/manage/workspaces", nil), log, tc.err)
		if w.Code != tc.status || !strings.Contains(w.Body.String(), `"rule":"`+tc.rule+`"`) {
			t.Fatalf("%v: %d %s, want %d %s", tc.err, w.Code, w.Body.String(), tc.status, tc.rule)
		}
		if ra := w.Header().Get("Retry-After"); (tc.status == 503) != (ra != "") {
			t.Fatalf("%v: Retry-After %q", tc.err, ra)
		}
	}
}

// A request whose client went away (its context cancelled) and whose work
// stopped with it is no internal error of the node: nothing is logged at
// error level, while a cancellation the client did not cause still is.
func TestWriteErrorCancelledRequestLogsNoError(t *testing.T) {
	var out strings.Builder
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	err := fmt.Errorf("auth: read connection: %w", context.Canceled)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	writeError(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/x", nil).WithContext(ctx), log, err)
	if out.Len() != 0 {
		t.Fatalf("a cancelled request logged %q", out.String())
	}

	writeError(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/x", nil), log, err)
	if !strings.Contains(out.String(), "internal error") {
		t.Fatalf("a cancellation while the request was live logged %q, want an internal error line", out.String())
	}
}

// A number an integer field cannot hold (a fraction, an exponent, or too
// many digits) is refused naming the field, the value and what it must
// be: not "must be a number, not number 1.0".
func TestDecodeStrictNamesWholeNumbers(t *testing.T) {
	var v struct {
		DelaySeconds int   `json:"delay_seconds"`
		Limit        int64 `json:"limit"`
		Name         string
	}
	for body, want := range map[string]string{
		`{"delay_seconds":1.0}`:           `Field "delay_seconds" must be an integer written without a fraction or an exponent, not 1.0.`,
		`{"delay_seconds":1e2}`:           `Field "delay_seconds" must be an integer written without a fraction or an exponent, not 1e2.`,
		`{"limit":99999999999999999999}`:  `Field "limit" must be an integer, not 99999999999999999999: it is out of range.`,
		`{"limit":-99999999999999999999}`: `Field "limit" must be an integer, not -99999999999999999999: it is out of range.`,
		`{"delay_seconds":"5"}`:           `Field "delay_seconds" must be a number, not string.`,
		`{"Name":5}`:                      `Field "Name" must be a string, not number.`,
	} {
		err := decodeStrict([]byte(body), &v, bus.RuleManageBadRequest)
		if e, ok := bus.AsError(err); !ok || len(e.Violations) != 1 || e.Violations[0].Message != want {
			t.Errorf("%s: %v, want the message %q", body, err, want)
		}
	}
}

// A refusal's message quotes what was sent: a long one is cut to
// maxMessageBytes at a rune's start, saying how much it left out, in the
// answer only (the error keeps its whole message).
func TestRefusalMessagesAreCut(t *testing.T) {
	long := `Unknown quota tier "` + strings.Repeat("€", 500_000) + `".` // 3 bytes a rune
	e := bus.Errorf(bus.RuleManageBadRequest, "%s", long)
	w := httptest.NewRecorder()
	writeError(w, httptest.NewRequest("POST", "/v1/manage/workspaces", nil), slog.New(slog.DiscardHandler), e)
	var body struct {
		Violations []struct{ Message string } `json:"violations"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || len(body.Violations) != 1 {
		t.Fatalf("%d %.200s: %v", w.Code, w.Body.String(), err)
	}
	msg := body.Violations[0].Message
	if len(msg) > maxMessageBytes || !utf8.ValidString(msg) || !strings.HasPrefix(msg, `Unknown quota tier "€€`) ||
		!strings.HasSuffix(msg, fmt.Sprintf("(%d bytes cut)", len(long)-strings.Index(msg, "…"))) {
		t.Fatalf("the answer's message (%d bytes): %.100s…%s", len(msg), msg, msg[max(0, len(msg)-60):])
	}
	if got := e.Violations[0].Message; got != long {
		t.Fatalf("the error's own message was cut too (%d bytes)", len(got))
	}
	// A batch's results carry their envelopes' refusals in a 200: cut too.
	out := appendPublishResults(nil, []bus.PublishResult{{Violations: []bus.Violation{{Rule: bus.RuleEnvelopeMalformed, Message: long}}}})
	if len(out) > 2*maxMessageBytes || !utf8.Valid(out) {
		t.Fatalf("a batch result of %d bytes for a %d-byte message", len(out), len(long))
	}
	if short := cutText("short", maxMessageBytes); short != "short" {
		t.Fatalf("a short message: %q", short)
	}
}

// A JSON body said to be in a charset other than UTF-8, or compressed, is
// refused naming the header, not read as UTF-8 JSON all the same.
func TestReadBodyRefusesOtherCharsetsAndEncodings(t *testing.T) {
	o := bodyOptions{limit: 1024, rule: bus.RuleManageBadRequest}
	for _, tc := range []struct {
		ct, ce string
		ok     bool
	}{
		{"application/json", "", true},
		{"application/json; charset=utf-8", "", true},
		{"application/json; charset=UTF-8", "identity", true},
		{"application/json; charset=utf8", "", true},
		{"application/json; charset=us-ascii", "", true},
		{"application/json; charset=utf-16", "", false},
		{"application/json; charset=latin1", "", false},
		{"application/json", "gzip", false},
		{"application/json", "br", false},
	} {
		r := httptest.NewRequest("POST", "/v1/manage/workspaces", strings.NewReader(`{"name":"a"}`))
		r.Header.Set("Content-Type", tc.ct)
		if tc.ce != "" {
			r.Header.Set("Content-Encoding", tc.ce)
		}
		b, err := readBody(r, o)
		e, refused := bus.AsError(err)
		switch {
		case tc.ok && (err != nil || string(b) != `{"name":"a"}`):
			t.Errorf("%s, %q: %q, %v; want the body", tc.ct, tc.ce, b, err)
		case !tc.ok && (!refused || e.Status != 400 || e.Rule() != bus.RuleManageBadRequest):
			t.Errorf("%s, %q: %q, %v; want a 400 refusal", tc.ct, tc.ce, b, err)
		}
	}
}
