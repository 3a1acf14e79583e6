package bus

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Credentials makes secrets and API keys. The auth package implements it;
// bus only stores the hashes it returns.
type Credentials interface {
	// NewSecret returns a fresh client secret and the hash to keep.
	NewSecret() (plain string, hash []byte)
	// NewAPIKey returns a fresh API key and the hash to keep.
	NewAPIKey() (plain string, hash []byte)
	// Hash returns the hash kept for a secret or API key.
	Hash(plain string) []byte
	// HashPassword returns the slow, salted hash kept for a password.
	HashPassword(password string) string
	// PasswordMatches reports whether password hashes to hash; an empty
	// hash (no password set) never matches, after the same work.
	PasswordMatches(password, hash string) bool
}

// HandleCodec turns handles into unforgeable receipt handles and back.
type HandleCodec interface {
	Encode(h Handle) string
	// AppendEncode appends the text Encode returns to dst.
	AppendEncode(dst []byte, h Handle) []byte
	Decode(s string) (Handle, error)
	// DecodeFor is Decode of a handle that must be of queue queueID (one
	// of another queue is an error).
	DecodeFor(s, queueID string) (Handle, error)
}

// TierInfo says whether a quota tier exists and whether only operators may
// assign it.
type TierInfo func(name string) (exists, operatorOnly bool)

// Config configures a Service.
type Config struct {
	Store       Store
	Clock       Clock
	Logger      *slog.Logger
	Credentials Credentials
	Handles     HandleCodec
	// CursorKey keys the MACs of the listings' cursors (at least 16
	// bytes; LoadCursorKey reads the one every node shares). Without it a
	// random key of this process is used: its cursors are refused by
	// other nodes and after a restart.
	CursorKey []byte
	// Tiers validates quota tier names; nil accepts only "standard".
	Tiers TierInfo
	// PublicURL is the base URL shown with new secrets (no trailing slash).
	PublicURL string
	// Metrics receives the bus's counts and store timings; nil counts
	// nothing.
	Metrics Metrics
	// OnConnectionChange is called after a committed change to a
	// connection's status or credentials (the node's token checks drop their
	// cached state at once).
	OnConnectionChange func(connectionID string)

	Retention           time.Duration // default 4 days
	DeadLetterRetention time.Duration // default 14 days
	// MaintainEvery is the period of the background sweeper (default 1s).
	MaintainEvery time.Duration
	// SampleEvery is the interval of the queue samples (default 10s);
	// SampleKeep is how long they are kept (default 24h).
	SampleEvery time.Duration
	SampleKeep  time.Duration
}

// Fixed windows of the contract.
const (
	DedupWindow     = 5 * time.Minute
	AttemptWindow   = 5 * time.Minute
	AckRecordWindow = 15 * time.Minute
)

// Service is the bus: every rule between the HTTP layer and the store.
type Service struct {
	cfg   Config
	store Store
	// announcer is the store when it is a WaitAnnouncer (nodes sharing
	// it), nil otherwise.
	announcer WaitAnnouncer
	clock     Clock
	log       *slog.Logger
	notifier  *Notifier
	metrics   Metrics
	cursorKey []byte // see Config.CursorKey

	stopOnce sync.Once
	stopping chan struct{} // closed when the server stops: long polls answer empty
	bgCancel context.CancelFunc
	bgDone   sync.WaitGroup
}

// NewService returns a Service; call Start to run its background work.
func NewService(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Tiers == nil {
		cfg.Tiers = func(name string) (bool, bool) { return name == "standard", false }
	}
	if cfg.OnConnectionChange == nil {
		cfg.OnConnectionChange = func(string) {}
	}
	if cfg.Retention == 0 {
		cfg.Retention = 4 * 24 * time.Hour
	}
	if cfg.DeadLetterRetention == 0 {
		cfg.DeadLetterRetention = 14 * 24 * time.Hour
	}
	if cfg.MaintainEvery == 0 {
		cfg.MaintainEvery = time.Second
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	if cfg.SampleKeep <= 0 {
		cfg.SampleKeep = DefaultSampleKeep
	}
	store := cfg.Store
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	} else {
		store = timedStore{Store: store, m: cfg.Metrics}
	}
	s := &Service{
		cfg:       cfg,
		metrics:   cfg.Metrics,
		store:     store,
		clock:     cfg.Clock,
		log:       cfg.Logger,
		notifier:  NewNotifier(),
		stopping:  make(chan struct{}),
		cursorKey: cursorKeyOf(cfg.CursorKey),
	}
	s.announcer, _ = cfg.Store.(WaitAnnouncer)
	if c, ok := cfg.Clock.(interface{ OnMove(func()) }); ok {
		// A clock that tests move by hand: visibility timeouts and release
		// delays run out when it moves, not when the notifier's timers
		// (real time) fire, so every waiter looks again then.
		c.OnMove(s.notifier.WakeEveryone)
	}
	return s
}

// Store returns the service's store.
func (s *Service) Store() Store { return s.cfg.Store }

// Clock returns the service's clock.
func (s *Service) Clock() Clock { return s.clock }

// Start runs the sweeper, the queue sampler and the listener for other
// nodes' wake-ups until Stop.
func (s *Service) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.bgCancel = cancel
	s.bgDone.Add(3)
	go func() {
		defer s.bgDone.Done()
		s.every(ctx, s.cfg.SampleEvery, "sample queues", func(ctx context.Context) error {
			_, err := s.Sample(ctx)
			return err
		})
	}()
	go func() {
		defer s.bgDone.Done()
		if err := s.store.Listen(ctx, s.notifier.NotifyAll); err != nil && ctx.Err() == nil {
			s.log.Error("listen for wake-ups ended", "err", err)
		}
	}()
	go func() {
		defer s.bgDone.Done()
		s.every(ctx, s.cfg.MaintainEvery, "maintain", func(ctx context.Context) error {
			_, err := s.Maintain(ctx)
			return err
		})
	}()
}

// every runs f every d until ctx ends; an error is logged as what failed
// (unless it came from ctx ending) and the next round comes all the same.
func (s *Service) every(ctx context.Context, d time.Duration, what string, f func(context.Context) error) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := f(ctx); err != nil && ctx.Err() == nil {
				s.log.Error(what, "err", err)
			}
		}
	}
}

// Maintain runs one round of background work now.
func (s *Service) Maintain(ctx context.Context) (*MaintainResult, error) {
	res, err := s.store.Maintain(ctx, &MaintainParams{
		Now:                 s.clock.Now(),
		Retention:           s.cfg.Retention,
		DeadLetterRetention: s.cfg.DeadLetterRetention,
		AttemptWindow:       AttemptWindow,
		DedupWindow:         DedupWindow,
		AckRecordWindow:     AckRecordWindow,
	})
	if err != nil {
		return nil, err
	}
	s.metrics.DeadLettered(res.DeadLettered)
	for _, q := range res.Woken {
		s.notifier.NotifyAll(q) // how many became ready is not known here
	}
	return res, nil
}

// BeginShutdown makes every long poll answer empty at once and refuses new
// waits; requests in flight finish.
func (s *Service) BeginShutdown() {
	s.stopOnce.Do(func() { close(s.stopping) })
}

// Stop ends the background work (after BeginShutdown).
func (s *Service) Stop() {
	s.BeginShutdown()
	if s.bgCancel != nil {
		s.bgCancel()
	}
	s.bgDone.Wait()
	s.notifier.Stop()
}
