// Package floor is the yardstick of the message-path benchmarks: a bare
// net/http server that answers the requests of the pull API's message path
// with answers of the same shape and about the same size as a sombus
// node's, and does nothing else. It parses every request body as JSON
// (each envelope of a batch too), keeps the accepted envelopes in memory in
// one first-in first-out queue, hands them out with receipt handles and
// forgets them on ack. It does not check tokens, keep order per story, time
// out deliveries, write anything to disk or keep anything over a restart.
//
// Its rates are what the machine can do for the same HTTP and JSON work
// with no bus behind it: the benchmarks report sombus's rates as ratios to
// the floor's, measured in the same run.
//
// Routes (tenant and consumer ids are ignored; there is one queue):
//
//	POST /v1/tenants/{t}/messages                 one envelope; 202 {accepted, message_id, topic, deliveries}
//	POST /v1/tenants/{t}/messages/batch           {"messages": [envelope, …]}; 200 {"results": […]}
//	GET  /v1/tenants/{t}/consumers/{c}/messages   ?max=1..10&wait=0..20; 200 {"messages": […]}
//	POST /v1/tenants/{t}/consumers/{c}/ack        {"receipt_handles": […]}; 200 {"acked": […], "failed": […]}
package floor

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Body limits, as a sombus node's.
const (
	maxPublish = 256 << 10
	maxBatch   = 1 << 20
	maxSettle  = 64 << 10
	maxReceive = 10
	maxWait    = 20
	// handleSize is the raw size of a receipt handle; base64 makes it 96
	// characters, as long as a sombus node's.
	handleSize = 72
)

// producerID is written into every message, as long as a connection id.
const producerID = "cfloorfloorfloorfloorfloorfl"

type stored struct {
	seq           uint64
	messageType   string
	correlationID string
	enqueuedAt    time.Time
	envelope      json.RawMessage // the body, byte for byte
}

// Server is the floor's handler and its in-memory queue.
type Server struct {
	mu       sync.Mutex
	seq      uint64
	ready    []*stored
	inFlight map[uint64]*stored
	// wake is closed (and replaced) when a publish makes messages ready
	// and receives wait on it (waiting).
	wake    chan struct{}
	waiting bool
	mux     *http.ServeMux
}

// New returns a floor server with an empty queue.
func New() *Server {
	s := &Server{inFlight: map[uint64]*stored{}, wake: make(chan struct{}), mux: http.NewServeMux()}
	s.mux.HandleFunc("POST /v1/tenants/{t}/messages", s.publish)
	s.mux.HandleFunc("POST /v1/tenants/{t}/messages/batch", s.publishBatch)
	s.mux.HandleFunc("GET /v1/tenants/{t}/consumers/{c}/messages", s.receive)
	s.mux.HandleFunc("POST /v1/tenants/{t}/consumers/{c}/ack", s.ack)
	return s
}

// ServeHTTP serves the four routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Len is the number of messages queued (ready or in flight).
func (s *Server) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ready) + len(s.inFlight)
}

// Listen serves a new floor server on addr ("127.0.0.1:0" for a free
// port) until ctx ends; it returns the base URL.
func Listen(ctx context.Context, addr string) (string, *Server, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return "", nil, err
	}
	s := New()
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	return "http://" + l.Addr().String(), s, nil
}

type envelope struct {
	SomVersion    string          `json:"som_version"`
	MessageID     string          `json:"message_id"`
	MessageType   string          `json:"message_type"`
	CorrelationID string          `json:"correlation_id"`
	Payload       json.RawMessage `json:"payload"`
}

type violation struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

type result struct {
	Accepted   bool        `json:"accepted"`
	MessageID  string      `json:"message_id,omitempty"`
	Topic      string      `json:"topic,omitempty"`
	Deliveries int         `json:"deliveries,omitempty"`
	Violations []violation `json:"violations,omitempty"`
}

func headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("RateLimit-Limit", "1000000000")
	h.Set("RateLimit-Remaining", "1000000000")
	h.Set("RateLimit-Reset", "0")
}

func answer(w http.ResponseWriter, status int, v any) {
	headers(w)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func refuse(w http.ResponseWriter, status int, rule, msg string) {
	answer(w, status, result{Violations: []violation{{rule, msg}}})
}

// accept checks one envelope and queues a copy of it.
func (s *Server) accept(body []byte, now time.Time) result {
	var e envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return result{Violations: []violation{{"envelope.malformed", err.Error()}}}
	}
	if e.SomVersion == "" || e.MessageID == "" || e.MessageType == "" || e.CorrelationID == "" || len(e.Payload) == 0 || e.Payload[0] != '{' {
		return result{Violations: []violation{{"envelope.malformed", "som_version, message_id, message_type, correlation_id and an object payload are required"}}}
	}
	m := &stored{messageType: e.MessageType, correlationID: e.CorrelationID, enqueuedAt: now, envelope: append(json.RawMessage(nil), body...)}
	s.mu.Lock()
	s.seq++
	m.seq = s.seq
	s.ready = append(s.ready, m)
	s.mu.Unlock()
	return result{Accepted: true, MessageID: e.MessageID, Topic: "som." + e.MessageType, Deliveries: 1}
}

// woken wakes the waiting receives, if any.
func (s *Server) woken() {
	s.mu.Lock()
	if s.waiting {
		close(s.wake)
		s.wake, s.waiting = make(chan struct{}), false
	}
	s.mu.Unlock()
}

func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		refuse(w, http.StatusRequestEntityTooLarge, "envelope.too_large", err.Error())
		return nil, false
	}
	return b, true
}

func (s *Server) publish(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r, maxPublish)
	if !ok {
		return
	}
	res := s.accept(body, time.Now())
	if !res.Accepted {
		answer(w, http.StatusBadRequest, res)
		return
	}
	s.woken()
	answer(w, http.StatusAccepted, res)
}

func (s *Server) publishBatch(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r, maxBatch)
	if !ok {
		return
	}
	var req struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) == 0 || len(req.Messages) > 100 {
		refuse(w, http.StatusBadRequest, "envelope.malformed", "the body must be {\"messages\": [1 to 100 envelopes]}")
		return
	}
	now := time.Now()
	out := struct {
		Results []result `json:"results"`
	}{make([]result, len(req.Messages))}
	for i, m := range req.Messages {
		out.Results[i] = s.accept(m, now)
	}
	s.woken()
	answer(w, http.StatusOK, out)
}

type message struct {
	ReceiptHandle string          `json:"receipt_handle"`
	MessageType   string          `json:"message_type"`
	CorrelationID string          `json:"correlation_id"`
	Topic         string          `json:"topic"`
	ProducerID    string          `json:"producer_id"`
	ReceiveCount  int             `json:"receive_count"`
	EnqueuedAt    string          `json:"enqueued_at"`
	Envelope      json.RawMessage `json:"envelope"`
}

// handle encodes a message's sequence number (and padding, for the size of
// a real handle) as a receipt handle.
func handle(seq uint64) string {
	var b [handleSize]byte
	binary.BigEndian.PutUint64(b[:8], seq)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func parseHandle(h string) (uint64, bool) {
	b, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil || len(b) != handleSize {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[:8]), true
}

// take moves up to max ready messages in flight; it returns them and, when
// there were none, the channel that a publish closes.
func (s *Server) take(max int) ([]*stored, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(max, len(s.ready))
	if n == 0 {
		s.waiting = true
		return nil, s.wake
	}
	got := make([]*stored, n)
	copy(got, s.ready)
	clear(s.ready[:n])
	s.ready = s.ready[n:]
	for _, m := range got {
		s.inFlight[m.seq] = m
	}
	return got, nil
}

func (s *Server) receive(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	maxN, wait := 1, 0
	var err error
	if v := q.Get("max"); v != "" {
		if maxN, err = strconv.Atoi(v); err != nil || maxN < 1 || maxN > maxReceive {
			refuse(w, http.StatusBadRequest, "pull.bad_request", "max must be an integer from 1 to 10")
			return
		}
	}
	if v := q.Get("wait"); v != "" {
		if wait, err = strconv.Atoi(v); err != nil || wait < 0 || wait > maxWait {
			refuse(w, http.StatusBadRequest, "pull.bad_request", "wait must be an integer from 0 to 20")
			return
		}
	}
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	var got []*stored
	for {
		var wake chan struct{}
		got, wake = s.take(maxN)
		left := time.Until(deadline)
		if got != nil || left <= 0 {
			break
		}
		t := time.NewTimer(left)
		select {
		case <-wake:
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
		t.Stop()
	}
	out := struct {
		Messages []message `json:"messages"`
	}{make([]message, len(got))}
	for i, m := range got {
		out.Messages[i] = message{
			ReceiptHandle: handle(m.seq), MessageType: m.messageType, CorrelationID: m.correlationID,
			Topic: "som." + m.messageType, ProducerID: producerID, ReceiveCount: 1,
			EnqueuedAt: m.enqueuedAt.UTC().Format("2006-01-02T15:04:05.000Z"), Envelope: m.envelope,
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	answer(w, http.StatusOK, out)
}

type failure struct {
	ReceiptHandle string `json:"receipt_handle"`
	Code          string `json:"code"`
	Message       string `json:"message"`
}

func (s *Server) ack(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r, maxSettle)
	if !ok {
		return
	}
	var req struct {
		ReceiptHandles []string `json:"receipt_handles"`
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.ReceiptHandles) == 0 || len(req.ReceiptHandles) > maxReceive {
		refuse(w, http.StatusBadRequest, "pull.bad_request", "the body must be {\"receipt_handles\": [1 to 10 handles]}")
		return
	}
	out := struct {
		Acked  []string  `json:"acked"`
		Failed []failure `json:"failed"`
	}{Acked: make([]string, 0, len(req.ReceiptHandles)), Failed: []failure{}}
	s.mu.Lock()
	for _, h := range req.ReceiptHandles {
		seq, ok := parseHandle(h)
		if ok {
			_, ok = s.inFlight[seq]
			delete(s.inFlight, seq)
		}
		if ok {
			out.Acked = append(out.Acked, h)
		} else {
			out.Failed = append(out.Failed, failure{h, "ReceiptHandleIsInvalid", "no message is in flight with this handle"})
		}
	}
	s.mu.Unlock()
	answer(w, http.StatusOK, out)
}
