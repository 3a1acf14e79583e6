package client

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sombus/sombus/internal/jsonenc"
)

// The pull API's limits and defaults.
const (
	MaxReceive            = 10
	MaxWait               = 20 * time.Second
	DefaultVisibility     = 60 * time.Second
	MaxVisibility         = 12 * time.Hour
	MaxSettleHandles      = 10
	MaxNackDelay          = 12 * time.Hour
	attemptIDRandomLength = 20
)

// Message is a received message. Its fields are the pull API's; the
// envelope's message_id, som_version and payload are read out of Envelope.
type Message struct {
	// ReceiptHandle acknowledges or releases this delivery (only this one).
	ReceiptHandle string `json:"receipt_handle"`
	MessageType   string `json:"message_type"`
	// CorrelationID is the message's story.
	CorrelationID string `json:"correlation_id"`
	Topic         string `json:"topic"`
	ProducerID    string `json:"producer_id"`
	// ReceiveCount counts deliveries of this message, this one included.
	ReceiveCount int       `json:"receive_count"`
	EnqueuedAt   time.Time `json:"enqueued_at"`
	// Envelope is the producer's envelope byte for byte as accepted.
	Envelope json.RawMessage `json:"envelope"`

	// MessageID is the envelope's message_id.
	MessageID string `json:"-"`
	// SomVersion is the envelope's som_version.
	SomVersion string `json:"-"`
	// Payload is the envelope's payload (a JSON object).
	Payload json.RawMessage `json:"-"`
}

// UnmarshalJSON reads a message of the pull API and its envelope's fields.
func (m *Message) UnmarshalJSON(b []byte) error {
	type wire Message
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*m = Message(w)
	var env struct {
		SomVersion string          `json:"som_version"`
		MessageID  string          `json:"message_id"`
		Payload    json.RawMessage `json:"payload"`
	}
	if len(m.Envelope) > 0 {
		if err := json.Unmarshal(m.Envelope, &env); err != nil {
			return fmt.Errorf("envelope: %w", err)
		}
	}
	m.MessageID, m.SomVersion, m.Payload = env.MessageID, env.SomVersion, env.Payload
	return nil
}

// MarshalJSON writes the message as the pull API does (times with
// milliseconds, the envelope as accepted).
func (m Message) MarshalJSON() ([]byte, error) {
	type wire Message
	return jsonenc.Marshal(struct {
		wire
		EnqueuedAt string `json:"enqueued_at"`
	}{wire(m), m.EnqueuedAt.UTC().Format("2006-01-02T15:04:05.000Z")})
}

// DecodePayload decodes the envelope's payload into v.
func (m *Message) DecodePayload(v any) error {
	if len(m.Payload) == 0 {
		return errors.New("sombus: the envelope has no payload")
	}
	return json.Unmarshal(m.Payload, v)
}

// ReceiveOptions tune one receive. Zero values are the bus's defaults.
type ReceiveOptions struct {
	// Max is the most messages to receive, 1 to 10; 0 is 10.
	Max int
	// Wait is the long poll: how long to wait for a message when none is
	// ready, up to 20 s (whole seconds). 0 is 20 s; NoWait answers at once.
	Wait time.Duration
	// Visibility is how long the received messages stay hidden from other
	// receives, up to 12 h (whole seconds). 0 is 60 s; a negative value
	// asks for 0.
	Visibility time.Duration
	// AttemptID identifies the receive attempt: a retry with the same id
	// within five minutes returns the same messages (and handles) if the
	// answer was lost. "" is a new random id for this call, which the SDK
	// reuses for its own retries.
	AttemptID string
}

// NoWait is a ReceiveOptions.Wait that answers at once.
const NoWait time.Duration = -1

// seconds rounds d up to whole seconds.
func seconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

// NewAttemptID returns a random receive attempt id.
func NewAttemptID() string {
	var b [attemptIDRandomLength]byte
	_, _ = rand.Read(b[:])
	return "sdk-" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])
}

// HandleFailure is a receipt handle that Ack or Nack could not settle.
type HandleFailure struct {
	ReceiptHandle string `json:"receipt_handle"`
	// Code is CodeReceiptHandleIsInvalid: the handle is malformed, from
	// another queue, or of a delivery that is no longer the message's
	// latest (it was received again, or moved to the dead-letter queue).
	Code    string `json:"code"`
	Message string `json:"message"`
}

// SettleResult is the answer of Ack or Nack: each handle succeeds or fails
// on its own.
type SettleResult struct {
	// Settled are the handles acknowledged (Ack) or released (Nack).
	Settled []string
	// Failed are the others, with the reason.
	Failed []HandleFailure
}

// Skills are the skill registrations the workspace bound to a consumer.
type Skills struct {
	Registrations []SkillRegistration `json:"registrations"`
	// UpdatedAt is zero when none were ever set.
	UpdatedAt time.Time `json:"-"`
}

// UnmarshalJSON reads updated_at, which is null when never set.
func (s *Skills) UnmarshalJSON(b []byte) error {
	var w struct {
		Registrations []SkillRegistration `json:"registrations"`
		UpdatedAt     *time.Time          `json:"updated_at"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	s.Registrations = w.Registrations
	if w.UpdatedAt != nil {
		s.UpdatedAt = *w.UpdatedAt
	}
	return nil
}

// MarshalJSON writes updated_at as the API does.
func (s Skills) MarshalJSON() ([]byte, error) {
	regs := s.Registrations
	if regs == nil {
		regs = []SkillRegistration{}
	}
	var at *string
	if !s.UpdatedAt.IsZero() {
		v := s.UpdatedAt.UTC().Format("2006-01-02T15:04:05.000Z")
		at = &v
	}
	return jsonenc.Marshal(struct {
		Registrations []SkillRegistration `json:"registrations"`
		UpdatedAt     *string             `json:"updated_at"`
	}{regs, at})
}

// SkillRegistration is one configured skill instance.
type SkillRegistration struct {
	InstanceID     string          `json:"instance_id"`
	Skill          string          `json:"skill"`
	Name           string          `json:"name"`
	Values         json.RawMessage `json:"values"`
	AuthorityScale int             `json:"authority_scale"`
}

// Consumer reads one consumer connection's queue.
type Consumer struct {
	*Client
}

// NewConsumer returns a Consumer for the consumer connection of cfg (its
// client id is the queue's {c}).
func NewConsumer(cfg Config) (*Consumer, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return &Consumer{c}, nil
}

// Receive receives up to opts.Max messages, long-polling up to opts.Wait.
// It answers as soon as at least one message is ready, with none when the
// wait ran out. A lost answer (a network error or a timeout) is retried
// with the same attempt id, so the same messages come back with the same
// receipt handles; 429 and 503 are retried after Retry-After.
func (c *Consumer) Receive(ctx context.Context, opts ReceiveOptions) ([]Message, error) {
	q := url.Values{}
	if opts.Max != 0 {
		if opts.Max < 1 || opts.Max > MaxReceive {
			return nil, fmt.Errorf("sombus: ReceiveOptions.Max must be 1 to %d (got %d)", MaxReceive, opts.Max)
		}
		q.Set("max", strconv.Itoa(opts.Max))
	}
	wait := MaxWait
	switch {
	case opts.Wait < 0:
		wait = 0
	case opts.Wait > 0:
		wait = min(opts.Wait, MaxWait)
	}
	q.Set("wait", strconv.Itoa(seconds(wait)))
	switch {
	case opts.Visibility < 0:
		q.Set("visibility", "0")
	case opts.Visibility > 0:
		q.Set("visibility", strconv.Itoa(seconds(min(opts.Visibility, MaxVisibility))))
	}
	attempt := opts.AttemptID
	if attempt == "" {
		attempt = NewAttemptID()
	}
	q.Set("attempt", attempt)
	path, err := c.tenantPath(ctx, "/consumers/"+pathEscape(c.cfg.ClientID)+"/messages")
	if err != nil {
		return nil, err
	}
	var out struct {
		Messages []Message `json:"messages"`
	}
	err = c.t.do(ctx, call{method: http.MethodGet, path: path, query: q, extra: time.Duration(seconds(wait)) * time.Second, idempotent: true}, &out)
	if err != nil {
		return nil, err
	}
	return out.Messages, nil
}

// Ack acknowledges messages by their receipt handles: they are removed.
// More than 10 handles are sent in several requests; repeated handles are
// sent once. Each handle succeeds or fails on its own (see SettleResult).
func (c *Consumer) Ack(ctx context.Context, handles ...string) (*SettleResult, error) {
	return c.settle(ctx, "ack", handles, nil)
}

// Nack releases messages: they become visible again after delay (whole
// seconds, 0 to 12 h; 0 is at once). A release does not count as a
// delivery; the next receive does.
func (c *Consumer) Nack(ctx context.Context, handles []string, delay time.Duration) (*SettleResult, error) {
	if delay < 0 || delay > MaxNackDelay {
		return nil, fmt.Errorf("sombus: a release delay is 0 to %s (got %s)", MaxNackDelay, delay)
	}
	d := seconds(delay)
	return c.settle(ctx, "nack", handles, &d)
}

func (c *Consumer) settle(ctx context.Context, verb string, handles []string, delay *int) (*SettleResult, error) {
	res := &SettleResult{Settled: []string{}, Failed: []HandleFailure{}}
	seen := make(map[string]bool, len(handles))
	var uniq []string
	for _, h := range handles {
		if !seen[h] {
			seen[h] = true
			uniq = append(uniq, h)
		}
	}
	if len(uniq) == 0 {
		return res, nil
	}
	path, err := c.tenantPath(ctx, "/consumers/"+pathEscape(c.cfg.ClientID)+"/"+verb)
	if err != nil {
		return nil, err
	}
	for len(uniq) > 0 {
		n := min(len(uniq), MaxSettleHandles)
		chunk := uniq[:n]
		uniq = uniq[n:]
		body := map[string]any{"receipt_handles": chunk}
		if delay != nil {
			body["delay_seconds"] = *delay
		}
		var out struct {
			Acked  []string        `json:"acked"`
			Nacked []string        `json:"nacked"`
			Failed []HandleFailure `json:"failed"`
		}
		// Acknowledging and releasing the same delivery again is harmless,
		// so a lost answer is retried.
		if err := c.t.do(ctx, call{method: http.MethodPost, path: path, body: body, idempotent: true}, &out); err != nil {
			return res, err
		}
		res.Settled = append(res.Settled, out.Acked...)
		res.Settled = append(res.Settled, out.Nacked...)
		res.Failed = append(res.Failed, out.Failed...)
	}
	return res, nil
}

// Skills reads the skill registrations the workspace bound to this
// consumer connection. A 503 skills.unavailable is retried after
// Retry-After; when it persists, keep what you read last.
func (c *Consumer) Skills(ctx context.Context) (*Skills, error) {
	path, err := c.tenantPath(ctx, "/consumers/"+pathEscape(c.cfg.ClientID)+"/skills")
	if err != nil {
		return nil, err
	}
	var s Skills
	if err := c.t.do(ctx, call{method: http.MethodGet, path: path, idempotent: true}, &s); err != nil {
		return nil, err
	}
	if s.Registrations == nil {
		s.Registrations = []SkillRegistration{}
	}
	return &s, nil
}
