package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sombus/sombus/internal/jsonenc"
)

// Defaults of the transport.
const (
	// DefaultMaxRetries is how often a call is retried after a 429 or 503
	// answer or a lost answer when Config.MaxRetries is 0.
	DefaultMaxRetries = 3
	// DefaultRequestTimeout bounds one attempt of a call that does not
	// long-poll; a receive gets its wait on top.
	DefaultRequestTimeout = 30 * time.Second
	// MaxRetryAfter is the longest Retry-After a call waits out before it
	// tries again. A longer one (a daily quota used up waits until
	// midnight UTC) is returned to the caller as the *Error, with its
	// RetryAfter, instead of blocking the call for hours.
	MaxRetryAfter = time.Minute
	// maxBody bounds the answers the SDK reads (a receive of ten 256 KiB
	// envelopes is the largest).
	maxBody = 8 << 20
)

// transport sends JSON requests to the bus and turns refusals into *Error.
// It retries 429 and 503 after Retry-After with jitter, lost answers of
// idempotent calls with backoff, and a 401 once with a fresh credential.
type transport struct {
	base       string // root URL, without /v1
	http       *http.Client
	maxRetries int
	timeout    time.Duration
	userAgent  string
	// bearer returns the credential to send ("" for none).
	bearer func(ctx context.Context) (string, error)
	// refresh drops a credential the bus refused with 401; it reports
	// whether a retry may succeed. nil: 401 is final.
	refresh func(bad string) bool
}

// call is one logical request.
type call struct {
	method string
	path   string // after the base, starting with /v1/
	query  url.Values
	body   any // nil, []byte/json.RawMessage (sent as is) or a value to marshal
	// extra is added to the attempt's timeout (a long poll's wait).
	extra time.Duration
	// idempotent calls are retried after a lost answer (a network error or
	// a timeout) and after 5xx answers.
	idempotent bool
}

// normalizeBase trims a trailing "/" and "/v1" so both the server's root
// and the API base URL ("https://host/v1") are accepted.
func normalizeBase(s string) (string, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "/")
	s = strings.TrimSuffix(s, "/v1")
	if s == "" {
		return "", errors.New("sombus: BaseURL is required")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("sombus: BaseURL %q must be an http:// or https:// URL", s)
	}
	return s, nil
}

func (t *transport) retries() int {
	switch {
	case t.maxRetries < 0:
		return 0
	case t.maxRetries == 0:
		return DefaultMaxRetries
	}
	return t.maxRetries
}

// do sends c and decodes a 2xx answer into out (unless out is nil).
func (t *transport) do(ctx context.Context, c call, out any) error {
	var body []byte
	switch b := c.body.(type) {
	case nil:
	case []byte:
		body = b
	case json.RawMessage:
		body = b
	default:
		j, err := jsonenc.Marshal(b)
		if err != nil {
			return fmt.Errorf("sombus: encode %s %s: %w", c.method, c.path, err)
		}
		body = j
	}
	refreshed := false
	for attempt := 0; ; attempt++ {
		status, hdr, data, err := t.once(ctx, c, body)
		if err == nil && status == http.StatusUnauthorized && t.refresh != nil && !refreshed {
			// A token the bus no longer takes (rotated secret, new signing
			// key): fetch a new one once and retry.
			refreshed = true
			if t.refresh(hdr.Get("X-Sombus-Sent-Bearer")) {
				attempt--
				continue
			}
		}
		if err == nil && status >= 200 && status < 300 {
			if out == nil || len(data) == 0 {
				return nil
			}
			if derr := json.Unmarshal(data, out); derr != nil {
				return fmt.Errorf("sombus: %s %s: decode answer: %w", c.method, c.path, derr)
			}
			return nil
		}
		if err == nil {
			err = parseRefusal(c.method, c.path, status, hdr, data)
		}
		wait, retry := t.retryable(ctx, c, err, attempt)
		if !retry {
			return err
		}
		if serr := sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%w (while waiting to retry after: %w)", serr, err)
		}
	}
}

// retryable says whether err may be retried, and after how long.
func (t *transport) retryable(ctx context.Context, c call, err error, attempt int) (time.Duration, bool) {
	if ctx.Err() != nil || attempt >= t.retries() {
		return 0, false
	}
	var e *Error
	if errors.As(err, &e) {
		switch {
		case e.RetryAfter > MaxRetryAfter:
			return 0, false
		case e.Status == http.StatusTooManyRequests:
			// Refused before it was read: safe to send again.
			return jitter(e.RetryAfter), true
		case e.Status == http.StatusServiceUnavailable && c.idempotent:
			// A 503 may come after the change was made (the store's
			// connection lost at its commit): only what is safe to repeat
			// is sent again; a rotation sent twice would end the overlap
			// of the secret in use.
			return jitter(e.RetryAfter), true
		case e.Status >= 500 && c.idempotent:
			return backoff(attempt), true
		}
		return 0, false
	}
	// A network error or a timeout of the attempt: the answer was lost.
	return backoff(attempt), c.idempotent
}

// once sends one attempt; a non-nil error means no answer was read.
func (t *transport) once(ctx context.Context, c call, body []byte) (int, http.Header, []byte, error) {
	timeout := t.timeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	actx, cancel := context.WithTimeout(ctx, timeout+c.extra)
	defer cancel()
	token := ""
	if t.bearer != nil {
		var err error
		if token, err = t.bearer(actx); err != nil {
			return 0, nil, nil, err
		}
	}
	u := t.base + c.path
	if len(c.query) > 0 {
		u += "?" + c.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(actx, c.method, u, rd)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("sombus: %s %s: %w", c.method, c.path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if t.userAgent != "" {
		req.Header.Set("User-Agent", t.userAgent)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := t.http.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("sombus: %s %s: %w", c.method, c.path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("sombus: %s %s: read answer: %w", c.method, c.path, err)
	}
	// Remember which credential was refused, so a refresh drops only that one.
	resp.Header.Set("X-Sombus-Sent-Bearer", token)
	return resp.StatusCode, resp.Header, data, nil
}

// jitter returns d (at least a second) plus up to a quarter of it more, so
// that many clients told to wait the same time do not come back together.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		d = time.Second
	}
	return d + rand.N(d/4+time.Millisecond)
}

// backoff is the wait before retry attempt+1 after a lost answer:
// 200ms, 400ms, 800ms … capped at 5s, with full jitter on the upper half.
func backoff(attempt int) time.Duration {
	d := 200 * time.Millisecond << min(attempt, 5)
	d = min(d, 5*time.Second)
	return d/2 + rand.N(d/2+1)
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// pathEscape escapes one path segment.
func pathEscape(s string) string { return url.PathEscape(s) }
