// Package loadcheck drives load through a running sombus bus and checks
// what comes out: every accepted message delivered (LOST), per story
// first deliveries in publish order and never two messages of a story in
// flight together (ORDER), no acknowledged message delivered again
// (RESURRECTED); duplicates are counted (delivery is at least once).
//
// Publishers and receivers use the public SDK (package client) and retry
// a lost answer the way it does, with the same message_id, the same
// receive attempt id and the same receipt handles, through 429, 503 and
// connection errors for as long as the run lasts, so that a server may be
// killed and restarted under the load: the verdict is about the bus.
package loadcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sombus/sombus/client"
)

// Config is one run. URL and either APIKey (an operator's, or a key that
// may create a workspace) or the four client credentials are required;
// the rest have defaults.
type Config struct {
	// URL is the bus's base URL.
	URL string
	// APIKey creates a workspace, a producer and a consumer connection
	// (tier "unlimited" when the key may set it) and removes the
	// connections after the run unless Keep.
	APIKey string
	Keep   bool
	// Existing connections instead of APIKey: the consumer must subscribe
	// to the topic "som." + MessageType, with an attempt limit high
	// enough for NackRatio.
	WorkspaceID                string
	ProducerID, ProducerSecret string
	ConsumerID, ConsumerSecret string

	// Publishers and Receivers are the concurrent clients (default 8 each).
	Publishers, Receivers int
	// Stories the messages are spread over (default 1000): message i is
	// message i/Stories of story i%Stories; each story belongs to one
	// publisher, which publishes its messages in sequence.
	Stories int
	// Messages to publish in all; 0 with Duration publishes until Duration
	// has passed.
	Messages int
	Duration time.Duration
	// PayloadSize is the payload's size in bytes, about (default 1024).
	PayloadSize int
	// BatchSize is the envelopes per publish request (1 to 100, default 1:
	// single publishes).
	BatchSize int
	// ReceiveMax, ReceiveWait and Visibility are the receive's max (1 to
	// 10, default 10), wait (default 1 s) and visibility (default 30 s).
	ReceiveMax  int
	ReceiveWait time.Duration
	Visibility  time.Duration
	// NackRatio is the share of deliveries released (nack, no delay)
	// instead of acknowledged, at random (0 to 1).
	NackRatio float64
	// Rate is the target of publishes a second in all; 0 is flat out.
	Rate float64
	// DrainTimeout bounds the drain after the last publish (default 2 min).
	DrainTimeout time.Duration
	// Quiet is how long the receivers go on after the drain, to catch
	// messages that come back (default 1 s).
	Quiet time.Duration
	// MessageType of the envelopes (default "loadcheck.load").
	MessageType string

	// Progress, when set, is called every ProgressEvery (default 1 s);
	// ProgressWriter, when set, gets a line of text at the same times.
	Progress       func(Progress)
	ProgressWriter io.Writer
	ProgressEvery  time.Duration
	// HTTPClient sends every request; nil is one with enough connections
	// for the clients.
	HTTPClient *http.Client
	// RequestTimeout bounds one attempt of a request (a receive gets its
	// wait on top); default 10 s.
	RequestTimeout time.Duration
}

// Limits of a Config.
const (
	maxClients     = 1000
	maxPayloadSize = 200 << 10
)

func (c *Config) fill() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Publishers, 8)
	def(&c.Receivers, 8)
	def(&c.Stories, 1000)
	def(&c.PayloadSize, 1024)
	def(&c.BatchSize, 1)
	def(&c.ReceiveMax, 10)
	if c.ReceiveWait == 0 {
		c.ReceiveWait = time.Second
	}
	if c.Visibility == 0 {
		c.Visibility = 30 * time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 2 * time.Minute
	}
	if c.Quiet == 0 {
		c.Quiet = time.Second
	}
	if c.MessageType == "" {
		c.MessageType = "loadcheck.load"
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = time.Second
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Second
	}
	switch {
	case c.URL == "":
		return errors.New("loadcheck: URL is required")
	case c.APIKey == "" && (c.ProducerID == "" || c.ProducerSecret == "" || c.ConsumerID == "" || c.ConsumerSecret == ""):
		return errors.New("loadcheck: an API key, or a producer's and a consumer's client id and secret, are required")
	case c.Publishers < 1 || c.Publishers > maxClients:
		return fmt.Errorf("loadcheck: publishers must be 1 to %d (got %d)", maxClients, c.Publishers)
	case c.Receivers < 1 || c.Receivers > maxClients:
		return fmt.Errorf("loadcheck: receivers must be 1 to %d (got %d)", maxClients, c.Receivers)
	case c.Stories < 1:
		return fmt.Errorf("loadcheck: stories must be at least 1 (got %d)", c.Stories)
	case c.Messages < 0 || c.Duration < 0:
		return errors.New("loadcheck: messages and duration must not be negative")
	case c.Messages == 0 && c.Duration == 0:
		return errors.New("loadcheck: give a message count or a duration")
	case c.PayloadSize < 0 || c.PayloadSize > maxPayloadSize:
		return fmt.Errorf("loadcheck: payload size must be 0 to %d bytes (got %d)", maxPayloadSize, c.PayloadSize)
	case c.BatchSize < 1 || c.BatchSize > client.MaxBatchMessages:
		return fmt.Errorf("loadcheck: batch size must be 1 to %d (got %d)", client.MaxBatchMessages, c.BatchSize)
	case c.BatchSize*(c.PayloadSize+512) > client.MaxBatchBytes-4096:
		return fmt.Errorf("loadcheck: batch size × payload size must stay under the %d-byte batch limit", client.MaxBatchBytes)
	case c.ReceiveMax < 1 || c.ReceiveMax > client.MaxReceive:
		return fmt.Errorf("loadcheck: receive max must be 1 to %d (got %d)", client.MaxReceive, c.ReceiveMax)
	case c.ReceiveWait < 0 || c.ReceiveWait > client.MaxWait:
		return fmt.Errorf("loadcheck: receive wait must be 0 to %s (got %s)", client.MaxWait, c.ReceiveWait)
	case c.Visibility < time.Second || c.Visibility > client.MaxVisibility:
		return fmt.Errorf("loadcheck: visibility must be 1s to %s (got %s)", client.MaxVisibility, c.Visibility)
	case c.NackRatio < 0 || c.NackRatio >= 1:
		return fmt.Errorf("loadcheck: nack ratio must be 0 to less than 1 (got %g)", c.NackRatio)
	case c.Rate < 0:
		return fmt.Errorf("loadcheck: rate must not be negative (got %g)", c.Rate)
	case c.DrainTimeout < 0 || c.Quiet < 0 || c.ProgressEvery < 0 || c.RequestTimeout < 0:
		return errors.New("loadcheck: drain timeout, quiet period, progress interval and request timeout must not be negative")
	}
	return nil
}

// Progress is a snapshot of a running run.
type Progress struct {
	Elapsed time.Duration
	// Phase is "publish", "drain" or "quiet".
	Phase string
	Counts
	// PublishRate and DeliveryRate are the last interval's, a second.
	PublishRate, DeliveryRate float64
	// Backlog is accepted and not yet acknowledged.
	Backlog int64
	// Errors are the failed requests (retried) by rule.
	Errors int64
}

// String is the progress line.
func (p Progress) String() string {
	v := p.Violations[RuleLost] + p.Violations[RuleOrder] + p.Violations[RuleResurrected]
	return fmt.Sprintf("%6.1fs %-7s published %d (%.0f/s) delivered %d (%.0f/s) acked %d backlog %d duplicates %d errors %d violations %d",
		p.Elapsed.Seconds(), p.Phase, p.Accepted, p.PublishRate, p.Delivered, p.DeliveryRate, p.Acked, p.Backlog, p.Duplicates, p.Errors, v)
}

// Latency sums up durations, in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// Report is a run's result.
type Report struct {
	Workspace string `json:"workspace"`
	Producer  string `json:"producer"`
	Consumer  string `json:"consumer"`
	// QuotaTier is the connections' tier when the run created them.
	QuotaTier string `json:"quota_tier,omitempty"`
	// Removed says whether the run removed the connections it created.
	Removed bool `json:"removed"`

	Config struct {
		Publishers  int     `json:"publishers"`
		Receivers   int     `json:"receivers"`
		Stories     int     `json:"stories"`
		Messages    int     `json:"messages"`
		Duration    string  `json:"duration,omitempty"`
		PayloadSize int     `json:"payload_size"`
		BatchSize   int     `json:"batch_size"`
		ReceiveMax  int     `json:"receive_max"`
		ReceiveWait string  `json:"receive_wait"`
		Visibility  string  `json:"visibility"`
		NackRatio   float64 `json:"nack_ratio"`
		Rate        float64 `json:"rate"`
	} `json:"config"`

	Started time.Time `json:"started"`
	// PublishSeconds is the publish phase, TotalSeconds the whole run
	// through the drain.
	PublishSeconds float64 `json:"publish_seconds"`
	TotalSeconds   float64 `json:"total_seconds"`

	Accepted   int64 `json:"accepted"`
	Delivered  int64 `json:"delivered"`
	Deliveries int64 `json:"deliveries"`
	Duplicates int64 `json:"duplicates"`
	Acked      int64 `json:"acked"`
	Nacked     int64 `json:"nacked"`
	// StaleHandles are settlements refused per handle (the message was
	// received again since, or dead-lettered).
	StaleHandles int64 `json:"stale_handles"`
	// Foreign are messages of other runs found in the queue (acknowledged,
	// not checked).
	Foreign int64 `json:"foreign"`
	Drained bool  `json:"drained"`

	// PublishRate is accepted messages a second over the publish phase;
	// DeliveryRate first deliveries a second from the start to the last.
	PublishRate  float64 `json:"publish_rate"`
	DeliveryRate float64 `json:"delivery_rate"`

	// EndToEnd is from the publish's sending to the first delivery's
	// answer; Publish, Receive (receives that returned messages) and Ack
	// are request latencies, retries included.
	EndToEnd Latency `json:"end_to_end"`
	Publish  Latency `json:"publish"`
	Receive  Latency `json:"receive"`
	Ack      Latency `json:"ack"`

	// Errors are failed requests (then retried) by rule ("network" for a
	// lost answer, "http.NNN" for an answer without a rule).
	Errors map[string]int64 `json:"errors"`
	// Violations by rule: LOST, ORDER, RESURRECTED.
	Violations map[string]int64 `json:"violations"`
	Examples   []string         `json:"examples,omitempty"`
	// Verdict is "OK" when no rule was violated, else "FAIL".
	Verdict string `json:"verdict"`
}

// OK reports whether the verdict is OK.
func (r *Report) OK() bool { return r.Verdict == "OK" }

// run is one Run's state.
type run struct {
	cfg     Config
	id      string
	prefix  string
	ck      *Checker
	prod    *client.Producer
	cons    *client.Consumer
	start   time.Time
	pad     string
	claimed atomic.Int64 // messages claimed by publishers (rate pacing)

	mu                     sync.Mutex
	errs                   map[string]int64
	nerrs                  int64
	e2e, pub, recv, ack    histogram
	nacked, stale, foreign int64
	lastFirst, publishEnd  time.Time
	phase                  string
}

// Run runs the load and the checks; the report is returned with an error
// too when the run started. ctx ends the run early (the report then tells
// what was seen).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, ck: NewChecker(), errs: map[string]int64{}, phase: "publish"}
	r.id = strings.ToLower(client.NewAttemptID()[4:14])
	r.prefix = "lc-" + r.id + "-"
	r.pad = strings.Repeat("x", max(0, cfg.PayloadSize-60))
	hc := cfg.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = cfg.Publishers + cfg.Receivers + 4
		hc = &http.Client{Transport: tr}
		defer tr.CloseIdleConnections()
	}
	rep := &Report{Errors: map[string]int64{}}
	var cleanup func()
	if err := r.setup(ctx, hc, rep, &cleanup); err != nil {
		return nil, err
	}
	if cleanup != nil {
		defer cleanup()
	}
	err := r.load(ctx)
	r.report(rep)
	return rep, err
}

// setup creates the workspace and connections (with an API key) and the
// SDK clients.
func (r *run) setup(ctx context.Context, hc *http.Client, rep *Report, cleanup *func()) error {
	cfg := &r.cfg
	ws, prodID, prodSecret, consID, consSecret := cfg.WorkspaceID, cfg.ProducerID, cfg.ProducerSecret, cfg.ConsumerID, cfg.ConsumerSecret
	if prodID == "" {
		m := &client.Manager{BaseURL: cfg.URL, APIKey: cfg.APIKey, HTTPClient: hc, UserAgent: "sombus-loadcheck"}
		w, err := m.CreateWorkspace(ctx, "loadcheck "+r.id)
		if err != nil {
			return fmt.Errorf("loadcheck: create the workspace: %w", err)
		}
		ws = w.ID
		tier := "unlimited"
		create := func(kind string, extra client.ConnectionParams) (*client.Connection, error) {
			p := extra
			p.Kind, p.Name = kind, client.Ptr("loadcheck "+kind+" "+r.id)
			if tier != "" {
				p.QuotaTier = client.Ptr(tier)
			}
			c, err := m.CreateConnection(ctx, ws, p)
			var e *client.Error
			if err != nil && tier != "" && errors.As(err, &e) && e.Status >= 400 && e.Status < 500 {
				// The key may not set that tier, or the server has none
				// by that name: the default tier.
				tier, p.QuotaTier = "", nil
				c, err = m.CreateConnection(ctx, ws, p)
			}
			return c, err
		}
		prod, err := create("producer", client.ConnectionParams{})
		if err != nil {
			return fmt.Errorf("loadcheck: create the producer connection: %w", err)
		}
		cons, err := create("consumer", client.ConnectionParams{
			AttemptLimit:  client.Ptr(1000),
			Subscriptions: &[]client.Subscription{{Topic: "som." + cfg.MessageType}},
		})
		if err != nil {
			_ = m.RemoveConnection(ctx, ws, prod.ID)
			return fmt.Errorf("loadcheck: create the consumer connection: %w", err)
		}
		rep.QuotaTier = cons.QuotaTier
		if !cfg.Keep {
			*cleanup = func() {
				c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer cancel()
				e1 := m.RemoveConnection(c, ws, prod.ID)
				e2 := m.RemoveConnection(c, ws, cons.ID)
				rep.Removed = e1 == nil && e2 == nil
			}
		}
		ps, err := m.IssueSecret(ctx, ws, prod.ID)
		if err != nil {
			return fmt.Errorf("loadcheck: issue the producer's secret: %w", err)
		}
		cs, err := m.IssueSecret(ctx, ws, cons.ID)
		if err != nil {
			return fmt.Errorf("loadcheck: issue the consumer's secret: %w", err)
		}
		prodID, prodSecret, consID, consSecret = ps.ClientID, ps.ClientSecret, cs.ClientID, cs.ClientSecret
	}
	base := client.Config{BaseURL: cfg.URL, WorkspaceID: ws, HTTPClient: hc, RequestTimeout: cfg.RequestTimeout,
		UserAgent: "sombus-loadcheck", MaxRetries: -1}
	pc, cc := base, base
	pc.ClientID, pc.ClientSecret = prodID, prodSecret
	cc.ClientID, cc.ClientSecret = consID, consSecret
	var err error
	if r.prod, err = client.NewProducer(pc); err != nil {
		return err
	}
	if r.cons, err = client.NewConsumer(cc); err != nil {
		return err
	}
	if ws == "" {
		if ws, err = r.prod.Workspace(ctx); err != nil {
			return err
		}
	}
	rep.Workspace, rep.Producer, rep.Consumer = ws, prodID, consID
	return nil
}

// load publishes, drains and waits for the quiet period.
func (r *run) load(ctx context.Context) error {
	cfg := r.cfg
	r.start = time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fatal := make(chan error, cfg.Publishers+cfg.Receivers)

	progressDone := make(chan struct{})
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() { defer pwg.Done(); r.progress(progressDone) }()
	defer func() { close(progressDone); pwg.Wait() }()

	var pubs sync.WaitGroup
	for p := range cfg.Publishers {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			if err := r.publisher(ctx, p); err != nil {
				fatal <- err
			}
		}()
	}
	recvCtx, stopRecv := context.WithCancel(ctx)
	defer stopRecv()
	var recvs sync.WaitGroup
	for range cfg.Receivers {
		recvs.Add(1)
		go func() {
			defer recvs.Done()
			if err := r.receiver(recvCtx); err != nil {
				fatal <- err
			}
		}()
	}
	published := make(chan struct{})
	go func() { pubs.Wait(); close(published) }()

	var err error
	select {
	case <-published:
	case err = <-fatal:
	case <-ctx.Done():
	}
	r.pubDone()
	if err == nil && ctx.Err() == nil {
		r.setPhase("drain")
		drain := time.NewTimer(cfg.DrainTimeout)
		tick := time.NewTicker(50 * time.Millisecond)
	wait:
		for !r.ck.Drained() {
			select {
			case <-tick.C:
			case err = <-fatal:
				break wait
			case <-drain.C:
				break wait
			case <-ctx.Done():
				break wait
			}
		}
		drain.Stop()
		tick.Stop()
		if err == nil && ctx.Err() == nil {
			// Quiet: the receivers go on a little; whatever still comes
			// back is checked (an acknowledged message must not).
			r.setPhase("quiet")
			select {
			case <-time.After(cfg.Quiet):
			case err = <-fatal:
			case <-ctx.Done():
			}
		}
	}
	stopRecv()
	recvs.Wait()
	cancel()
	pubs.Wait()
	if err == nil {
		select {
		case err = <-fatal:
		default:
		}
	}
	return err
}

// pubDone ends the publish phase.
func (r *run) pubDone() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.publishEnd.IsZero() {
		r.publishEnd = time.Now()
	}
}

func (r *run) setPhase(p string) {
	r.mu.Lock()
	r.phase = p
	r.mu.Unlock()
}
