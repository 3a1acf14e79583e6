package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/sombus/sombus/internal/jsonenc"
)

// SomVersion is the envelope version the SDK writes when Envelope.SomVersion
// is empty.
const SomVersion = "1.0.0"

// Batch limits of POST …/messages/batch.
const (
	MaxBatchMessages = 100
	MaxBatchBytes    = 1 << 20
	MaxEnvelopeBytes = 256 << 10
)

// Envelope is a message to publish. The topic is "som." + MessageType;
// consumers receive the messages of one CorrelationID (a story) in the
// order the bus accepted them.
type Envelope struct {
	// SomVersion is MAJOR.MINOR.PATCH with major 1; "" is SomVersion.
	SomVersion string `json:"som_version"`
	// MessageID identifies the message (1 to 128 printable ASCII
	// characters); "" is a new random id. The bus accepts the same id from
	// the same producer within 5 minutes again without delivering it again,
	// so a publish whose answer was lost is safe to retry with the same id.
	MessageID string `json:"message_id"`
	// MessageType is dot-separated segments of [a-z0-9_-], such as
	// "story.context".
	MessageType string `json:"message_type"`
	// CorrelationID is the story the message belongs to.
	CorrelationID string `json:"correlation_id"`
	// Payload must marshal to a JSON object (a struct, a map, or a
	// json.RawMessage holding an object).
	Payload any `json:"payload"`
}

// PublishResult is the bus's answer for one envelope.
type PublishResult struct {
	Accepted   bool        `json:"accepted"`
	MessageID  string      `json:"message_id,omitempty"`
	Topic      string      `json:"topic,omitempty"`
	Deliveries int         `json:"deliveries"`
	Duplicate  bool        `json:"duplicate,omitempty"`
	Violations []Violation `json:"violations,omitempty"`
}

// Err returns the refusal of an envelope a batch did not accept (an *Error
// with status 400 and its violations), or nil when it was accepted.
func (r PublishResult) Err() error {
	if r.Accepted {
		return nil
	}
	return &Error{Status: http.StatusBadRequest, Violations: r.Violations, Method: http.MethodPost, Path: "messages/batch"}
}

// Producer publishes envelopes as one producer connection.
type Producer struct {
	*Client
}

// NewProducer returns a Producer for the producer connection of cfg.
func NewProducer(cfg Config) (*Producer, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return &Producer{c}, nil
}

// encode fills the defaults of e and marshals it.
func (e Envelope) encode() (json.RawMessage, error) {
	if e.SomVersion == "" {
		e.SomVersion = SomVersion
	}
	if e.MessageID == "" {
		e.MessageID = NewMessageID()
	}
	if e.Payload == nil {
		e.Payload = struct{}{}
	}
	b, err := jsonenc.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("sombus: encode envelope: %w", err)
	}
	return b, nil
}

// NewMessageID returns a random message id (a UUID version 4).
func NewMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Publish publishes one envelope. A refusal is an *Error carrying every
// violation (400 envelope.*, 413 envelope.too_large, 401/403/429 …).
// Accepted duplicates (the same message id within 5 minutes) answer with
// Duplicate set. 429/503 answers and lost answers are retried (the bus
// drops the repeat by its message id).
func (p *Producer) Publish(ctx context.Context, env Envelope) (*PublishResult, error) {
	raw, err := env.encode()
	if err != nil {
		return nil, err
	}
	return p.PublishRaw(ctx, raw)
}

// PublishRaw publishes an envelope given as JSON, sent byte for byte (the
// bus keeps it as accepted). Retries after a lost answer are safe only when
// the envelope has a message_id, which the bus requires anyway.
func (p *Producer) PublishRaw(ctx context.Context, envelope json.RawMessage) (*PublishResult, error) {
	path, err := p.tenantPath(ctx, "/messages")
	if err != nil {
		return nil, err
	}
	var r PublishResult
	if err := p.t.do(ctx, call{method: http.MethodPost, path: path, body: envelope, idempotent: true}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// PublishBatch publishes up to 100 envelopes (1 MiB in all) in one request
// and returns one result per envelope, in order: each accepted, or refused
// with its violations (see PublishResult.Err). The accepted ones are
// accepted in slice order. An error is returned only when the whole request
// was refused or failed.
func (p *Producer) PublishBatch(ctx context.Context, envs []Envelope) ([]PublishResult, error) {
	raws := make([]json.RawMessage, len(envs))
	for i, e := range envs {
		r, err := e.encode()
		if err != nil {
			return nil, fmt.Errorf("envelope %d: %w", i, err)
		}
		raws[i] = r
	}
	return p.PublishBatchRaw(ctx, raws)
}

// PublishBatchRaw is PublishBatch with envelopes given as JSON.
func (p *Producer) PublishBatchRaw(ctx context.Context, envs []json.RawMessage) ([]PublishResult, error) {
	if len(envs) == 0 || len(envs) > MaxBatchMessages {
		return nil, fmt.Errorf("sombus: a batch holds 1 to %d envelopes (got %d)", MaxBatchMessages, len(envs))
	}
	for i, e := range envs {
		if !json.Valid(e) {
			return nil, fmt.Errorf("sombus: envelope %d is not valid JSON", i)
		}
	}
	path, err := p.tenantPath(ctx, "/messages/batch")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteString(`{"messages":[`)
	for i, e := range envs {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(e)
	}
	buf.WriteString("]}")
	var out struct {
		Results []PublishResult `json:"results"`
	}
	if err := p.t.do(ctx, call{method: http.MethodPost, path: path, body: buf.Bytes(), idempotent: true}, &out); err != nil {
		return nil, err
	}
	if len(out.Results) != len(envs) {
		return out.Results, errors.New("sombus: the bus answered a batch with a different number of results")
	}
	return out.Results, nil
}
