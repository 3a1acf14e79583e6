package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sombus/sombus/internal/auth"
	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/limits"
	"github.com/sombus/sombus/internal/strictjson"
)

// bearer returns the bearer token of a request ("" when there is none).
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// admit checks the token of a workspace route and takes one request from
// the connection's allowance, writing the RateLimit headers.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, role bus.ConnectionKind, clientID string) (*auth.Claims, error) {
	claims, err := s.cfg.Checker.Check(r.Context(), bearer(r), role, r.PathValue("t"), clientID)
	if err != nil {
		if e, ok := bus.AsError(err); ok && e.Status == http.StatusForbidden {
			// A 403 (a well-signed token on the wrong route, tenant or
			// connection) still counts against the token's connection and,
			// like every answer of a workspace route but 401 and 500, carries
			// its RateLimit headers (OpenAPI decision 22). The 403 stands.
			if c, verr := s.cfg.Signer.Verify(bearer(r)); verr == nil {
				if _, lerr := s.allow(w, r, c.ClientID); lerr != nil {
					s.log.WarnContext(r.Context(), "rate limit of a refused request", "err", lerr)
				}
				// Waiting would not help a 403: Retry-After is for 429 and
				// 503, even when the connection's allowance is used up.
				w.Header().Del("Retry-After")
			}
		}
		return nil, err
	}
	d, err := s.allow(w, r, claims.ClientID)
	if err != nil {
		return nil, err
	}
	if !d.Allowed {
		return nil, d.Err()
	}
	return claims, nil
}

// allow takes one request from a connection's allowance and writes the
// RateLimit headers.
func (s *Server) allow(w http.ResponseWriter, r *http.Request, clientID string) (limits.Decision, error) {
	tierName, err := s.cfg.Checker.QuotaTier(r.Context(), clientID)
	if err != nil {
		return limits.Decision{}, err
	}
	tier, ok := s.cfg.Tiers.Get(tierName)
	if !ok {
		// A tier removed from the configuration falls back to standard.
		tier, _ = s.cfg.Tiers.Get("standard")
	}
	d, err := s.cfg.Limiter.Allow(r.Context(), clientID, tier, s.svc.Clock().Now())
	if err != nil {
		if bus.ClientGone(r.Context()) {
			return limits.Decision{}, errClientGone // the client left: no answer, no log
		}
		return limits.Decision{}, fmt.Errorf("rate limit: %w", err)
	}
	d.SetHeaders(w.Header())
	return d, nil
}

// publish is POST /v1/tenants/{t}/messages.
func (s *Server) publish(w http.ResponseWriter, r *http.Request) error {
	claims, err := s.admit(w, r, bus.KindProducer, "")
	if err != nil {
		return err
	}
	if err := refuseQuery(r, bus.RuleEnvelopeMalformed); err != nil {
		return err
	}
	body, err := readBody(r, bodyOptions{limit: limitPublish, rule: bus.RuleEnvelopeMalformed, tooLargeRule: bus.RuleEnvelopeTooLarge})
	if err != nil {
		return err
	}
	res, err := s.svc.Publish(r.Context(), claims.Tenant, claims.ClientID, [][]byte{body})
	if err != nil {
		return err
	}
	if !res[0].Accepted {
		return &bus.Error{Status: http.StatusBadRequest, Violations: res[0].Violations}
	}
	b := getBuffer(128)
	*b = append(appendPublishResult(*b, &res[0]), '\n')
	_ = writeBody(w, http.StatusAccepted, b) // a client gone: nothing to do
	return nil
}

// publishBatch is POST /v1/tenants/{t}/messages/batch.
func (s *Server) publishBatch(w http.ResponseWriter, r *http.Request) error {
	claims, err := s.admit(w, r, bus.KindProducer, "")
	if err != nil {
		return err
	}
	if err := refuseQuery(r, bus.RuleEnvelopeMalformed); err != nil {
		return err
	}
	body, err := readBody(r, bodyOptions{limit: limitBatch, rule: bus.RuleEnvelopeMalformed, tooLargeRule: bus.RuleEnvelopeTooLarge})
	if err != nil {
		return err
	}
	// The envelopes (level 3 and below) are checked one by one, each with
	// its own result.
	envs, ok := batchEnvelopes(body)
	if !ok {
		var req struct {
			Messages []json.RawMessage `json:"messages" strictjson:"required"`
		}
		if err := decodeStrictOuter(body, &req, bus.RuleEnvelopeMalformed, 2); err != nil {
			return err
		}
		envs = make([][]byte, len(req.Messages))
		for i, m := range req.Messages {
			envs[i] = m
		}
	}
	if len(envs) < 1 || len(envs) > 100 {
		return bus.Errorf(bus.RuleEnvelopeMalformed, "messages must hold 1 to 100 envelopes (got %d).", len(envs))
	}
	res, err := s.svc.Publish(r.Context(), claims.Tenant, claims.ClientID, envs)
	if err != nil {
		return err
	}
	b := getBuffer(64 + 128*len(res))
	*b = appendPublishResults(*b, res)
	_ = writeBody(w, http.StatusOK, b)
	return nil
}

var (
	digits      = regexp.MustCompile(`^[0-9]{1,9}$`)
	attemptText = regexp.MustCompile(`^[!-~]{1,128}$`)
)

// intParam reads an integer query parameter within [lo, hi].
func intParam(q map[string]string, name string, def, lo, hi int) (int, error) {
	v, ok := q[name]
	if !ok {
		return def, nil
	}
	if !digits.MatchString(v) {
		return 0, bus.Errorf(bus.RulePullBadRequest, "%s must be an integer between %d and %d.", name, lo, hi)
	}
	n, _ := strconv.Atoi(v)
	if n < lo || n > hi {
		return 0, bus.Errorf(bus.RulePullBadRequest, "%s must be an integer between %d and %d (got %d).", name, lo, hi, n)
	}
	return n, nil
}

// receiveQuery holds the query parameters of a receive.
type receiveQuery struct {
	max, wait, visibility int // messages, seconds, seconds
	attempt               string
}

// receiveParams are the query parameters a receive takes, in the order
// they are checked.
var receiveParams = []string{"max", "wait", "visibility", "attempt"}

// parseReceiveQuery checks the query string of a receive (see
// parseQuery) and reads its parameters, each within its range. A refusal
// is pull.bad_request naming the parameter, or the query string when it
// is not URL encoding.
func parseReceiveQuery(raw string) (receiveQuery, error) {
	if rq, ok := plainReceiveQuery(raw); ok {
		return rq, nil
	}
	q, err := parseQuery(raw, bus.RulePullBadRequest, receiveParams...)
	if err != nil {
		return receiveQuery{}, err
	}
	var rq receiveQuery
	if rq.max, err = intParam(q, "max", 10, 1, 10); err != nil {
		return receiveQuery{}, err
	}
	if rq.wait, err = intParam(q, "wait", 20, 0, 20); err != nil {
		return receiveQuery{}, err
	}
	if rq.visibility, err = intParam(q, "visibility", 60, 0, 43200); err != nil {
		return receiveQuery{}, err
	}
	if v, ok := q["attempt"]; ok {
		if !attemptText.MatchString(v) {
			return receiveQuery{}, bus.Errorf(bus.RulePullBadRequest, "attempt must be 1 to 128 printable ASCII characters without spaces.")
		}
		rq.attempt = v
	}
	return rq, nil
}

// plainReceiveQuery reads the usual receive query string, max, wait and
// visibility each at most once with a value in its range and nothing to
// unescape, without building maps. Any other query string (ok false) is
// left to parseQuery and intParam, which read the same values from the
// query strings read here.
func plainReceiveQuery(raw string) (rq receiveQuery, ok bool) {
	if strings.ContainsAny(raw, "%+;") {
		return rq, false
	}
	rq = receiveQuery{max: 10, wait: 20, visibility: 60}
	var seen [3]bool
	for pair := range strings.SplitSeq(raw, "&") {
		if raw == "" {
			break
		}
		k, v, found := strings.Cut(pair, "=")
		if !found || len(v) < 1 || len(v) > 9 || strings.Trim(v, "0123456789") != "" {
			return rq, false
		}
		n, _ := strconv.Atoi(v)
		var i, lo, hi int
		var dst *int
		switch k {
		case "max":
			i, lo, hi, dst = 0, 1, 10, &rq.max
		case "wait":
			i, lo, hi, dst = 1, 0, 20, &rq.wait
		case "visibility":
			i, lo, hi, dst = 2, 0, 43200, &rq.visibility
		default:
			return rq, false
		}
		if seen[i] || n < lo || n > hi {
			return rq, false
		}
		seen[i], *dst = true, n
	}
	return rq, true
}

// receive is GET /v1/tenants/{t}/consumers/{c}/messages. A long poll
// waits in it: what is read and checked before the wait, and the answer
// after it, are in functions of their own so that the frames under the
// wait stay small (see bus.Service.Receive).
func (s *Server) receive(w http.ResponseWriter, r *http.Request) error {
	if r.Method == http.MethodHead {
		// The mux serves HEAD with a GET route. A receive takes messages,
		// and an answer without its body would hide them from everyone
		// until their visibility ran out.
		w.Header().Set("Allow", http.MethodGet)
		return bus.Errorf(bus.RuleMethodNotAllowed, "Method HEAD is not allowed on a receive, which takes messages; allowed: GET.")
	}
	req, release, err := s.receiveRequest(w, r)
	if err != nil {
		return err
	}
	if req.Wait > 0 && s.cfg.Parking != nil {
		if handled, err := s.receiveParked(w, r, req, release); handled {
			return err
		}
	}
	defer release()
	ds, err := s.svc.Receive(r.Context(), req)
	if err != nil {
		return err
	}
	s.answerReceive(w, r, req.QueueID, ds)
	return nil
}

// receiveRequest admits a receive and reads its query; a long poll takes
// a place of its connection's long polls, given back by release.
//
//go:noinline
func (s *Server) receiveRequest(w http.ResponseWriter, r *http.Request) (req bus.ReceiveRequest, release func(), err error) {
	queueID := r.PathValue("c")
	if _, err := s.admit(w, r, bus.KindConsumer, queueID); err != nil {
		return req, nil, err
	}
	rq, err := parseReceiveQuery(r.URL.RawQuery)
	if err != nil {
		return req, nil, err
	}
	release = noRelease
	if rq.wait > 0 {
		var ok bool
		if release, ok = s.polls.Acquire(queueID, MaxLongPollsPerConnection); !ok {
			return req, nil, limits.LongPollRefusal(MaxLongPollsPerConnection)
		}
	}
	return bus.ReceiveRequest{
		QueueID: queueID, Max: rq.max, Wait: time.Duration(rq.wait) * time.Second,
		Visibility: time.Duration(rq.visibility) * time.Second, AttemptID: rq.attempt,
	}, release, nil
}

func noRelease() {}

// answerReceive writes a receive's answer; messages whose answer could not
// be written are given back at once.
//
//go:noinline
func (s *Server) answerReceive(w http.ResponseWriter, r *http.Request, queueID string, ds []bus.Delivery) {
	w.Header()["Cache-Control"] = noStore
	b := getBuffer(messagesSize(ds))
	*b = s.appendMessages(*b, ds)
	werr := writeBody(w, http.StatusOK, b)
	if werr == nil {
		werr = http.NewResponseController(w).Flush()
	}
	if werr != nil && len(ds) > 0 {
		// The answer could not be written: give the messages back at once.
		s.log.WarnContext(r.Context(), "receive answer lost; releasing", "queue_id", queueID, "messages", len(ds), "err", werr)
		s.svc.Release(queueID, ds)
	}
}

// batchEnvelopes reads the usual batch body, {"messages":[…]} and nothing
// else, without a decoder: the envelopes are the pieces of body between
// the array's commas, as they were sent. Any other body (ok false) is left
// to decodeStrictOuter, which reads the same envelopes from the bodies read
// here.
func batchEnvelopes(body []byte) (envs [][]byte, ok bool) {
	if strictjson.CheckOuter(body, 2) != nil {
		return nil, false
	}
	i := strictjson.SkipSpace(body, 0)
	lit := func(s string) bool {
		if !bytes.HasPrefix(body[i:], []byte(s)) {
			return false
		}
		i = strictjson.SkipSpace(body, i+len(s))
		return true
	}
	if !lit("{") || !lit(`"messages"`) || !lit(":") || !lit("[") {
		return nil, false
	}
	envs = make([][]byte, 0, 100)
	for !lit("]") {
		if len(envs) > 0 && !lit(",") || len(envs) == 100 {
			return nil, false
		}
		start := i
		if i = strictjson.SkipValue(body, i); i == start {
			return nil, false
		}
		envs = append(envs, body[start:i:i])
		i = strictjson.SkipSpace(body, i)
	}
	if len(envs) == 0 || !lit("}") || i != len(body) {
		return nil, false
	}
	return envs, true
}

// plainHandles reads the usual ack or nack body, {"receipt_handles":[…]}
// with 1 to 10 strings without escapes and nothing else, without a
// decoder: the handles are pieces of one copy of the body. Any other body
// (ok false) is left to decodeStrict, whose answer (handles or refusal) is
// the same for the bodies read here.
func plainHandles(body []byte) (hs []string, ok bool) {
	if strictjson.Check(body) != nil {
		return nil, false
	}
	var spans [10][2]int
	n := 0
	i := 0
	ws := func() {
		for i < len(body) && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r') {
			i++
		}
	}
	lit := func(s string) bool {
		ws()
		if !bytes.HasPrefix(body[i:], []byte(s)) {
			return false
		}
		i += len(s)
		return true
	}
	if !lit("{") || !lit(`"receipt_handles"`) || !lit(":") || !lit("[") {
		return nil, false
	}
	for !lit("]") {
		if n == len(spans) || n > 0 && !lit(",") || !lit(`"`) {
			return nil, false
		}
		end := bytes.IndexByte(body[i:], '"')
		if end < 0 || bytes.IndexByte(body[i:i+end], '\\') >= 0 {
			return nil, false
		}
		spans[n] = [2]int{i, i + end}
		n++
		i += end + 1
	}
	if n == 0 || !lit("}") {
		return nil, false
	}
	if ws(); i != len(body) {
		return nil, false
	}
	text := string(body) // one copy for every handle
	hs = make([]string, n)
	for k := range n {
		hs[k] = text[spans[k][0]:spans[k][1]]
	}
	return hs, true
}

// settleRequest is the body of ack and nack.
type settleRequest struct {
	ReceiptHandles []string `json:"receipt_handles" strictjson:"required"`
	DelaySeconds   *int     `json:"delay_seconds"`
}

func (s *Server) readSettle(r *http.Request, nack bool) (settleRequest, error) {
	var req settleRequest
	body, err := readBody(r, bodyOptions{limit: limitSettle, rule: bus.RulePullBadRequest})
	if err != nil {
		return req, err
	}
	if hs, ok := plainHandles(body); ok {
		req.ReceiptHandles = hs
	} else if err := decodeStrict(body, &req, bus.RulePullBadRequest); err != nil {
		return req, err
	}
	if req.DelaySeconds != nil && !nack {
		return req, bus.Errorf(bus.RulePullBadRequest, "Unknown field \"delay_seconds\": only nack takes it.")
	}
	n := len(req.ReceiptHandles)
	if n < 1 || n > 10 {
		return req, bus.Errorf(bus.RulePullBadRequest, "receipt_handles must hold 1 to 10 receipt handles (got %d).", n)
	}
	for i, h := range req.ReceiptHandles {
		if slices.Contains(req.ReceiptHandles[:i], h) { // n is at most 10
			return req, bus.Errorf(bus.RulePullBadRequest, "receipt_handles[%d] repeats an earlier handle; handles must be distinct.", i)
		}
	}
	if req.DelaySeconds != nil && (*req.DelaySeconds < 0 || *req.DelaySeconds > 43200) {
		return req, bus.Errorf(bus.RulePullBadRequest, "delay_seconds must be an integer between 0 and 43200 (got %d).", *req.DelaySeconds)
	}
	return req, nil
}

func (s *Server) settle(w http.ResponseWriter, r *http.Request, nack bool) error {
	queueID := r.PathValue("c")
	if _, err := s.admit(w, r, bus.KindConsumer, queueID); err != nil {
		return err
	}
	if err := refuseQuery(r, bus.RulePullBadRequest); err != nil {
		return err
	}
	req, err := s.readSettle(r, nack)
	if err != nil {
		return err
	}
	var delay time.Duration
	if req.DelaySeconds != nil {
		delay = time.Duration(*req.DelaySeconds) * time.Second
	}
	res, err := s.svc.Settle(r.Context(), queueID, req.ReceiptHandles, nack, delay)
	if err != nil {
		return err
	}
	key := "acked"
	if nack {
		key = "nacked"
	}
	b := getBuffer(64 + 160*len(res))
	*b = appendSettled(*b, key, res)
	_ = writeBody(w, http.StatusOK, b)
	return nil
}

// ack is POST /v1/tenants/{t}/consumers/{c}/ack.
func (s *Server) ack(w http.ResponseWriter, r *http.Request) error { return s.settle(w, r, false) }

// nack is POST /v1/tenants/{t}/consumers/{c}/nack.
func (s *Server) nack(w http.ResponseWriter, r *http.Request) error { return s.settle(w, r, true) }

// skills is GET /v1/tenants/{t}/consumers/{c}/skills.
func (s *Server) skills(w http.ResponseWriter, r *http.Request) error {
	queueID := r.PathValue("c")
	if _, err := s.admit(w, r, bus.KindConsumer, queueID); err != nil {
		return err
	}
	if err := refuseQuery(r, bus.RulePullBadRequest); err != nil {
		return err
	}
	sk, err := s.svc.ConsumerSkills(r.Context(), queueID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sk)
	return nil
}
