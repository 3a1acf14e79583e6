package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sombus/sombus/client"
	"github.com/sombus/sombus/internal/server/servertest"
)

// recorder is a slog.Handler that keeps every record, as text.
type recorder struct {
	mu   sync.Mutex
	recs []logged
}

type logged struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	l := logged{level: rec.Level, msg: rec.Message, attrs: map[string]string{}}
	rec.Attrs(func(a slog.Attr) bool {
		l.attrs[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	r.recs = append(r.recs, l)
	r.mu.Unlock()
	return nil
}

func (r *recorder) records() []logged {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]logged(nil), r.recs...)
}

// Consume logs what it retries or recovers from at Warn, with snake_case
// keys: a failed receive (here a 503 the transport does not retry), a
// failed handler and a failed acknowledgement. No record carries the
// secret, a token or a receipt handle.
func TestConsumeLogs(t *testing.T) {
	t.Parallel()
	n := servertest.Start(t, servertest.Options{})
	px := newProxy(t, n.URL)
	e := setupOn(t, n, px.URL, client.ConnectionParams{})
	e.publish(t, []client.Envelope{envelope("a", "s", nil)})
	consumer, err := client.NewConsumer(client.Config{BaseURL: px.URL, ClientID: e.consID, ClientSecret: e.consSec, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	var receives atomic.Int64
	var tokens sync.Map
	ack503 := onceFor("/ack", func(w http.ResponseWriter, r *http.Request, _ func() *http.Response) {
		refuse(w, http.StatusServiceUnavailable, client.RuleQueueUnavailable)
	})
	px.set(func(w http.ResponseWriter, r *http.Request, pass func() *http.Response) bool {
		if tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "); tok != "" {
			tokens.Store(tok, true)
		}
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/messages") && receives.Add(1) == 1 {
			refuse(w, http.StatusServiceUnavailable, client.RuleQueueUnavailable)
			return true
		}
		return ack503(w, r, pass)
	})
	rec := &recorder{}
	var handles sync.Map
	var handled atomic.Int64
	stop := consume(t, consumer, func(ctx context.Context, m *client.Message) error {
		handles.Store(m.ReceiptHandle, true)
		if handled.Add(1) == 1 {
			return errors.New("not yet")
		}
		return nil
	}, client.ConsumeOptions{Wait: time.Second, Backoff: func(int) time.Duration { return 0 },
		Logger: slog.New(rec)})
	waitFor(t, "the three failures logged", 20*time.Second, func() bool {
		return len(rec.records()) >= 3 && handled.Load() >= 2
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	want := map[string]bool{
		"sombus: receive failed, retrying":         false,
		"sombus: handler failed, message released": false,
		"sombus: acknowledge failed":               false,
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	for _, r := range rec.records() {
		line := fmt.Sprintf("%s %v", r.msg, r.attrs)
		if r.level != slog.LevelWarn {
			t.Errorf("logged at %s, want WARN: %s", r.level, line)
		}
		if _, ok := want[r.msg]; ok {
			want[r.msg] = true
		}
		if r.attrs["error"] == "" {
			t.Errorf("record without an error: %s", line)
		}
		for k := range r.attrs {
			if !snake.MatchString(k) {
				t.Errorf("key %q is not snake_case", k)
			}
		}
		secrets := []string{e.consSec}
		tokens.Range(func(k, _ any) bool { secrets = append(secrets, k.(string)); return true })
		handles.Range(func(k, _ any) bool { secrets = append(secrets, k.(string)); return true })
		for _, s := range secrets {
			if strings.Contains(line, s) {
				t.Errorf("a record carries a secret, token or receipt handle (message %q)", r.msg)
			}
		}
	}
	for msg, seen := range want {
		if !seen {
			t.Errorf("no record %q among %d", msg, len(rec.records()))
		}
	}
	if r := findRecord(rec.records(), "sombus: handler failed, message released"); r != nil &&
		(r.attrs["message_id"] != "a" || r.attrs["receive_count"] != "1") {
		t.Errorf("handler record %v, want message_id a, receive_count 1", r.attrs)
	}
	if r := findRecord(rec.records(), "sombus: receive failed, retrying"); r != nil && r.attrs["retry_in"] == "" {
		t.Errorf("receive record %v has no retry_in", r.attrs)
	}
}

func findRecord(recs []logged, msg string) *logged {
	for i := range recs {
		if recs[i].msg == msg {
			return &recs[i]
		}
	}
	return nil
}
