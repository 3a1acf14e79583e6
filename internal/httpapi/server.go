package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sombus/sombus/internal/auth"
	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/edge"
	"github.com/sombus/sombus/internal/limits"
	"github.com/sombus/sombus/internal/openapi"
)

// Body limits per route (the HTTP contract).
const (
	limitSettle  = 64 << 10
	limitPublish = 256 << 10
	limitBatch   = 1 << 20
	limitManage  = 1 << 20
	limitToken   = 64 << 10
)

// MaxLongPollsPerConnection bounds the concurrent long polls of one
// connection; a receive past it is answered 429 rate.limited at once.
const MaxLongPollsPerConnection = limits.DefaultLongPolls

// Config wires the HTTP API to the rest of the server.
type Config struct {
	Service  *bus.Service
	Tokens   *auth.TokenService
	Signer   *auth.Signer
	Checker  *auth.Checker
	Limiter  limits.Limiter
	Tiers    limits.Tiers
	Logger   *slog.Logger
	Registry *prometheus.Registry // nil: a fresh one
	// NoMetricsRoute leaves GET /metrics out of the API (404 route.not_found):
	// the node serves MetricsHandler on a listener of its own instead.
	NoMetricsRoute bool
	// PublicURL is the node's --public-url, named as the server of the
	// OpenAPI document it serves.
	PublicURL string
	// Parking, when set, lets long polls over HTTP/1.1 wait without a
	// goroutine (see Parking); the server's listener must be its Listen.
	Parking *Parking
	// StoreTimeout is --store-timeout: how long a request of the token,
	// publish and pull routes may take, beyond a long poll's wait and the
	// time its body takes to arrive, before it is answered 503 (see
	// bus.ErrTimedOut). Zero: no limit.
	StoreTimeout time.Duration
}

// patternReceive is the receive route, which refuses HEAD (see receive).
const patternReceive = "GET /v1/tenants/{t}/consumers/{c}/messages"

// maxWait is the longest wait of a long poll, and its default.
const maxWait = 20 * time.Second

// pollWait is the wait a receive asks for (its wait parameter, in whole
// seconds up to maxWait; maxWait when absent, as the receive takes it, or
// not a number, which the receive refuses).
func pollWait(r *http.Request) time.Duration {
	n, err := strconv.Atoi(r.URL.Query().Get("wait"))
	if err != nil || n < 0 || n > int(maxWait/time.Second) {
		return maxWait
	}
	return time.Duration(n) * time.Second
}

// Server is the HTTP API.
type Server struct {
	cfg     Config
	svc     *bus.Service
	log     *slog.Logger
	mux     *http.ServeMux
	polls   *limits.LongPollGate
	metrics *metrics
	reg     *prometheus.Registry
}

// New builds the HTTP API.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Server{cfg: cfg, svc: cfg.Service, log: cfg.Logger, mux: http.NewServeMux(), polls: &limits.LongPollGate{}, reg: cfg.Registry}
	s.metrics = newMetrics(cfg.Registry)
	s.routes()
	return s
}

func (s *Server) handle(pattern string, h handlerFunc) {
	s.mux.Handle(pattern, s.metrics.instrument(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			writeError(w, r, s.log, err)
		}
	})))
}

// handleBounded is handle for a route whose request ends at the node's
// deadline, StoreTimeout (and extra, a long poll's wait) of the handler's
// time: a database that accepts connections and never answers (frozen, or
// behind a proxy whose other side is gone) is given up on, 503, instead of
// holding the request and its pooled connection for as long as the
// kernel's TCP timeouts take. The time its body takes to arrive does not
// count (the edge bounds it, --body-timeout): a slow client is not
// answered as if the store were out of reach.
func (s *Server) handleBounded(pattern string, extra func(*http.Request) time.Duration, h handlerFunc) {
	if s.cfg.StoreTimeout <= 0 {
		s.handle(pattern, h)
		return
	}
	s.handle(pattern, func(w http.ResponseWriter, r *http.Request) error {
		limit := s.cfg.StoreTimeout
		if extra != nil {
			limit += extra(r)
		}
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		d := newDeadline(limit, func() { cancel(bus.ErrTimedOut) })
		defer d.stop()
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &pausingBody{ReadCloser: r.Body, d: d}
		}
		r = r.WithContext(ctx)
		if err := h(w, r); err != nil {
			writeError(w, r, s.log, err)
		}
		return nil
	})
}

func (s *Server) routes() {
	s.handle("GET /healthz", func(w http.ResponseWriter, r *http.Request) error {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return nil
	})
	s.handle("GET /readyz", func(w http.ResponseWriter, r *http.Request) error {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.svc.Store().Ping(ctx); err != nil {
			if !bus.IsUnavailable(err) && ctx.Err() != nil && r.Context().Err() == nil {
				// No answer within the probe's time: unreachable too.
				return fmt.Errorf("readyz: %w: %w", bus.ErrUnavailable, err)
			}
			// Unreachable (or unable to take writes): 503; any other
			// failure is a fault of the server: 500. Either is "not ready".
			return fmt.Errorf("readyz: %w", err)
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return nil
	})
	if !s.cfg.NoMetricsRoute {
		s.mux.Handle("GET /metrics", s.MetricsHandler())
	}
	s.mux.Handle("GET /v1/openapi.json", openapi.Handler(s.cfg.PublicURL))

	s.handleBounded("POST /v1/oauth/token", nil, s.token)
	s.handle("GET /v1/oauth/jwks", s.jwks)

	s.handleBounded("POST /v1/tenants/{t}/messages", nil, s.publish)
	s.handleBounded("POST /v1/tenants/{t}/messages/batch", nil, s.publishBatch)
	// The pull routes answer store unavailability with the pull API's own
	// rules, whichever step could not reach the store.
	s.handleBounded(patternReceive, pollWait, unavailableRule(bus.RuleQueueUnavailable, s.receive))
	s.handleBounded("POST /v1/tenants/{t}/consumers/{c}/ack", nil, unavailableRule(bus.RuleQueueUnavailable, s.ack))
	s.handleBounded("POST /v1/tenants/{t}/consumers/{c}/nack", nil, unavailableRule(bus.RuleQueueUnavailable, s.nack))
	s.handleBounded("GET /v1/tenants/{t}/consumers/{c}/skills", nil, unavailableRule(bus.RuleSkillsUnavailable, s.skills))

	s.manageRoutes()
}

// MetricsHandler serves the registry's series in the Prometheus text format.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)})
}

// noRoute answers a request the mux has no route for (404, or 405 with
// the Allow header) with the usual refusal body. It is a function of its
// own so that ServeHTTP's frame, under every request and so under every
// waiting long poll, stays small.
//
//go:noinline
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	if !edge.CleanPath(r.URL.Path) {
		writeError(w, r, s.log, bus.Errorf(bus.RuleRouteNotFound, "No route %s %s: a path with an empty, \".\" or \"..\" segment names no route.",
			r.Method, strings.ReplaceAll(r.URL.Path, "\n", "")))
		return
	}
	// The mux answers 404 or 405 here; learn which (and the Allow header)
	// without letting it write its plain-text body. (It redirects only an
	// unclean path, refused above, or one missing a subtree's trailing
	// slash, which names a route: no redirect comes here.)
	h, _ := s.mux.Handler(r)
	code, header := edge.Recorded(h, r)
	if code == http.StatusMethodNotAllowed {
		allow := s.allowed(r, header.Get("Allow"))
		w.Header().Set("Allow", allow)
		writeError(w, r, s.log, bus.Errorf(bus.RuleMethodNotAllowed, "Method %s is not allowed on %s; allowed: %s.", r.Method, r.URL.Path, allow))
		return
	}
	writeError(w, r, s.log, bus.Errorf(bus.RuleRouteNotFound, "No route %s %s.", r.Method, strings.ReplaceAll(r.URL.Path, "\n", "")))
}

// allowed is the Allow list of r's path: the mux's (which offers HEAD
// wherever GET is), without HEAD on the receive route, whose handler
// refuses it.
func (s *Server) allowed(r *http.Request, allow string) string {
	get := r.Clone(r.Context())
	get.Method = http.MethodGet
	if _, pattern := s.mux.Handler(get); pattern != patternReceive {
		return allow
	}
	methods := slices.DeleteFunc(strings.Split(allow, ", "), func(m string) bool { return m == http.MethodHead })
	return strings.Join(methods, ", ")
}

// unavailableRule makes h's store unavailability answer rule (see
// onUnavailable).
func unavailableRule(rule string, h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		return onUnavailable(h(w, r), rule)
	}
}

// ServeHTTP serves the API; unknown routes and wrong methods get the usual
// refusal body.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(v)
			}
			s.log.ErrorContext(r.Context(), "panic", "method", r.Method, "path", r.URL.Path, "panic", v)
			writeError(w, r, s.log, &bus.Error{Status: 500, Violations: []bus.Violation{{Rule: bus.RuleInternal, Message: "Internal error."}}})
		}
	}()
	// An unclean path is refused before the mux, which would redirect it
	// to its cleaned path (once cleaned, it may even name a route).
	if _, pattern := s.mux.Handler(r); pattern == "" || !edge.CleanPath(r.URL.Path) {
		s.noRoute(w, r)
		return
	}
	// The mux itself dispatches, so that r.PathValue works in handlers
	// (Handler above does not set path values).
	s.mux.ServeHTTP(w, r)
}
