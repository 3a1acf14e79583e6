package httpapi

import (
	"encoding/json"
	"errors"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sombus/sombus/internal/edge"
)

// oauthError writes an RFC 6749 §5.2 error body.
func oauthError(w http.ResponseWriter, status int, code, description string, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Pragma", "no-cache")
	if status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Basic realm="sombus"`)
	}
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((retryAfter+time.Second-1)/time.Second), 10))
	}
	body := map[string]string{"error": code}
	if description != "" {
		body["error_description"] = description
	}
	writeJSON(w, status, body)
}

// token is POST /v1/oauth/token: client credentials by HTTP Basic or form
// fields (RFC 6749 §2.3.1), never both.
// tokenIssued is the result label of a token request that got a token.
const tokenIssued = "issued"

// refuseToken writes a token refusal and counts it by its OAuth error code.
func (s *Server) refuseToken(w http.ResponseWriter, status int, code, description string, retryAfter time.Duration) {
	s.metrics.tokens.WithLabelValues(code).Inc()
	oauthError(w, status, code, description, retryAfter)
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/x-www-form-urlencoded" || len(r.Header.Values("Content-Type")) > 1 {
		s.refuseToken(w, http.StatusBadRequest, "invalid_request", "Content-Type must be application/x-www-form-urlencoded.", 0)
		return nil
	}
	tooLarge, err := edge.ParseForm(w, r, limitToken)
	if tooLarge {
		s.refuseToken(w, http.StatusRequestEntityTooLarge, "invalid_request", "The form body is over 64 KiB.", 0)
		return nil
	}
	if err != nil {
		var slow *edge.BodyTimeoutError
		if errors.As(err, &slow) {
			s.refuseToken(w, http.StatusBadRequest, "invalid_request", "The form body did not arrive within "+slow.Timeout.String()+".", 0)
			return nil
		}
		s.refuseToken(w, http.StatusBadRequest, "invalid_request", "The form body could not be read.", 0)
		return nil
	}
	form := r.PostForm
	for k, v := range form {
		if len(v) > 1 {
			s.refuseToken(w, http.StatusBadRequest, "invalid_request", "Parameter "+k+" is repeated.", 0)
			return nil
		}
	}
	gt := form.Get("grant_type")
	if gt == "" {
		s.refuseToken(w, http.StatusBadRequest, "invalid_request", "grant_type is required.", 0)
		return nil
	}
	if gt != "client_credentials" {
		s.refuseToken(w, http.StatusBadRequest, "unsupported_grant_type", "Only grant_type=client_credentials is supported.", 0)
		return nil
	}
	id, secret, basic := r.BasicAuth()
	if h := r.Header.Values("Authorization"); len(h) > 1 || (len(h) == 1 && !basic && strings.TrimSpace(h[0]) != "") {
		// An Authorization header is a client authentication: one that is
		// not HTTP Basic credentials (another scheme, a malformed value,
		// two headers) is refused, not passed over for the form's fields.
		// An empty one carries nothing and is taken as absent.
		s.refuseToken(w, http.StatusUnauthorized, "invalid_client", "The Authorization header must be one HTTP Basic header with the client id and secret.", 0)
		return nil
	}
	if basic {
		// RFC 6749 §2.3.1: Basic credentials are form-urlencoded first.
		if u, err := url.QueryUnescape(id); err == nil {
			id = u
		}
		if u, err := url.QueryUnescape(secret); err == nil {
			secret = u
		}
	}
	_, formID := form["client_id"]
	_, formSecret := form["client_secret"]
	switch {
	case basic && (formID || formSecret):
		s.refuseToken(w, http.StatusBadRequest, "invalid_request", "Authenticate with HTTP Basic or with form fields, not both.", 0)
		return nil
	case !basic:
		id, secret = form.Get("client_id"), form.Get("client_secret")
		if id == "" {
			s.refuseToken(w, http.StatusUnauthorized, "invalid_client", "Client authentication is required.", 0)
			return nil
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	resp, oerr := s.cfg.Tokens.Exchange(r.Context(), id, secret, host)
	if oerr != nil {
		if oerr.Err != nil {
			s.log.ErrorContext(r.Context(), "token exchange", "err", oerr.Err)
		}
		s.refuseToken(w, oerr.Status, oerr.Code, "", oerr.RetryAfter)
		return nil
	}
	s.metrics.tokens.WithLabelValues(tokenIssued).Inc()
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// jwks is GET /v1/oauth/jwks: the public keys that verify access tokens.
func (s *Server) jwks(w http.ResponseWriter, r *http.Request) error {
	b, err := s.cfg.Signer.JWKS()
	if err != nil {
		return err
	}
	if !json.Valid(b) {
		return errInvalidJWKS
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(b)
	return nil
}
