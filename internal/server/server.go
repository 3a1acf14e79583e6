// Package server assembles a sombus node: the store, the bus, auth, limits
// and the HTTP API, listening on one address. cmd/sombus and end-to-end
// tests both start nodes through it.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sombus/sombus/internal/auth"
	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/edge"
	"github.com/sombus/sombus/internal/httpapi"
	"github.com/sombus/sombus/internal/limits"
	"github.com/sombus/sombus/internal/metrics"
	"github.com/sombus/sombus/internal/portal"
	"github.com/sombus/sombus/internal/store"
)

// Config is everything a node needs; see the HTTP contract for the flags.
type Config struct {
	Listen       string // address to serve on
	Store        string // sqlite:PATH or postgres://…
	Environment  string // the aud of tokens
	PublicURL    string // base URL for iss and secret URLs; "" derives it from the listen address
	TLSCert      string
	TLSKey       string
	BootstrapKey string // the first operator's API key ("" generates one)
	TiersFile    string // JSON file of quota tiers ("" uses the built-ins)
	Retention    time.Duration

	Clock  bus.Clock    // nil: the system clock
	Logger *slog.Logger // nil: discard
	// Stdout receives the generated bootstrap key and the listen banner.
	Stdout io.Writer
	// CheckTTL is how long token checks trust a connection's state (default 10s).
	CheckTTL time.Duration
	// ShutdownGrace bounds how long Close waits for requests in flight.
	ShutdownGrace time.Duration

	// TrustedProxies is --trusted-proxies: comma-separated CIDRs of load
	// balancers whose X-Forwarded-For names the client ("" trusts none).
	TrustedProxies string
	// MaxConnsPerAddr is --max-conns-per-address: the most connections one
	// client address may hold open (0: no cap).
	MaxConnsPerAddr int
	// BodyTimeout is --body-timeout: the longest a request body may take to
	// arrive (0: DefaultBodyTimeout).
	BodyTimeout time.Duration
	// HeaderTimeout is the longest a request's headers may take to arrive
	// (0: DefaultHeaderTimeout).
	HeaderTimeout time.Duration
	// StoreTimeout is --store-timeout: how long a request of the token,
	// publish and pull routes may take, beyond a long poll's wait and the
	// time its body takes to arrive, before it is answered 503
	// (0: DefaultStoreTimeout; MinStoreTimeout to MaxStoreTimeout).
	StoreTimeout time.Duration
	// MetricsListen is --metrics-listen: when set, GET /metrics is served
	// only on this address, and the API's listener answers it 404.
	MetricsListen string
	// PprofListen is --pprof-listen: when set, the Go runtime's profiles
	// (net/http/pprof, under /debug/pprof/) are served on this loopback
	// address, for diagnosing the node's memory and CPU.
	PprofListen string

	// WrapStore, when set, wraps the store once it is open: the node uses
	// what it returns for everything (tests put a store that fails in
	// between). The optional interfaces below (start-up lock, shared
	// limiters) are still those of the store as opened.
	WrapStore func(bus.Store) bus.Store
}

// Timeouts of the HTTP edge.
const (
	// DefaultHeaderTimeout is the longest a request's headers (and a TLS
	// handshake) may take to arrive.
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultBodyTimeout is the longest a request body may take to arrive:
	// 1 MiB, the largest body, at 35 KiB/s.
	DefaultBodyTimeout = 30 * time.Second
	// DefaultStoreTimeout is the default of --store-timeout, and
	// MinStoreTimeout and MaxStoreTimeout its bounds: past the maximum, the
	// answer would no longer fit in writeTimeout with a long poll's wait.
	DefaultStoreTimeout = 30 * time.Second
	MinStoreTimeout     = time.Second
	MaxStoreTimeout     = time.Minute
	// DefaultMaxConnsPerAddr is the default of --max-conns-per-address.
	DefaultMaxConnsPerAddr = 256
	// writeTimeout is the longest a request may take from the end of its
	// headers to the end of its answer. A long poll waits at most 20 s, so
	// this leaves room for a slow store and a slow reader; a client that
	// never reads its answer frees its connection when it runs out.
	writeTimeout = 2 * time.Minute
	// idleTimeout is how long a kept-alive connection may wait for its
	// next request.
	idleTimeout = 120 * time.Second
)

// Server is a running node.
type Server struct {
	cfg      Config
	store    bus.Store
	svc      *bus.Service
	api      *httpapi.Server
	parking  *httpapi.Parking
	checker  *auth.Checker
	http     *http.Server
	ln       net.Listener
	log      *slog.Logger
	serveErr chan error
	// stopBG ends the node's own background work (key reloads); bgDone
	// is closed when it has ended.
	stopBG context.CancelFunc
	bgDone chan struct{}
	// URL is the base URL the node serves on.
	URL string
	// MetricsURL is the base URL of --metrics-listen ("" when unset).
	MetricsURL string
	metrics    *http.Server
	pprof      *http.Server
}

// A store that several nodes may share offers the node, through these
// optional interfaces, what the nodes must then share too. A store that
// offers none (SQLite: one node) gets limiters kept in process and no
// start-up lock.
type (
	// StartupLocker serializes the first steps of nodes starting together:
	// reading or making the signing key, the handle key and the first
	// operator. unlock releases the lock.
	StartupLocker interface {
		LockStartup(ctx context.Context) (unlock func(), err error)
	}
	// RateLimiterStore keeps rate limits and daily quotas for every node.
	RateLimiterStore interface {
		RateLimiter() limits.Limiter
	}
	// FailureLimiterStore keeps the token endpoint's failed authentications for
	// every node.
	FailureLimiterStore interface {
		TokenFailureLimiter(clock bus.Clock) auth.FailureLimiter
		// SignInFailureLimiter keeps the portal's failed sign-ins, apart.
		SignInFailureLimiter(clock bus.Clock) auth.FailureLimiter
	}
)

// MinBootstrapKeyLength is the fewest characters a --bootstrap-key may
// have: the key opens every workspace, so it must not be guessable.
const MinBootstrapKeyLength = 32

// New opens the store, prepares every part and starts listening.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Clock == nil {
		cfg.Clock = bus.SystemClock{}
	}
	if cfg.Stdout == nil {
		cfg.Stdout = io.Discard
	}
	if cfg.Environment == "" {
		cfg.Environment = "sandbox"
	}
	if cfg.CheckTTL == 0 {
		cfg.CheckTTL = auth.DefaultCheckTTL
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 25 * time.Second
	}
	if cfg.Retention == 0 {
		cfg.Retention = 4 * 24 * time.Hour
	}
	if cfg.Retention < time.Minute || cfg.Retention > 14*24*time.Hour {
		return nil, fmt.Errorf("--retention must be between 1m and 336h (14 days), got %s", cfg.Retention)
	}
	if cfg.BootstrapKey != "" && utf8.RuneCountInString(cfg.BootstrapKey) < MinBootstrapKeyLength {
		// The length only: the key itself is a secret.
		return nil, fmt.Errorf("--bootstrap-key (SOMBUS_BOOTSTRAP_KEY) must be at least %d characters, got %d: choose a long random key",
			MinBootstrapKeyLength, utf8.RuneCountInString(cfg.BootstrapKey))
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	var cert tls.Certificate
	if cfg.TLSCert != "" {
		var err error
		if cert, err = tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey); err != nil {
			return nil, fmt.Errorf("--tls-cert and --tls-key: %w", err)
		}
	}
	if cfg.HeaderTimeout == 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	if cfg.BodyTimeout == 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.HeaderTimeout < 0 || cfg.BodyTimeout < 0 || cfg.MaxConnsPerAddr < 0 {
		return nil, errors.New("--body-timeout and --max-conns-per-address must not be negative")
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = DefaultStoreTimeout
	}
	if cfg.StoreTimeout < MinStoreTimeout || cfg.StoreTimeout > MaxStoreTimeout {
		return nil, fmt.Errorf("--store-timeout must be %s to %s (got %s)", MinStoreTimeout, MaxStoreTimeout, cfg.StoreTimeout)
	}
	proxies, err := edge.ParseProxies(cfg.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("--trusted-proxies: %w", err)
	}
	tiers := limits.DefaultTiers()
	if cfg.TiersFile != "" {
		var err error
		if tiers, err = limits.LoadTiers(cfg.TiersFile); err != nil {
			return nil, fmt.Errorf("load tiers: %w", err)
		}
	}
	log := cfg.Logger
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ln = edge.LimitListener(ln, cfg.MaxConnsPerAddr, proxies, log)
	mln, err := listenMetrics(ctx, cfg.MetricsListen)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	pln, err := listenPprof(ctx, cfg.PprofListen)
	if err != nil {
		_ = ln.Close()
		if mln != nil {
			_ = mln.Close()
		}
		return nil, err
	}
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
	}
	url := scheme + "://" + ln.Addr().String()
	if cfg.PublicURL == "" {
		cfg.PublicURL = url
	}
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")

	s := &Server{cfg: cfg, ln: ln, log: log, URL: url, serveErr: make(chan error, 2)}
	ok := false
	defer func() {
		if !ok {
			_ = ln.Close()
			if mln != nil {
				_ = mln.Close()
			}
			if pln != nil {
				_ = pln.Close()
			}
			if s.store != nil {
				_ = s.store.Close()
			}
			_ = s.parking.Close(context.Background())
		}
	}()
	s.store, err = store.Open(ctx, cfg.Store, log)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	opened := s.store
	if cfg.WrapStore != nil {
		s.store = cfg.WrapStore(opened)
	}
	if l, ok := opened.(StartupLocker); ok {
		// Nodes starting together on one database take turns to read or
		// make the signing key, the handle and cursor keys and the first
		// operator, so that all of them use what the first one made.
		unlock, err := l.LockStartup(ctx)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	signer, err := auth.NewSigner(ctx, s.store, cfg.PublicURL, cfg.Environment, cfg.Clock, log)
	if err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	hkey, err := auth.LoadHandleKey(ctx, s.store)
	if err != nil {
		return nil, fmt.Errorf("handle key: %w", err)
	}
	codec, err := auth.NewHandleCodec(hkey)
	if err != nil {
		return nil, err
	}
	ckey, err := bus.LoadCursorKey(ctx, s.store)
	if err != nil {
		return nil, err
	}
	s.checker = auth.NewChecker(s.store, signer, cfg.Clock, cfg.CheckTTL)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.svc = bus.NewService(bus.Config{
		Store: s.store, Clock: cfg.Clock, Logger: log, Credentials: auth.Credentials{}, Handles: codec, CursorKey: ckey,
		Tiers: tiers.Info, PublicURL: cfg.PublicURL, OnConnectionChange: s.checker.Invalidate,
		Retention: cfg.Retention, Metrics: metrics.NewBus(reg),
	})
	metrics.NewQueues(reg, s.svc.QueueGauges, log)
	if err := s.bootstrap(ctx); err != nil {
		return nil, err
	}
	// Limits: on PostgreSQL several nodes may share the database, so the
	// rate limits, daily quotas, failed token requests and failed portal
	// sign-ins are rows of it,
	// shared by every node; on SQLite (one node) they are kept in process.
	// Signing keys and the handle and cursor MAC keys are in the store
	// either way; credential changes made on another node reach this one's
	// checks when the Checker's cache entry expires (CheckTTL, 10 s; read
	// again with its workspace within 25 s), within the HTTP contract's 30
	// seconds.
	var limiter limits.Limiter = limits.NewMemory(limits.Options{})
	var failures auth.FailureLimiter = auth.NewMemoryFailureLimiter(cfg.Clock)
	if st, ok := opened.(RateLimiterStore); ok {
		limiter = st.RateLimiter()
	}
	if st, ok := opened.(FailureLimiterStore); ok {
		failures = st.TokenFailureLimiter(cfg.Clock)
	}
	// Long polls over HTTP/1.1 wait without a goroutine; answered, their
	// connections wait for the next request as kept-alive ones do.
	s.parking = httpapi.NewParking(idleTimeout, log)
	s.api = httpapi.New(httpapi.Config{
		Parking: s.parking,
		Service: s.svc, Signer: signer, Checker: s.checker,
		Tokens:  auth.NewTokenService(s.store, signer, cfg.Clock, failures),
		Limiter: limiter, Tiers: tiers, Logger: log, Registry: reg, PublicURL: cfg.PublicURL,
		NoMetricsRoute: mln != nil,
		StoreTimeout:   cfg.StoreTimeout,
	})
	// The web portal under /portal/: failed sign-ins are limited like
	// failed secrets (shared by every node where the store shares limits),
	// and counted apart from them, on either store: no client id sent to
	// the token endpoint counts against a portal user, and a flood of
	// token requests does not fill the sign-ins' table.
	var signinFailures auth.FailureLimiter = auth.NewMemoryFailureLimiter(cfg.Clock)
	if st, ok := opened.(FailureLimiterStore); ok {
		signinFailures = st.SignInFailureLimiter(cfg.Clock)
	}
	web, err := portal.New(portal.Config{
		Service: s.svc, Failures: signinFailures, Logger: log,
		Secure:    cfg.TLSCert != "" || strings.HasPrefix(strings.ToLower(cfg.PublicURL), "https://"),
		TierNames: tiers.Names(),
		// The usage the management API's usage route shows, from the same
		// limiter and tiers.
		Usage: func(ctx context.Context, c bus.Connection) (limits.Usage, error) {
			tier, ok := tiers.Get(c.QuotaTier)
			if !ok {
				tier, _ = tiers.Get(limits.StandardTier)
			}
			return limiter.Usage(ctx, c.ID, tier, s.svc.Clock().Now())
		},
	})
	if err != nil {
		return nil, fmt.Errorf("portal: %w", err)
	}
	s.http = &http.Server{
		// Client addresses behind trusted proxies, and a deadline for
		// bodies only: a long poll has none, and waits as long as it asks.
		Handler:           edge.Handler(web.Wrap(s.api), proxies, cfg.BodyTimeout),
		ReadHeaderTimeout: cfg.HeaderTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	s.svc.Start()
	s.startKeyReload(signer)
	if mln != nil {
		s.serveMetrics(mln)
	}
	if pln != nil {
		s.servePprof(pln)
	}
	if cfg.TLSCert != "" {
		// HTTP/2 is negotiated by ALPN; Serve enables it for a TLS
		// configuration that offers h2. The TLS listener is inside the
		// parking one, so that a connection parking hands back (already
		// past its handshake) is served as it is.
		s.http.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}, Certificates: []tls.Certificate{cert}}
		tln := s.parking.Listen(tls.NewListener(ln, s.http.TLSConfig))
		go func() { s.serveErr <- s.http.Serve(tln) }()
	} else {
		pln := s.parking.Listen(ln)
		go func() { s.serveErr <- s.http.Serve(pln) }()
	}
	ok = true
	log.Info("sombus listening", "url", url, "public_url", cfg.PublicURL, "store", store.Redact(cfg.Store), "environment", cfg.Environment)
	fmt.Fprintf(cfg.Stdout, "sombus is listening on %s\n  API:     %s/v1\n  portal:  %s/portal/\n  OpenAPI: %s/v1/openapi.json\n", url, cfg.PublicURL, cfg.PublicURL, cfg.PublicURL)
	return s, nil
}

// listenMetrics opens the --metrics-listen address (nil when unset).
func listenMetrics(ctx context.Context, addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	return ln, nil
}

// serveMetrics serves GET /metrics alone on ln, in plain HTTP, until Close.
func (s *Server) serveMetrics(ln net.Listener) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.api.MetricsHandler())
	s.metrics = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.MetricsURL = "http://" + ln.Addr().String()
	go func() { s.serveErr <- s.metrics.Serve(ln) }()
	s.log.Info("sombus metrics listening", "url", s.MetricsURL+"/metrics")
}

// listenPprof opens the --pprof-listen address (nil when unset). Only a
// loopback address is accepted: the profiles are for the operator on the
// node's own host, never for the network.
func listenPprof(ctx context.Context, addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-listen: %w", err)
	}
	if ip, perr := netip.ParseAddr(host); host != "localhost" && (perr != nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--pprof-listen: %q is not a loopback address (such as 127.0.0.1:6060)", addr)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-listen: %w", err)
	}
	return ln, nil
}

// servePprof serves the runtime's profiles on ln until Close. A profile
// may take as long as it asks (?seconds=30), so there is no write timeout.
func (s *Server) servePprof(ln net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s.pprof = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	go func() { _ = s.pprof.Serve(ln) }()
	s.log.Info("sombus profiles listening", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
}

// KeyReloadInterval is how often a node re-reads the signing keys from the
// store, so that a key made or removed on another node is used here within
// a minute (an unknown kid in a token also makes Verify re-read them).
const KeyReloadInterval = time.Minute

// startKeyReload re-reads the signing keys every KeyReloadInterval until
// Close. A failed read is logged; the keys already known stay in use.
func (s *Server) startKeyReload(signer *auth.Signer) {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopBG, s.bgDone = cancel, make(chan struct{})
	go func() {
		defer close(s.bgDone)
		t := time.NewTicker(KeyReloadInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
				if err := signer.Reload(rctx); err != nil && ctx.Err() == nil {
					s.log.WarnContext(ctx, "reload signing keys", "err", err)
				}
				rcancel()
			}
		}
	}()
}

// bootstrap creates the first operator when the store has no users.
func (s *Server) bootstrap(ctx context.Context) error {
	key, generated := s.cfg.BootstrapKey, false
	if key == "" {
		key, _ = auth.NewAPIKey()
		generated = true
	}
	created, err := s.svc.Bootstrap(ctx, key)
	if errors.Is(err, bus.ErrConflict) {
		// Nodes started together on an empty shared database: another one
		// created the first operator between our count and our insert. Its
		// operator stands; looking again finds it and creates nothing.
		created, err = s.svc.Bootstrap(ctx, key)
	}
	if err != nil {
		return fmt.Errorf("bootstrap operator: %w", err)
	}
	if !created && !generated {
		s.log.Warn("bootstrap key ignored: the store already has users, and the bootstrap key only creates the first operator; manage users' keys with an operator's key instead")
	}
	if created {
		s.log.Info("created the first operator", "generated_key", generated)
		if generated {
			// Shown once, on standard output only (never in the log).
			fmt.Fprintf(s.cfg.Stdout, "First operator created. API key (shown once, keep it safe):\n  %s\n", key)
		}
	}
	return nil
}

// Service returns the node's bus (tests use it to run maintenance now).
func (s *Server) Service() *bus.Service { return s.svc }

// Store returns the node's store.
func (s *Server) Store() bus.Store { return s.store }

// Handler returns the node's whole HTTP handler, as its listener serves it
// (benchmarks call it in process, without the network).
func (s *Server) Handler() http.Handler { return s.http.Handler }

// Wait blocks until the server stops serving on its own (an error) or ctx ends.
func (s *Server) Wait(ctx context.Context) error {
	select {
	case err := <-s.serveErr:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
		return nil
	}
}

// Close shuts down gracefully: long polls answer empty at once, requests in
// flight finish (up to ShutdownGrace), then the store closes.
func (s *Server) Close() error {
	s.svc.BeginShutdown()
	deadline := time.Now().Add(s.cfg.ShutdownGrace)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if s.metrics != nil {
		// Scrapes are short: close the metrics listener first, at once.
		_ = s.metrics.Close()
	}
	if s.pprof != nil {
		_ = s.pprof.Close()
	}
	// Parked long polls answer empty and close, as waiting ones do.
	if perr := s.parking.Close(ctx); perr != nil {
		s.log.Warn("parked long polls not all answered within the shutdown grace", "err", perr)
	}
	err := s.http.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		// What is left after the grace is either a request that would not
		// finish or a connection a client opened and never used (net/http
		// waits 5 s for those): close them rather than fail the stop.
		s.log.Warn("connections still open after the shutdown grace; closing them", "grace", s.cfg.ShutdownGrace)
		err = s.http.Close()
	}
	s.stopBG()
	<-s.bgDone
	s.svc.Stop()
	// A database that stopped answering (a frozen server, a host that drops
	// packets) would hold the store's Close, which waits for its calls in
	// flight, and so the process, for as long as that lasts: it gets the
	// rest of the grace (5 s at least), then the node stops without it.
	closed := make(chan error, 1)
	go func() { closed <- s.store.Close() }()
	select {
	case cerr := <-closed:
		if err == nil {
			err = cerr
		}
	case <-time.After(max(time.Until(deadline), 5*time.Second)):
		s.log.Error("the store did not close within the shutdown grace (a database that does not answer?); stopping without it",
			"grace", s.cfg.ShutdownGrace)
		if err == nil {
			err = fmt.Errorf("close store: not closed within %s", s.cfg.ShutdownGrace)
		}
	}
	s.log.Info("sombus stopped")
	return err
}
